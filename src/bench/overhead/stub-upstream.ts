// A tiny OpenAI-compatible upstream for the overhead benchmarks: answers every completion at once
// (streamed: one chunk per max_tokens, default 1), so what is measured is the proxy in front of it,
// not a model.
// Run as a child: `node stub-upstream.js <count>` prints `stub <url>` per server.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

const CREATED = 1_700_000_000;

async function sse(res: ServerResponse, id: string, model: string, chat: boolean, chunks: number): Promise<void> {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  const object = chat ? 'chat.completion.chunk' : 'text_completion';
  for (let k = 0; k < chunks; k++) {
    const finish = k === chunks - 1 ? 'length' : null;
    const choice = chat
      ? { index: 0, delta: { role: 'assistant', content: ' hello' }, finish_reason: finish }
      : { index: 0, text: ' hello', finish_reason: finish };
    res.write(`data: ${JSON.stringify({ id, object, created: CREATED, model, choices: [choice] })}\n\n`);
    // Writes of one tick leave as one packet: a turn of the event loop between chunks makes each
    // its own read on the proxy's side, as a model's tokens (milliseconds apart) are.
    if (chunks > 1) await new Promise<void>((r) => setImmediate(r));
    if (res.destroyed) return;
  }
  res.write(
    `data: ${JSON.stringify({ id, object, created: CREATED, model, choices: [], usage: { prompt_tokens: 0, completion_tokens: chunks, total_tokens: chunks } })}\n\n`,
  );
  res.end('data: [DONE]\n\n');
}

function handle(req: IncomingMessage, res: ServerResponse, n: { i: number }): void {
  if (req.method === 'GET') {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(req.url === '/v1/models' ? '{"object":"list","data":[]}' : '{"status":"ok"}');
    return;
  }
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    let body: { model?: string; stream?: boolean; max_tokens?: number } = {};
    try {
      body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as typeof body;
    } catch {
      res.writeHead(400).end();
      return;
    }
    const chat = req.url === '/v1/chat/completions';
    const id = `cmpl-${++n.i}`;
    const model = body.model ?? 'stub';
    if (body.stream)
      return void sse(res, id, model, chat, Math.max(1, Math.min(10_000, Math.floor(body.max_tokens ?? 1))));
    const choice = chat
      ? { index: 0, message: { role: 'assistant', content: ' hello' }, finish_reason: 'length' }
      : { index: 0, text: ' hello', finish_reason: 'length' };
    const out = JSON.stringify({
      id,
      object: chat ? 'chat.completion' : 'text_completion',
      created: CREATED,
      model,
      choices: [choice],
      usage: { prompt_tokens: 0, completion_tokens: 1, total_tokens: 1 },
    });
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(out) });
    res.end(out);
  });
}

async function main(count: number): Promise<void> {
  const n = { i: 0 };
  for (let k = 0; k < count; k++) {
    const server = createServer((req, res) => handle(req, res, n));
    server.keepAliveTimeout = 60_000;
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    process.stdout.write(`stub http://127.0.0.1:${(server.address() as AddressInfo).port}\n`);
  }
  process.on('SIGTERM', () => process.exit(0));
}

if (process.argv[2] === '--stub-upstream') void main(Number(process.argv[3] ?? '1'));
