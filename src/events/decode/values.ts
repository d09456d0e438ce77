// Field coercers shared by the engine adapters. Each returns `undefined` when the value is not of
// the expected shape, so a caller can tell "absent/null" from "malformed".
import { U64_MAX } from '../../common/u64.js';
import type { U32List, U64List } from '../../indexer/kv-event.js';

const I64_MIN = -(1n << 63n);
const MAX_BLOCK_SIZE = 1 << 20;

/** One hash: u64 int, signed i64 (two's complement), or bytes (the last 8 bytes, as vLLM's int form). */
export function hashValue(v: unknown): bigint | undefined {
  if (typeof v === 'number') {
    if (!Number.isSafeInteger(v)) return undefined;
    return v >= 0 ? BigInt(v) : BigInt.asUintN(64, BigInt(v));
  }
  if (typeof v === 'bigint') {
    if (v > U64_MAX || v < I64_MIN) return undefined;
    return v >= 0n ? v : BigInt.asUintN(64, v);
  }
  if (v instanceof Uint8Array) {
    // vLLM with VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0 sends the raw digest; its int form is the
    // digest's low 64 bits, so both modes of one engine produce the same u64.
    if (v.byteLength === 0 || v.byteLength > 64) return undefined;
    const start = Math.max(0, v.byteLength - 8);
    let h = 0n;
    for (let i = start; i < v.byteLength; i++) h = (h << 8n) | BigInt(v[i]);
    return h;
  }
  return undefined;
}

export function hashList(v: unknown): U64List | undefined {
  // The fast decoder (fast-unpack.ts) hands over int lists already as u64.
  if (v instanceof BigUint64Array) return v;
  if (!Array.isArray(v)) return undefined;
  const out = new Array<bigint>(v.length);
  for (let i = 0; i < v.length; i++) {
    const h = hashValue(v[i]);
    if (h === undefined) return undefined;
    out[i] = h;
  }
  return out;
}

/** Optional hash: null/undefined -> null. */
export function optHash(v: unknown): bigint | null | undefined {
  return v === null || v === undefined ? null : hashValue(v);
}

function isU32(t: unknown): t is number {
  return typeof t === 'number' && Number.isInteger(t) && t >= 0 && t <= 0xffffffff;
}

export interface Tokens {
  tokens: U32List;
  /** EAGLE bigram mode: the wire carried [t, t_next] pairs; `tokens` holds the first of each. */
  eagle: boolean;
}

/** Token ids as u32 ints, or EAGLE [t, t_next] pairs reduced to t (the block's own token). */
export function tokenList(v: unknown): Tokens | undefined {
  if (v === null || v === undefined) return { tokens: [], eagle: false };
  if (v instanceof Uint32Array) return { tokens: v, eagle: false };
  if (!Array.isArray(v)) return undefined;
  if (v.length > 0 && Array.isArray(v[0])) {
    const out = new Array<number>(v.length);
    for (let i = 0; i < v.length; i++) {
      const p = v[i];
      if (!Array.isArray(p) || p.length !== 2 || !isU32(p[0]) || !isU32(p[1])) return undefined;
      out[i] = p[0];
    }
    return { tokens: out, eagle: true };
  }
  for (let i = 0; i < v.length; i++) if (!isU32(v[i])) return undefined;
  return { tokens: v as number[], eagle: false };
}

/** Optional string: null/absent -> null; anything but a string -> undefined (malformed). */
export function optString(v: unknown): string | null | undefined {
  if (v === null || v === undefined) return null;
  return typeof v === 'string' ? v : undefined;
}

/** Optional non-negative integer (u32-ish: ranks, group indices, ids). */
export function optUint(v: unknown): number | null | undefined {
  if (v === null || v === undefined) return null;
  if (typeof v === 'number' && Number.isInteger(v) && v >= 0) return v;
  if (typeof v === 'bigint' && v >= 0n && v <= BigInt(Number.MAX_SAFE_INTEGER)) return Number(v);
  return undefined;
}

export function optBlockSize(v: unknown): number | null | undefined {
  const n = optUint(v);
  if (n === undefined || n === 0 || (n !== null && n > MAX_BLOCK_SIZE)) return undefined;
  return n;
}

/** Optional u64 (event ids): ints, bigints or decimal strings. */
export function optU64(v: unknown): bigint | null | undefined {
  if (v === null || v === undefined) return null;
  if (typeof v === 'number') return Number.isSafeInteger(v) && v >= 0 ? BigInt(v) : undefined;
  if (typeof v === 'bigint') return v >= 0n && v <= U64_MAX ? v : undefined;
  if (typeof v === 'string' && /^\d{1,20}$/.test(v)) {
    const b = BigInt(v);
    return b <= U64_MAX ? b : undefined;
  }
  return undefined;
}

/** A finite number (timestamps). */
export function optNumber(v: unknown): number | null | undefined {
  if (v === null || v === undefined) return null;
  if (typeof v === 'number') return Number.isFinite(v) ? v : undefined;
  if (typeof v === 'bigint') return Number(v);
  return undefined;
}

export function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v) && !(v instanceof Uint8Array);
}
