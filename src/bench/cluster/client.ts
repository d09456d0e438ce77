// One streaming OpenAI request, timed on the client: TTFT is the arrival of the first SSE event
// carrying generated text; E2E is the end of the stream. Usage comes from the final usage chunk.
import { type Dispatcher, request } from 'undici';

export interface Sample {
  index: number;
  /** ms from the start of the run. */
  sentAt: number;
  /** How late the send was against its schedule (load-generator lag), ms. */
  lagMs: number;
  ttftMs: number | null;
  e2eMs: number;
  status: number;
  instance: string | null;
  /** The router's predicted TTFT for it (x-kvrouter-predicted-ttft-ms; absent: none, e.g. bypassed). */
  predictedTtftMs?: number | null;
  /** Sent straight to an engine, not through the router (bench cluster --bypass). */
  bypassed?: boolean;
  promptTokens: number;
  cachedTokens: number;
  completionTokens: number;
  error: string | null;
}

// A content-bearing event: completions carry `"text":"<non-empty>`, chat deltas `"content":"<non-empty>`.
const TOKEN_EVENT = /"(?:text|content)":"[^"]/;

export interface SendOptions {
  dispatcher: Dispatcher;
  url: string;
  body: string;
  headers: Record<string, string>;
  signal: AbortSignal;
}

export async function sendStreaming(o: SendOptions): Promise<Omit<Sample, 'index' | 'sentAt' | 'lagMs'>> {
  const start = performance.now();
  const out = {
    ttftMs: null as number | null,
    e2eMs: 0,
    status: 0,
    instance: null as string | null,
    predictedTtftMs: null as number | null,
    promptTokens: 0,
    cachedTokens: 0,
    completionTokens: 0,
    error: null as string | null,
  };
  try {
    const res = await request(o.url, {
      method: 'POST',
      body: o.body,
      headers: { 'content-type': 'application/json', ...o.headers },
      dispatcher: o.dispatcher,
      signal: o.signal,
    });
    out.status = res.statusCode;
    const inst = res.headers['x-kvrouter-instance'];
    out.instance = typeof inst === 'string' ? inst : null;
    const predicted = Number(res.headers['x-kvrouter-predicted-ttft-ms']);
    out.predictedTtftMs =
      res.headers['x-kvrouter-predicted-ttft-ms'] !== undefined && predicted >= 0 ? predicted : null;
    if (res.statusCode !== 200) {
      out.error = `HTTP ${res.statusCode}: ${(await res.body.text()).slice(0, 200)}`;
    } else {
      let carry = '';
      for await (const chunk of res.body) {
        carry += (chunk as Buffer).toString('utf8');
        let sep: number;
        while ((sep = carry.indexOf('\n\n')) >= 0) {
          const ev = carry.slice(0, sep);
          carry = carry.slice(sep + 2);
          if (out.ttftMs === null && TOKEN_EVENT.test(ev)) out.ttftMs = performance.now() - start;
          if (ev.includes('"usage":{')) {
            const u = (
              JSON.parse(ev.slice(ev.indexOf('{'))) as {
                usage?: {
                  prompt_tokens?: number;
                  completion_tokens?: number;
                  prompt_tokens_details?: { cached_tokens?: number };
                };
              }
            ).usage;
            out.promptTokens = u?.prompt_tokens ?? 0;
            out.completionTokens = u?.completion_tokens ?? 0;
            out.cachedTokens = u?.prompt_tokens_details?.cached_tokens ?? 0;
          } else if (ev.startsWith('data: {"error"')) {
            out.error = ev.slice(6, 206);
          }
        }
      }
    }
  } catch (err) {
    out.error = (err as Error).name === 'AbortError' ? 'timeout (run deadline)' : String((err as Error).message ?? err);
  }
  out.e2eMs = performance.now() - start;
  return out;
}
