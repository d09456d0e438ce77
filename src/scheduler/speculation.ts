// A booking's speculative insert: its prompt's blocks count as cached on the chosen worker from the
// booking on (until its TTL, or until the engine's KV events confirm them), so requests sharing the
// prefix meet there before any event arrives. What an attempt that failed booked is a phantom: the
// engine never computed it, and a retry or the next request would take it for a cache hit. So a
// failed attempt's free withdraws its claim (a block other bookings still claim stays).
// Scheduler.book/free and a replica's copy of them (src/cluster/remote-bookings.ts) go through
// these two functions.
import type { NamespaceId } from '../indexer/namespace.js';
import type { TieredIndexer } from '../indexer/namespaces.js';
import type { Booking } from './active-sequences.js';

/** Insert the booking's blocks on its worker for ttlMs (0: none), remembering the insert on the booking. */
export function speculate(indexer: TieredIndexer, ns: NamespaceId, b: Booking, ttlMs: number, now: number): void {
  if (ttlMs <= 0 || b.blocks.length === 0) return;
  b.speculative = { ns, insert: indexer.namespace(ns).index.speculate(b.instance, b.dpRank, b.blocks, ttlMs, now) };
}

/** The booking's attempt failed: withdraw its speculative insert (once). Returns the records removed. */
export function withdrawSpeculation(indexer: TieredIndexer, b: Booking, now: number): number {
  const s = b.speculative;
  if (!s) return 0;
  b.speculative = null;
  const space = indexer.find(s.ns);
  return space ? space.index.withdrawSpeculative(b.instance, b.dpRank, b.blocks, s.insert, now) : 0;
}
