// The outer batch: `[ts, events]` (vLLM <= 0.9, old SGLang), `[ts, events, dp_rank]` (everything
// since), a map `{ts, events, data_parallel_rank | attn_dp_rank | dp_rank}` (tolerated), and for
// standardized publishers also a bare event map or a bare list of event maps.
import type { Bad } from './engine-event.js';
import { isRecord, optNumber, optUint } from './values.js';

export interface RawBatch {
  /** Unix ms, when the batch carries a timestamp. */
  tsMs: number | null;
  events: unknown[];
  /** The batch's rank (overrides the registered one), null when absent. */
  dpRank: number | null;
}

// Engines stamp seconds (float); standardized publishers may stamp ms. 1e11 s is year 5138.
function toMs(ts: number | null): number | null {
  if (ts === null) return null;
  return ts < 1e11 ? ts * 1000 : ts;
}

export function readBatch(v: unknown): RawBatch | Bad {
  if (Array.isArray(v)) {
    if (
      v.length >= 2 &&
      Array.isArray(v[1]) &&
      (typeof v[0] === 'number' || typeof v[0] === 'bigint' || v[0] === null)
    ) {
      const ts = optNumber(v[0]);
      const rank = optUint(v[2]);
      if (ts === undefined) return { error: 'batch ts is not a number' };
      if (rank === undefined) return { error: 'batch dp rank is not a non-negative integer' };
      return { tsMs: toMs(ts), events: v[1], dpRank: rank };
    }
    if (v.every(isRecord)) return { tsMs: null, events: v, dpRank: null };
    return { error: 'batch is neither [ts, events(, dp_rank)] nor a list of event maps' };
  }
  if (isRecord(v)) {
    if ('events' in v) {
      if (!Array.isArray(v.events)) return { error: 'batch.events is not a list' };
      const ts = optNumber(v.ts ?? v.timestamp);
      const rank = optUint(v.data_parallel_rank ?? v.attn_dp_rank ?? v.dp_rank);
      if (ts === undefined) return { error: 'batch ts is not a number' };
      if (rank === undefined) return { error: 'batch dp rank is not a non-negative integer' };
      return { tsMs: toMs(ts), events: v.events, dpRank: rank };
    }
    if ('event_type' in v || 'type' in v) return { tsMs: null, events: [v], dpRank: null };
  }
  return { error: 'payload is not a KV event batch' };
}
