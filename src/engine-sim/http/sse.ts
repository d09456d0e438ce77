// Server-sent events the way vLLM streams them: `data: <json>\n\n`, ending with `data: [DONE]`.
import type { ServerResponse } from 'node:http';

export function startSse(res: ServerResponse, headers: Record<string, string>): void {
  res.writeHead(200, {
    'content-type': 'text/event-stream; charset=utf-8',
    'cache-control': 'no-cache',
    connection: 'keep-alive',
    ...headers,
  });
}

export function sendEvent(res: ServerResponse, data: unknown): void {
  if (!res.writableEnded) res.write(`data: ${JSON.stringify(data)}\n\n`);
}

export function endSse(res: ServerResponse): void {
  if (!res.writableEnded) res.end('data: [DONE]\n\n');
}
