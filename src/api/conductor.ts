// Shapes index answers as the Mooncake Conductor `/query` response (and Dynamo's variant).
// Counts are tokens = blocks x block_size; tiers are cumulative (GPU <= CPU <= DISK).
import type { OverlapResult } from '../indexer/block-index.js';

export interface InstanceHit {
  longest_matched: number;
  GPU: number;
  CPU: number;
  DISK: number;
  /** Per DP rank: the longest prefix over all of the instance's tiers. */
  DP: Record<string, number>;
  /** Prefix readable from shared-pool backends (present only when the namespace has one). */
  SHARED?: number;
}

/**
 * @param report instances to include (zero rows for those without hits), with their known ranks
 */
export function conductorHits(
  result: OverlapResult,
  blockSize: number,
  report: ReadonlyMap<string, readonly number[]>,
  hasSharedPool: boolean,
): Record<string, InstanceHit> {
  const out: Record<string, InstanceHit> = {};
  for (const [instance, ranks] of report) {
    const hit: InstanceHit = { longest_matched: 0, GPU: 0, CPU: 0, DISK: 0, DP: {} };
    for (const r of ranks) hit.DP[String(r)] = 0;
    out[instance] = hit;
  }
  for (const c of result.candidates) {
    const hit = out[c.instance];
    if (!hit) continue;
    hit.GPU = Math.max(hit.GPU, c.device * blockSize);
    hit.CPU = Math.max(hit.CPU, c.host * blockSize);
    hit.DISK = Math.max(hit.DISK, c.disk * blockSize);
    hit.DP[String(c.dpRank)] = c.disk * blockSize;
  }
  const shared = result.sharedBlocks * blockSize;
  for (const hit of Object.values(out)) {
    if (hasSharedPool) hit.SHARED = shared;
    hit.longest_matched = Math.max(hit.DISK, hasSharedPool ? shared : 0);
  }
  return out;
}

/** Dynamo standalone indexer's shape: lower-case keys, `scores` per dp rank. */
export function dynamoShape(hits: Record<string, InstanceHit>): {
  scores: Record<string, Record<string, number>>;
  frequencies: number[];
  instances: Record<string, { longest_matched: number; gpu: number; cpu: number; disk: number; dp: Record<string, number> }>;
} {
  const scores: Record<string, Record<string, number>> = {};
  const instances: Record<string, { longest_matched: number; gpu: number; cpu: number; disk: number; dp: Record<string, number> }> = {};
  for (const [inst, h] of Object.entries(hits)) {
    scores[inst] = { ...h.DP };
    instances[inst] = { longest_matched: h.longest_matched, gpu: h.GPU, cpu: h.CPU, disk: h.DISK, dp: { ...h.DP } };
  }
  return { scores, frequencies: [], instances };
}
