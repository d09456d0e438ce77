// llm-d: llm-d's precise prefix-cache path as its v0.8 guide deploys it (llm-d/llm-d guides/
// precise-prefix-cache-aware/scheduler/precise-prefix-cache-aware.values.yaml at 019a3f3, image
// llm-d-inference-scheduler v0.8.0: pkg/epp/framework/plugins/scheduling/scorer/preciseprefixcache/
// {precise_prefix_cache,utils}.go at 05c91f0; the block scorer from llm-d/llm-d-kv-cache v0.8.0
// pkg/kvcache/{kvblock_scorer,backend}.go): decode filter (every instance here), precise prefix
// scorer x2 fed by KV events, kv-cache-utilization x1, queue x1, max-score picker.
//   prefix(pod) = over the longest run of the prompt's blocks from block 0 the pod holds on any
//                 tier, the sum of each block's best tier weight (gpu 1.0, cpu 0.8; a tier without a
//                 weight counts 1.0, so disk and speculative entries do), min-max normalised over the
//                 pods with a hit ((s - min) / (max - min), 1 when they are equal), 0 without one
//   score(pod)  = 2 x prefix + 1 x (1 - kv_usage) + 1 x queue   (queue as in gie.ts)
// Speculative indexing with its 2 s TTL (the plugin's default TTL; the guides enable it): the routed
// prompt's blocks count on the chosen pod until KV events confirm them (the router's speculative
// insert). From the index the tiers are prefixes (GPU within GPU-or-CPU within any tier), so a block
// past the GPU prefix counts at the CPU weight even where the GPU holds it again after a gap.
// Later releases changed the score: llm-d-router v0.10.0 counts matched blocks / prompt blocks,
// unweighted (dataproducer/preciseprefixcache/utils.go); this is the v0.8 profile the guide's
// published results used. Engine gauges as in gie.ts (a pod without a fresh scrape scores as zeros).
import { clamp01, gauges, kvUtilizationScore, maxScore, queueScores } from './parts/epp-scorers.js';
import { definePolicy } from './types.js';

export const LLM_D = {
  weights: { prefix: 2, kvUtilization: 1, queue: 1 },
  tierWeights: { gpu: 1, cpu: 0.8, other: 1 },
} as const;

/** The kv-cache block scorer's weighted longest prefix, from the index's cumulative tier prefixes. */
export function tierWeightedPrefix(c: { device: number; host: number; disk: number }): number {
  const t = LLM_D.tierWeights;
  const host = Math.max(c.host, c.device);
  const any = Math.max(c.disk, host);
  return c.device * t.gpu + (host - c.device) * t.cpu + (any - host) * t.other;
}

export const llmD = definePolicy({
  name: 'llm-d',
  summary:
    "llm-d's v0.8 precise prefix profile: KV-event prefix with tier weights 2, KV utilisation 1, queue 1; a peer baseline, needs engine_metrics.scrape",
  needs: {
    tokens: true,
    index: true,
    predictions: true,
    sessionKey: false,
    target: false,
    text: false,
    engineMetrics: true,
  },
  fallback: 'least-loaded',
  busyFilter: true,
  adminOnly: false,
  predictionTtlKey: 'speculative_ttl_ms',
  predictionTtlMs: 2000,
  peer: {
    source:
      'llm-d/llm-d guides/precise-prefix-cache-aware (values), llm-d/llm-d-inference-scheduler scorer/preciseprefixcache, llm-d/llm-d-kv-cache pkg/kvcache/kvblock_scorer.go',
    version: 'guide 019a3f3, scheduler v0.8.0 (05c91f0), kv-cache v0.8.0',
    defaults:
      'precise prefix 2, kv-cache-utilization 1, queue 1; tier weights gpu 1.0, cpu 0.8 (others 1.0); min-max over pods with hits; speculative entries 2 s; max-score picker, random ties',
  },
  pick(c, ctx) {
    if (c.length === 0) return -1;
    const raw = c.map(tierWeightedPrefix);
    let min = Infinity;
    let max = -Infinity;
    for (const r of raw) {
      if (r <= 0) continue;
      if (r < min) min = r;
      if (r > max) max = r;
    }
    const g = c.map((x) => gauges(x.engine));
    const queue = queueScores(g.map((x) => x.waiting));
    const w = LLM_D.weights;
    const totals = c.map((_, i) => {
      const prefix = raw[i] <= 0 ? 0 : max === min ? 1 : (raw[i] - min) / (max - min);
      return (
        w.prefix * clamp01(prefix) +
        w.kvUtilization * clamp01(kvUtilizationScore(g[i].kvUsage)) +
        w.queue * clamp01(queue[i])
      );
    });
    return maxScore(totals, ctx.rand);
  },
});
