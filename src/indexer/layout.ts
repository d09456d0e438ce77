// The block index's shared helpers: the record mix that signs a block's holder set, holder and
// candidate shapes, u64 split/join, growth of the flat arrays. The row layouts (strides, field
// offsets) are records.ts's. See README.md (module map).
import type { Medium } from './tiers.js';

export const NONE = -1;

/**
 * Even 32-bit mix of a record's (holder, expiry): XOR-ing it keeps the signature odd, hence never
 * 0 = empty. Expiry takes part so that speculative blocks with different expiries never compare equal.
 */
export function recordMix(h: number, expiresAt: number): number {
  let x = Math.imul(h + 1, 0x9e3779b1) ^ Math.imul((expiresAt >>> 0) ^ ((expiresAt / 4294967296) | 0), 0xc2b2ae35);
  x ^= x >>> 16;
  x = Math.imul(x, 0x85ebca6b);
  x ^= x >>> 13;
  return (x << 1) | 0;
}

export interface Holder {
  key: string;
  backend: string;
  dpRank: number;
  medium: Medium;
  group: number;
  speculative: boolean;
  ttlMs: number;
  head: number;
  tail: number;
  count: number;
  alive: boolean;
  /** Allocation clock: advances by one per block stored (a touch does not). */
  clock: number;
  /** Most blocks held at once: the cache's size once it has evicted. */
  peak: number;
  /** Blocks removed by events (evictions): a holder that never evicted is not full. */
  evicted: number;
}

export interface Candidate {
  instance: string;
  dpRank: number;
}

/** A speculative holder's key: one per (instance, dp rank, TTL class). */
export const specKey = (instance: string, dpRank: number, ttlMs: number): string =>
  `s\u0000${instance}\u0000${dpRank}\u0000${ttlMs}`;
export const hashView = (a: BigUint64Array): Int32Array => new Int32Array(a.buffer, a.byteOffset, a.length * 2);
export const splitScratch = new BigUint64Array(1);
/** Where routerKey() writes its answer [lo, hi]. */
export const keyOut = new Int32Array(2);
export const splitView = new Int32Array(splitScratch.buffer);
export function join(lo: number, hi: number): bigint {
  splitView[0] = lo;
  splitView[1] = hi;
  return splitScratch[0];
}

export function grow<T extends Int32Array | Uint8Array | Float64Array>(a: T, n: number): T {
  const b = new (a.constructor as new (n: number) => T)(n);
  b.set(a);
  return b;
}
