// llm-d-sticky: llm-d's newer "sticky until saturated" design, as the optimized-baseline guide
// composes it (llm-d/llm-d guides/optimized-baseline/router/optimized-baseline.values.yaml at
// 0a3b0c9: prefix-cache-affinity-filter, then token-load-scorer, over the approximate prefix and
// in-flight load producers) with the plugins' defaults in llm-d/llm-d-router at ebab687
// (2026-08-22): scheduling/filter/prefixcacheaffinity/plugin.go, scheduling/scorer/tokenload/
// token_load.go, requestcontrol/dataproducer/{inflightload,approximateprefix,prefixhash}.
//   prefix(pod)   = matched blocks / prompt blocks, the approximate index over the prompt's tokens
//                   in blocks of max(block_size, 64) tokens (the partial tail is a block; at most
//                   131,072 tokens), a per-pod LRU of 31,250 blocks of what was routed there
//                   (a prompt shorter than one block has no blocks here; llm-d hashes it as one)
//   in-flight(pod) = uncached prompt tokens of the requests routed there and not yet at their first
//                   token ((blocks - matched) x block + the part past the hashed blocks)
//   filter: the pods with prefix >= 0.80 (sticky), unless none is, or the best sticky pod's
//           estimated TTFT (in-flight / 15,928 tok/s) exceeds the best other pod's by > 18,000 ms
//           (the guide's 286,720-token gate, since expressed in time); no exploration (0)
//   score:  1 - min(1, in-flight / 4,194,304); the highest wins, uniformly among equals.
// The in-flight counts are the router's own (the producer's), not the engines'.
import { hashSpace } from '../../hashing/index.js';
import { maxScore } from './parts/epp-scorers.js';
import { ApproxPrefixIndex, approxBlockHashes } from './parts/prefix-lru.js';
import { ofInstance, workerKey } from './parts/workers.js';
import { definePolicy } from './types.js';

export const LLM_D_STICKY = {
  affinityThreshold: 0.8,
  maxTtftPenaltyMs: 18_000,
  peakPrefillTokensPerS: 15_928,
  queueThresholdTokens: 4_194_304,
  minBlockTokens: 64,
  maxPrefixTokens: 131_072,
  lruBlocksPerPod: 31_250,
} as const;

export interface StickyState {
  index: ApproxPrefixIndex;
  /** Uncached prompt tokens in flight per worker, and per request until its first token. */
  inflight: Map<string, number>;
  open: Map<string, { worker: string; tokens: number }>;
}

interface StickyMemo {
  hashes: BigUint64Array;
  matched: Map<string, number>;
  block: number;
}

export const llmDSticky = definePolicy({
  name: 'llm-d-sticky',
  summary:
    "llm-d's sticky-until-saturated design: prefix affinity filter at 0.8 with an 18 s TTFT gate, then in-flight token load; a peer baseline",
  needs: {
    tokens: true,
    index: false,
    predictions: false,
    sessionKey: false,
    target: false,
    text: false,
    engineMetrics: false,
  },
  fallback: 'least-loaded',
  busyFilter: true,
  adminOnly: false,
  predictionTtlKey: 'speculative_ttl_ms',
  predictionTtlMs: 0,
  peer: {
    source:
      'llm-d/llm-d guides/optimized-baseline (values); llm-d/llm-d-router scheduling/filter/prefixcacheaffinity, scheduling/scorer/tokenload, dataproducer/{inflightload,approximateprefix}',
    version: 'guide 0a3b0c9; router ebab687 (2026-08-22)',
    defaults:
      'affinity >= 0.80, TTFT gate 18,000 ms at 15,928 tok/s, exploration 0; token load 1 - tokens/4,194,304; approximate prefix over 64-token blocks, LRU 31,250 per pod',
  },
  createState: (): StickyState => ({
    index: new ApproxPrefixIndex(LLM_D_STICKY.lruBlocksPerPod),
    inflight: new Map(),
    open: new Map(),
  }),
  pick(c, ctx) {
    if (c.length === 0) return -1;
    const s = ctx.state;
    const p = LLM_D_STICKY;
    const block = Math.max(ctx.ns.blockSize, p.minBlockTokens);
    const tokens =
      ctx.tokens && ctx.tokens.length > 0
        ? ctx.tokens instanceof Uint32Array
          ? ctx.tokens
          : Uint32Array.from(ctx.tokens)
        : null;
    const hashes = tokens
      ? approxBlockHashes(
          { kind: 'tokens', symbols: tokens },
          block,
          Math.floor(p.maxPrefixTokens / block),
          hashSpace({ loraName: ctx.ns.loraName, salt: ctx.ns.salt }),
        )
      : new BigUint64Array(0);
    const matched = s.index.match(hashes);
    const prefix = c.map((x) => (hashes.length === 0 ? 0 : (matched.get(workerKey(x)) ?? 0) / hashes.length));
    const inflight = c.map((x) => s.inflight.get(workerKey(x)) ?? 0);
    let kept = c.map((_, i) => i);
    if (c.length > 1) {
      const sticky = kept.filter((i) => prefix[i] >= p.affinityThreshold);
      const other = kept.filter((i) => prefix[i] < p.affinityThreshold);
      const ttft = (i: number) => (inflight[i] / p.peakPrefillTokensPerS) * 1000;
      const best = (ix: number[]) => Math.min(...ix.map(ttft));
      if (
        sticky.length > 0 &&
        !(p.maxTtftPenaltyMs > 0 && other.length > 0 && best(sticky) - best(other) > p.maxTtftPenaltyMs)
      )
        kept = sticky;
    }
    const scores = kept.map((i) => 1 - Math.min(1, inflight[i] / p.queueThresholdTokens));
    ctx.memo = { hashes, matched, block } satisfies StickyMemo;
    return kept[maxScore(scores, ctx.rand)];
  },
  booked(s, e) {
    const m = e.memo as StickyMemo | null;
    if (!m) return;
    const w = workerKey(e.chosen);
    if (m.hashes.length > 0) s.index.add(m.hashes, w);
    const hashed = m.hashes.length * m.block;
    const tokens = Math.max(0, (m.hashes.length - (m.matched.get(w) ?? 0)) * m.block) + Math.max(0, e.isl - hashed);
    s.inflight.set(w, (s.inflight.get(w) ?? 0) + tokens);
    s.open.set(e.requestId, { worker: w, tokens });
  },
  // The producer releases a request's tokens at its first streamed token, or at its end.
  prefillDone: release,
  freed: release,
  dropInstance(s, instance) {
    for (const p of s.index.pods()) if (ofInstance(p, instance)) s.index.removePod(p);
    for (const w of [...s.inflight.keys()]) if (ofInstance(w, instance)) s.inflight.delete(w);
  },
});

function release(s: StickyState, requestId: string): void {
  const o = s.open.get(requestId);
  if (!o) return;
  s.open.delete(requestId);
  const left = (s.inflight.get(o.worker) ?? 0) - o.tokens;
  if (left > 0) s.inflight.set(o.worker, left);
  else s.inflight.delete(o.worker);
}
