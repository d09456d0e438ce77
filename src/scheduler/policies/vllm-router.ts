// vllm-router: vllm-project/router's `kv_aware` policy (src/policies/kv_aware.rs at 71af994, its
// prefix scorer src/kv_index/scorer.rs and index updater src/kv_index/updater.rs at 2ec0ff0; the
// open PR #130 adds it): the prompt's 16-token blocks (the engine's block size) scored against an
// index fed by vLLM's KV events, which ignores the medium (a block stored on any tier counts).
//   score(w) = the longest run of blocks from block 0 that w holds
//   the healthy worker with the highest score (the last of equals: Rust's max_by_key); if that
//   score is 0, or the prompt has no complete block, the least loaded (the first of equals:
//   min_by_key) by the router's own in-flight requests
// Speculative indexing on, 2 s TTL: the routed prompt's blocks count on the chosen worker until
// events confirm them (the router's speculative insert; vllm-router inserts only the blocks past
// the best match, which the chosen worker holds already when it is the best).
import { definePolicy } from './types.js';

export const vllmRouter = definePolicy({
  name: 'vllm-router',
  summary: "vllm-project/router's kv_aware: longest KV-event prefix on any tier, else least loaded; a peer baseline",
  needs: {
    tokens: true,
    index: true,
    predictions: true,
    sessionKey: false,
    target: false,
    text: false,
    engineMetrics: false,
  },
  fallback: 'least-loaded',
  busyFilter: true,
  adminOnly: false,
  predictionTtlKey: 'speculative_ttl_ms',
  predictionTtlMs: 2000,
  peer: {
    source: 'vllm-project/router src/policies/kv_aware.rs, src/kv_index/{scorer,updater}.rs (open PR #130)',
    version: '71af994 (kv_aware.rs), 2ec0ff0 (kv_index)',
    defaults:
      "block 16 (the engine's), speculative entries 2 s, longest contiguous prefix on any tier (last of equals), zero hits: least in-flight requests (first of equals)",
  },
  pick(c, ctx) {
    if (c.length <= 1) return c.length - 1;
    let best = 0;
    let bestScore = -1;
    if (ctx.seq.length > 0) {
      for (let i = 0; i < c.length; i++) {
        const s = Math.max(c[i].device, c[i].host, c[i].disk);
        if (s >= bestScore) {
          bestScore = s;
          best = i;
        }
      }
    }
    if (bestScore > 0) return best;
    let least = 0;
    for (let i = 1; i < c.length; i++) if (c[i].load.activeRequests < c[least].load.activeRequests) least = i;
    return least;
  },
});
