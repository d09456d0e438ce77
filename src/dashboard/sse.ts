// Server-sent events framing (text/event-stream) for the dashboard stream.
const encoder = new TextEncoder();

/** One SSE message: `event:` name and a JSON `data:` line (JSON never contains a raw newline). */
export function sseFrame(event: string, data: unknown): Uint8Array {
  return encoder.encode(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
}

/** A comment line: keeps proxies from closing an idle stream, ignored by EventSource. */
export function sseComment(text: string): Uint8Array {
  return encoder.encode(`: ${text}\n\n`);
}

export const SSE_HEADERS: Record<string, string> = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache, no-transform',
  // nginx and similar proxies buffer responses unless told not to.
  'x-accel-buffering': 'no',
};
