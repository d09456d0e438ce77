// Disaggregated roles of the simulated engine, in both engines' protocols (docs/disaggregated.md).
//   vLLM connector (NIXL style): a request with kv_transfer_params.do_remote_decode is a prefill leg:
//     it answers with kv_transfer_params {do_remote_prefill: true, remote_engine_id, remote_block_ids,
//     remote_request_id, remote_host, remote_port, tp_size}. A request carrying those is a decode leg:
//     it fetches the prefilled KV from remote_host:remote_port (this simulator's side channel is its
//     HTTP port), waits the modelled transfer time, and imports the blocks (stored events). Missing
//     fields: the decode engine prefills itself, as vLLM does ("Got invalid KVTransferParams").
//   SGLang bootstrap: a prefill-role engine runs a request carrying bootstrap_room as its prefill
//     (one token) and hands the room's KV out when done; a decode-role engine waits for that room on
//     bootstrap_host:bootstrap_port (here: the prefill engine's HTTP port), or fails the request.
// Timing of the passes stays the mocker's; the transfer wait is blocks x bytes / bandwidth.
import { request } from 'undici';
import type { EngineBackend } from './backend.js';
import { badRequest, errorObject, HttpError } from './errors.js';
import type { Body } from './params.js';

export const ENGINE_SIM_ROLES = ['both', 'prefill', 'decode'] as const;
export type EngineSimRole = (typeof ENGINE_SIM_ROLES)[number];

/** How long a prefilled prompt's KV stays available to its decode leg. */
const KEEP_MS = 120_000;

interface Handoff {
  promptTokens: number;
  at: number;
}

/** Prompts prefilled here for a remote decode, by key (vLLM request id, or "room:<n>" for SGLang). */
export class TransferBoard {
  private readonly ready = new Map<string, Handoff>();
  private readonly waiters = new Map<string, Array<(h: Handoff | null) => void>>();

  publish(key: string, promptTokens: number, now: number): void {
    for (const [k, h] of this.ready) if (now - h.at > KEEP_MS) this.ready.delete(k);
    const h = { promptTokens, at: now };
    this.ready.set(key, h);
    for (const w of this.waiters.get(key) ?? []) w(h);
    this.waiters.delete(key);
  }

  /** The handoff once published, or null after `timeoutMs`. */
  wait(key: string, timeoutMs: number): Promise<Handoff | null> {
    const h = this.ready.get(key);
    if (h) return Promise.resolve(h);
    return new Promise((resolve) => {
      const list = this.waiters.get(key) ?? [];
      const done = (v: Handoff | null) => {
        clearTimeout(timer);
        resolve(v);
      };
      const timer = setTimeout(() => {
        const l = this.waiters.get(key);
        if (l) {
          const i = l.indexOf(done);
          if (i >= 0) l.splice(i, 1);
          if (l.length === 0) this.waiters.delete(key);
        }
        resolve(null);
      }, timeoutMs);
      timer.unref(); // a waiting decode leg does not keep the engine alive at shutdown
      list.push(done);
      this.waiters.set(key, list);
    });
  }
}

export interface DisaggPlan {
  /** Force max_tokens (a prefill leg computes one token). */
  maxTokens?: number;
  /** The prompt's KV was transferred in: import it. */
  imported: boolean;
  /** Extra top-level response fields. */
  fields?: Record<string, unknown>;
  onFinished?: (ok: boolean) => void;
}

const obj = (v: unknown): Record<string, unknown> | null =>
  typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : null;
const hostForUrl = (h: string) => (h.includes(':') ? `[${h}]` : h);

/** Ask a prefill engine for a handoff (long poll): its prompt length, or null. */
async function fetchHandoff(host: string, port: number, key: string, timeoutMs: number): Promise<number | null> {
  try {
    const res = await request(
      `http://${hostForUrl(host)}:${port}/kvsim/kv/${encodeURIComponent(key)}?timeout_ms=${timeoutMs}`,
      {
        signal: AbortSignal.timeout(timeoutMs + 5000),
      },
    );
    const text = await res.body.text();
    if (res.statusCode !== 200) return null;
    const n = (JSON.parse(text) as { prompt_tokens?: unknown }).prompt_tokens;
    return typeof n === 'number' ? n : null;
  } catch {
    return null;
  }
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Read a request's disaggregation fields and do the decode side's waiting; throws HttpError on what it cannot serve. */
export async function disaggregate(
  backend: EngineBackend,
  body: Body,
  requestId: string,
  prompts: readonly Uint32Array[],
): Promise<DisaggPlan> {
  const role = backend.disagg.role;
  const promptTokens = prompts.reduce((s, p) => s + p.length, 0);
  const kvp = obj(body.kv_transfer_params);
  const board = backend.disagg.board;
  if (kvp?.do_remote_decode === true) {
    if (role === 'decode')
      throw badRequest(
        'this engine is a decode instance: it does not serve prefill legs (do_remote_decode)',
        'kv_transfer_params',
      );
    if (prompts.length !== 1) throw badRequest('a prefill leg takes one prompt', 'prompt');
    const bs = backend.blockSize;
    return {
      imported: false,
      maxTokens: 1,
      fields: {
        kv_transfer_params: {
          do_remote_prefill: true,
          do_remote_decode: false,
          remote_block_ids: Array.from({ length: Math.ceil(promptTokens / bs) }, (_, i) => i),
          remote_engine_id: backend.engineId,
          remote_request_id: requestId,
          remote_host: backend.disagg.host,
          remote_port: backend.disagg.port,
          tp_size: 1,
        },
      },
      onFinished: (ok) => ok && board.publish(requestId, promptTokens, Date.now()),
    };
  }
  if (kvp?.do_remote_prefill === true) {
    if (role === 'prefill')
      throw badRequest(
        'this engine is a prefill instance: it does not serve decode legs (do_remote_prefill)',
        'kv_transfer_params',
      );
    const need = ['remote_engine_id', 'remote_block_ids', 'remote_request_id', 'remote_host', 'remote_port'];
    const missing = need.filter((k) => kvp[k] === undefined || kvp[k] === null);
    if (missing.length > 0 || typeof kvp.remote_host !== 'string' || typeof kvp.remote_port !== 'number') {
      process.stderr.write(
        `${backend.engineId}: got invalid KVTransferParams (missing ${missing.join(', ') || 'host/port'}): prefilling locally\n`,
      );
      return { imported: false };
    }
    const n = await fetchHandoff(
      kvp.remote_host,
      kvp.remote_port,
      String(kvp.remote_request_id),
      backend.disagg.transferTimeoutMs,
    );
    if (n === null || n !== promptTokens) {
      // vLLM's kv_load_failure_policy "recompute": a failed transfer costs time, not the request.
      process.stderr.write(
        `${backend.engineId}: KV transfer from ${kvp.remote_engine_id} failed (${n === null ? 'no handoff' : `prompt ${n} != ${promptTokens} tokens`}): prefilling locally\n`,
      );
      return { imported: false };
    }
    await sleep(backend.disagg.transferMs(promptTokens));
    return { imported: true };
  }
  if (body.bootstrap_room !== undefined && body.bootstrap_room !== null && role !== 'both') {
    const room = body.bootstrap_room;
    if (typeof room !== 'number' || !Number.isSafeInteger(room) || room < 0)
      throw badRequest('engine-sim takes one bootstrap_room per request: a non-negative integer', 'bootstrap_room');
    const key = `room:${room}`;
    if (role === 'prefill')
      return { imported: false, maxTokens: 1, onFinished: (ok) => ok && board.publish(key, promptTokens, Date.now()) };
    const host = body.bootstrap_host;
    const port = body.bootstrap_port;
    if (typeof host !== 'string' || typeof port !== 'number')
      throw badRequest('a decode leg needs bootstrap_host and bootstrap_port', 'bootstrap_host');
    const n = await fetchHandoff(host, port, key, backend.disagg.transferTimeoutMs);
    if (n === null)
      throw new HttpError(503, `KV transfer for bootstrap room ${room} from ${host}:${port} failed or timed out`);
    await sleep(backend.disagg.transferMs(promptTokens));
    return { imported: true };
  }
  return { imported: false };
}

/** GET /kvsim/kv/<key>?timeout_ms=N: a prefilled prompt's handoff (long poll), 504 when it does not come. */
export async function serveHandoff(
  backend: EngineBackend,
  key: string,
  timeoutMs: number,
): Promise<{ status: number; body: unknown }> {
  const h = await backend.disagg.board.wait(key, Math.min(Math.max(0, timeoutMs), 600_000));
  return h
    ? { status: 200, body: { prompt_tokens: h.promptTokens } }
    : { status: 504, body: errorObject(504, `no prefilled KV for ${key}`) };
}
