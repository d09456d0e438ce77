// Dynamo mocker's default polynomial perf model (lib/mocker/src/common/perf_model.rs), in ms.
// Prefill cost grows with the new tokens computed in a pass; decode cost with KV occupancy.

/** Prefill time of one pass that computes `newTokens` prompt tokens (summed over the batch). */
export function prefillMs(newTokens: number): number {
  if (newTokens <= 0) return 0;
  return Math.max(0, 4.209989e-7 * newTokens * newTokens + 1.518344e-2 * newTokens + 1.650142e1);
}

/** Decode step time at KV usage `p` = active KV tokens / total KV tokens (0..1). */
export function decodeMs(p: number): number {
  const x = Math.min(1, Math.max(0, p));
  return Math.max(1.0, -25.74 * x * x + 54.01 * x + 5.74);
}

export interface PassCost {
  /** Prompt (or recompute) tokens computed this pass. */
  prefillTokens: number;
  /** Tokens loaded back from the host tier this pass. */
  loadedTokens: number;
  /** Requests producing a decode token this pass. */
  decodeRequests: number;
  /** KV usage (0..1) when the pass starts. */
  kvUsage: number;
}

export interface TimingKnobs {
  speedup: number;
  decodeSpeedup: number;
  /** Cost of a host-tier load as a fraction of recomputing the same tokens. */
  cpuLoadFraction: number;
}

/** Wall-clock duration of one pass, after speedups. */
export function passMs(cost: PassCost, knobs: TimingKnobs): number {
  const prefill = prefillMs(cost.prefillTokens);
  // A load is charged as a fraction of the marginal recompute cost of those tokens in this pass.
  const load =
    cost.loadedTokens > 0
      ? knobs.cpuLoadFraction * (prefillMs(cost.prefillTokens + cost.loadedTokens) - prefill)
      : 0;
  const decode = cost.decodeRequests > 0 ? decodeMs(cost.kvUsage) : 0;
  return (prefill + load) / knobs.speedup + decode / (knobs.speedup * knobs.decodeSpeedup);
}
