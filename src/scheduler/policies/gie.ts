// gie: the Gateway API Inference Extension endpoint picker's default profile
// (kubernetes-sigs/gateway-api-inference-extension pkg/epp/config/loader/defaults.go at 1748e82, the
// last commit before the EPP moved to llm-d/llm-d-router, whose default profile is the same at
// ebab687): queue scorer x2, kv-cache-utilization scorer x2, prefix-cache scorer x3 over the
// approximate prefix producer, max-score picker.
//   score(pod) = 2 x clamp(queue) + 2 x clamp(1 - kv_usage) + 3 x clamp(matched blocks / blocks)
//   queue      = (max waiting - waiting) / (max waiting - min waiting) over the pods, 1 when all equal
//   blocks     = the request text in blocks of block_size x 4 characters (at most 256, plus the
//                partial tail), matched against a per-pod LRU of what was routed there (31,250)
// The highest score wins, uniformly among equals. Waiting requests and KV usage are the engines'
// scraped gauges (vllm:num_requests_waiting, vllm:kv_cache_usage_perc; GIE refreshes every 50 ms
// and calls a scrape older than 2 s stale): a pod without a fresh scrape scores as zeros (parts/
// epp-scorers.ts). Autotune takes the block size from the engines (here: the model's block_size)
// and the LRU size from their num_gpu_blocks (not scraped here: 31,250, GIE's fallback).
// GIE hashes the JSON of chat messages; the router's request text joins their contents (SMG's
// rule): the same prefixes, a few characters of JSON syntax apart.
import { hashSpace } from '../../hashing/index.js';
import { clamp01, gauges, kvUtilizationScore, maxScore, queueScores } from './parts/epp-scorers.js';
import { ApproxPrefixIndex, approxBlockHashes } from './parts/prefix-lru.js';
import { ofInstance, workerKey } from './parts/workers.js';
import { definePolicy } from './types.js';

export const GIE = {
  weights: { queue: 2, kvUtilization: 2, prefix: 3 },
  maxPrefixBlocks: 256,
  lruBlocksPerPod: 31_250,
} as const;

export const gie = definePolicy({
  name: 'gie',
  summary:
    "Gateway API Inference Extension's default profile: queue 2, KV utilisation 2, approximate prefix 3; a peer baseline, needs engine_metrics.scrape",
  needs: {
    tokens: false,
    index: false,
    predictions: false,
    sessionKey: false,
    target: false,
    text: true,
    engineMetrics: true,
  },
  fallback: null,
  busyFilter: true,
  adminOnly: false,
  predictionTtlKey: 'speculative_ttl_ms',
  predictionTtlMs: 0,
  peer: {
    source:
      'kubernetes-sigs/gateway-api-inference-extension pkg/epp/config/loader/defaults.go, scheduling/scorer/{queuedepth,kvcacheutilization,prefix}, requestcontrol/dataproducer/approximateprefix, picker/maxscore',
    version: '1748e82 (2026-06-16, last with the EPP; same profile in llm-d/llm-d-router ebab687)',
    defaults:
      'queue 2, kv-cache-utilization 2, prefix-cache 3; blocks of block_size x 4 characters, at most 256, per-pod LRU 31,250; max-score picker, random ties; metrics every 50 ms, stale after 2 s',
  },
  createState: () => new ApproxPrefixIndex(GIE.lruBlocksPerPod),
  pick(c, ctx) {
    if (c.length === 0) return -1;
    const hashes = ctx.text
      ? approxBlockHashes(
          ctx.text,
          ctx.ns.blockSize,
          GIE.maxPrefixBlocks,
          hashSpace({ loraName: ctx.ns.loraName, salt: ctx.ns.salt }),
        )
      : new BigUint64Array(0);
    const matched = ctx.state.match(hashes);
    const g = c.map((x) => gauges(x.engine));
    const queue = queueScores(g.map((x) => x.waiting));
    const w = GIE.weights;
    const totals = c.map((x, i) => {
      const prefix = hashes.length === 0 ? 0 : (matched.get(workerKey(x)) ?? 0) / hashes.length;
      return (
        w.queue * clamp01(queue[i]) +
        w.kvUtilization * clamp01(kvUtilizationScore(g[i].kvUsage)) +
        w.prefix * clamp01(prefix)
      );
    });
    ctx.memo = hashes;
    return maxScore(totals, ctx.rand);
  },
  booked(index, e) {
    const hashes = e.memo as BigUint64Array | null;
    if (hashes && hashes.length > 0) index.add(hashes, workerKey(e.chosen));
  },
  dropInstance(index, instance) {
    for (const p of index.pods()) if (ofInstance(p, instance)) index.removePod(p);
  },
});
