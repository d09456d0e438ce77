// Pure decoding entry points: ZMQ frames or a msgpack payload -> normalized KvEvents, given a
// registration context. Never throws: malformed input comes back as counted errors.
import type { PublisherType } from '../registry.js';
import type { KvEvent } from '../../indexer/kv-event.js';
import { readBatch } from './batch.js';
import type { DecodeContext } from './context.js';
import { type LiveFrame, parseLiveFrames } from './frames.js';
import { decodeLmcacheEvent } from './lmcache.js';
import { fastUnpack } from './fast-unpack.js';
import { decodeMooncakeEvent } from './mooncake.js';
import { unpack } from './msgpack.js';
import type { BatchInfo, Normalized } from './normalize.js';
import { decodeSglangEvent } from './sglang.js';
import { decodeVllmEvent } from './vllm.js';

export type EventDecoder = (raw: unknown, ctx: DecodeContext, batch: BatchInfo) => Normalized;

export const ADAPTERS: Readonly<Record<PublisherType, EventDecoder>> = {
  vLLM: decodeVllmEvent,
  SGLang: decodeSglangEvent,
  LMCache: decodeLmcacheEvent,
  Mooncake: decodeMooncakeEvent,
};

export interface DecodedBatch {
  tsMs: number | null;
  /** Effective rank: the batch's, else the registration's. */
  dpRank: number;
  events: KvEvent[];
  /** Malformed events (decode_error), each skipped. */
  errors: number;
  /** Events deliberately not indexed (unknown tag, other KV group, extra keys...). */
  skipped: number;
  /** One example reason of each, for last_error and logs. */
  firstError: string | null;
  firstSkip: string | null;
}

export type PayloadResult = { ok: true; batch: DecodedBatch } | { ok: false; error: string };
export type MessageResult =
  | { ok: true; frame: LiveFrame; batch: DecodedBatch }
  | { ok: false; error: string; frame: LiveFrame | null };

function describe(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** Decode one msgpack payload (a batch) with the registration's adapter. */
export function decodePayload(payload: Uint8Array, ctx: DecodeContext): PayloadResult {
  // The fast decoder covers well-formed batches; anything else is decoded (and its errors reported)
  // by the library.
  const value = fastUnpack(payload);
  return value === undefined ? decodePayloadGeneric(payload, ctx) : decodeValue(value, ctx);
}

/** decodePayload through the msgpack library only (the reference the fast path is tested against). */
export function decodePayloadGeneric(payload: Uint8Array, ctx: DecodeContext): PayloadResult {
  let value: unknown;
  try {
    value = unpack(payload);
  } catch (err) {
    return { ok: false, error: `msgpack: ${describe(err)}` };
  }
  return decodeValue(value, ctx);
}

/** Decode a batch already unpacked from msgpack (the value a payload holds). */
export function decodeValue(value: unknown, ctx: DecodeContext): PayloadResult {
  const raw = readBatch(value);
  if ('error' in raw) return { ok: false, error: raw.error };
  const info: BatchInfo = { dpRank: raw.dpRank ?? ctx.reg.dpRank, tsMs: raw.tsMs };
  const decode = ADAPTERS[ctx.reg.type] ?? decodeVllmEvent;
  const batch: DecodedBatch = {
    tsMs: raw.tsMs,
    dpRank: info.dpRank,
    events: [],
    errors: 0,
    skipped: 0,
    firstError: null,
    firstSkip: null,
  };
  for (const ev of raw.events) {
    let out: Normalized;
    try {
      out = decode(ev, ctx, info);
    } catch (err) {
      // Adapters validate before use; this is a last guard so one event cannot take the stream down.
      out = { error: `adapter: ${describe(err)}` };
    }
    if (Array.isArray(out)) {
      for (const e of out) batch.events.push(e);
    } else if ('error' in out) {
      batch.errors++;
      batch.firstError ??= out.error;
    } else {
      batch.skipped++;
      batch.firstSkip ??= out.skip;
    }
  }
  return { ok: true, batch };
}

/** Decode one live SUB message (`[topic, payload]` or `[topic, seq, payload]`). */
export function decodeMessage(frames: readonly Uint8Array[], ctx: DecodeContext): MessageResult {
  const f = parseLiveFrames(frames);
  if (!f.ok) return { ok: false, error: f.error, frame: null };
  const r = decodePayload(f.value.payload, ctx);
  return r.ok ? { ok: true, frame: f.value, batch: r.batch } : { ok: false, error: r.error, frame: f.value };
}

export { decodeContext, DecodeState, type DecodeContext, type RegistrationDefaults } from './context.js';
export { parseLiveFrames, parseReplayFrames, encodeSeq, END_SEQ, type LiveFrame, type ReplayFrame } from './frames.js';
