// GET /debug/cache: the engine's true cached blocks per tier, as router-standard seq hashes
// (XXH3, --hash-seed) rendered as decimal strings, so tests can diff a router's index against it.
import type { BlockContent } from '../core/block.js';
import type { CachedBlockView, CoreStats } from '../core/engine-core.js';

export interface RankCacheSnapshot {
  dpRank: number;
  stats: CoreStats;
  gpu: CachedBlockView[];
  cpu: BlockContent[];
  gpuCapacity: number;
  cpuCapacity: number;
}

export interface DebugCacheMeta {
  engineId: string;
  model: string;
  blockSize: number;
  hashSeed: bigint;
  eventFormat: string;
  /** Render an engine hash as it appears on the wire (signed for SGLang). */
  wireHash: (h: bigint) => string;
}

const byDepthThenHash = (a: BlockContent, b: BlockContent): number =>
  a.depth - b.depth || (a.routerHash < b.routerHash ? -1 : a.routerHash > b.routerHash ? 1 : 0);

function blockDetail(b: BlockContent & { refs?: number }, wireHash: (h: bigint) => string): Record<string, unknown> {
  return {
    seq_hash: b.routerHash.toString(),
    engine_hash: wireHash(b.hash),
    parent_engine_hash: b.parent === null ? null : wireHash(b.parent),
    depth: b.depth,
    lora_name: b.loraName,
    cache_salt: b.cacheSalt,
    ...(b.refs !== undefined ? { refs: b.refs } : {}),
  };
}

function tier(
  blocks: (BlockContent & { refs?: number })[],
  capacity: number,
  detail: boolean,
  wireHash: (h: bigint) => string,
  extra: Record<string, unknown>,
) {
  const sorted = [...blocks].sort(byDepthThenHash);
  return {
    capacity,
    cached_blocks: sorted.length,
    ...extra,
    seq_hashes: sorted.map((b) => b.routerHash.toString()),
    ...(detail ? { blocks: sorted.map((b) => blockDetail(b, wireHash)) } : {}),
  };
}

export function debugCacheView(meta: DebugCacheMeta, ranks: RankCacheSnapshot[], detail: boolean): unknown {
  return {
    engine_id: meta.engineId,
    model: meta.model,
    block_size: meta.blockSize,
    hash_seed: meta.hashSeed.toString(),
    event_format: meta.eventFormat,
    ranks: ranks.map((r) => ({
      dp_rank: r.dpRank,
      running: r.stats.running,
      waiting: r.stats.waiting,
      kv_cache_usage: r.stats.kvUsage,
      tiers: {
        GPU: tier(r.gpu, r.gpuCapacity, detail, meta.wireHash, { active_blocks: r.stats.activeBlocks }),
        CPU: tier(r.cpu, r.cpuCapacity, detail, meta.wireHash, {}),
      },
    })),
  };
}
