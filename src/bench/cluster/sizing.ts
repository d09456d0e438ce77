// Engine cache sizes from the workload's working set: the llm-d rule of thumb is a working set
// larger than one replica's KV but within the cluster's; a host tier behind every GPU cache makes
// tier credit matter.
import type { OracleStats } from '../workloads/oracle.js';

export interface Sizing {
  workingSetBlocks: number;
  numGpuBlocks: number;
  numCpuBlocks: number;
  /** Working set / one engine's GPU cache (> 1: no single engine holds it). */
  perEngineRatio: number;
  /** Cluster GPU cache / working set. */
  clusterRatio: number;
  maxModelLen: number;
}

export function sizeFleet(
  o: OracleStats,
  engines: number,
  blockSize: number,
  cacheRatio: number,
  cpuRatio: number,
): Sizing {
  const maxModelLen = Math.ceil(o.maxSequence / blockSize) * blockSize;
  // Room for the requests running at once: two of the longest, or 48 average ones (a tighter cache
  // preempts, and a preempted request re-queries the cache, which inflates the engines' hit rate).
  const meanBlocks = o.promptTokens / Math.max(1, o.requests) / blockSize;
  const floor = Math.ceil(Math.max(2 * (maxModelLen / blockSize), 48 * meanBlocks));
  const numGpuBlocks = Math.max(floor, Math.ceil((o.distinctBlocks * cacheRatio) / engines));
  return {
    workingSetBlocks: o.distinctBlocks,
    numGpuBlocks,
    numCpuBlocks: Math.round(numGpuBlocks * cpuRatio),
    perEngineRatio: o.distinctBlocks / numGpuBlocks,
    clusterRatio: (numGpuBlocks * engines) / Math.max(1, o.distinctBlocks),
    maxModelLen,
  };
}
