// KV-event payloads in flight (published by an engine, not yet delivered to the routers), cut
// from recycled chunks (src/common/chunk-arena.ts). A payload is read once, at its delivery, by
// every replica's decoder (which copies what it keeps), and is released then; a 1,024-engine run
// publishes ~40 KB of payload per request, and recycled chunks allocate nothing once it is warm.
import { type ArenaChunk, ChunkArena } from '../common/chunk-arena.js';

export type PayloadChunk = ArenaChunk<Uint8Array>;

/** Chunk size; a larger payload gets a buffer of its own. */
const CHUNK_BYTES = 1 << 20;

export function payloadArena(): ChunkArena<Uint8Array> {
  return new ChunkArena((n) => new Uint8Array(n), CHUNK_BYTES);
}
