// sglang: SGLang Model Gateway's `cache_aware` (smg-project/smg model_gateway/src/policies/
// cache_aware.rs, CLI defaults in model_gateway/src/main.rs, trees in crates/kv_index/src/
// {string_tree,token_tree}.rs, all at f8daa88), with the CLI defaults: cache_threshold 0.3,
// balance_abs_threshold 64, balance_rel_threshold 1.5, eviction every 120 s to max_tree_size 2^26,
// token pages of 16, KV-usage triggers off (1.0).
//   load(w)   = the gateway's own in-flight requests to w; avg = their mean over the candidates
//   min-load  = the lowest (load, requests sent so far, index)
//   match     = the approximate tree's longest prefix of the request text; rate = matched / input length
//   rate > 0.3: among the workers at the deepest matched node, the least loaded (uniform among
//               equals); if its load > 1.5 x avg and > avg + 64, the min-load worker instead
//   otherwise:  the min-load worker
// then the text is inserted for the chosen worker (a spill makes it a new holder of the prefix).
// Text is characters over HTTP and token ids where the router has no text (SMG over gRPC: token
// tree, 16-token pages). The tree is the router's: it is not synced between replicas (SMG syncs
// trees over its mesh, off by default).
import { TextTree } from './parts/text-tree.js';
import { argminRandomTies, ofInstance, workerKey } from './parts/workers.js';
import { definePolicy, type RequestText } from './types.js';

export const SGLANG = {
  cacheThreshold: 0.3,
  balanceAbs: 64,
  balanceRel: 1.5,
  evictionIntervalMs: 120_000,
  maxTreeSize: 2 ** 26,
  tokenPage: 16,
  /** kv_index MATCHED_TENANTS_CAP: holders a match reports. */
  matchedCap: 8,
} as const;

export interface SglangState {
  chars: TextTree;
  tokens: TextTree;
  /** Requests sent to each worker (SMG's `processed`: the min-load tie-break). */
  sent: Map<string, number>;
  lastEviction: number | null;
}

const EMPTY: RequestText = { kind: 'chars', symbols: new Uint32Array(0) };

export const sglang = definePolicy({
  name: 'sglang',
  summary:
    "SGLang Model Gateway's cache_aware: its own approximate tree of the request text, CLI defaults; a peer baseline",
  needs: {
    tokens: false,
    index: false,
    predictions: false,
    sessionKey: false,
    target: false,
    text: true,
    engineMetrics: false,
  },
  fallback: null,
  busyFilter: true,
  adminOnly: false,
  predictionTtlKey: 'speculative_ttl_ms',
  predictionTtlMs: 0,
  peer: {
    source:
      'smg-project/smg model_gateway/src/policies/cache_aware.rs, model_gateway/src/main.rs (CLI), crates/kv_index/src/string_tree.rs',
    version: 'f8daa88 (2026-08-22)',
    defaults:
      'cache_threshold 0.3, balance_abs 64, balance_rel 1.5 (spill gate on the chosen worker vs the mean), eviction 120 s, max_tree_size 2^26, 16-token pages; KV-usage triggers off',
  },
  createState: (): SglangState => ({
    chars: new TextTree(1),
    tokens: new TextTree(SGLANG.tokenPage),
    sent: new Map(),
    lastEviction: null,
  }),
  pick(c, ctx) {
    if (c.length === 0) return -1;
    const s = ctx.state;
    let minLoad = 0;
    let sum = 0;
    for (let i = 0; i < c.length; i++) {
      const l = c[i].load.activeRequests;
      sum += l;
      const m = c[minLoad].load.activeRequests;
      if (l < m || (l === m && (s.sent.get(workerKey(c[i])) ?? 0) < (s.sent.get(workerKey(c[minLoad])) ?? 0)))
        minLoad = i;
    }
    const avg = sum / c.length;
    const text = ctx.text ?? EMPTY;
    const m = (text.kind === 'chars' ? s.chars : s.tokens).match(text.symbols, SGLANG.matchedCap);
    const rate = m.input === 0 ? 0 : m.matched / m.input;
    let chosen = minLoad;
    if (rate > SGLANG.cacheThreshold) {
      const holders = new Set(m.tenants);
      const idx = c.map((x, i) => (holders.has(workerKey(x)) ? i : -1)).filter((i) => i >= 0);
      // No holder among the candidates: SMG takes the first healthy worker and inserts nothing.
      if (idx.length === 0) return 0;
      chosen =
        idx[
          argminRandomTies(
            idx.map((i) => c[i].load.activeRequests),
            ctx.rand,
          )
        ];
      const load = c[chosen].load.activeRequests;
      if (load > avg * SGLANG.balanceRel && load > avg + SGLANG.balanceAbs) chosen = minLoad;
    }
    ctx.memo = text;
    return chosen;
  },
  booked(s, e) {
    const w = workerKey(e.chosen);
    s.sent.set(w, (s.sent.get(w) ?? 0) + 1);
    const text = e.memo as RequestText | null;
    if (text) (text.kind === 'chars' ? s.chars : s.tokens).insert(text.symbols, w);
    // SMG evicts on a timer; here the first booking after each interval does.
    if (s.lastEviction === null) s.lastEviction = e.now;
    else if (e.now - s.lastEviction >= SGLANG.evictionIntervalMs) {
      s.lastEviction = e.now;
      s.chars.evict(SGLANG.maxTreeSize);
      s.tokens.evict(SGLANG.maxTreeSize);
    }
  },
  dropInstance(s, instance) {
    for (const w of [...s.sent.keys()]) {
      if (!ofInstance(w, instance)) continue;
      s.sent.delete(w);
      s.chars.removeTenant(w);
      s.tokens.removeTenant(w);
    }
  },
});
