// LMCache adapter. LMCache's CacheStoreEvent has vLLM's BlockStored fields (up to lora_name):
// one event per chunk, block_hashes = [chunk hash] (signed, LMCache's own), block_size = the chunk's
// token count (256 by default, the last chunk may be shorter), parent = the previous chunk's hash,
// medium "cpu" (lowercase; recent versions "CPU"; case is normalized by the tier map).
// Chunks that are a multiple of the registered block size are split into router blocks
// (rechunk.ts). LMCache publishes no BlockRemoved/AllBlocksCleared for its evictions, so its blocks
// leave the index only through purges (disconnect, restart, unregister).
import type { DecodeContext } from './context.js';
import type { Parsed } from './engine-event.js';
import { type BatchInfo, type Normalized, normalizeEngineEvent } from './normalize.js';
import { parseVllmEvent } from './vllm.js';

export function parseLmcacheEvent(raw: unknown): Parsed {
  return parseVllmEvent(raw);
}

export function decodeLmcacheEvent(raw: unknown, ctx: DecodeContext, b: BatchInfo): Normalized {
  const p = parseLmcacheEvent(raw);
  return 'kind' in p ? normalizeEngineEvent(p, ctx, b) : p;
}
