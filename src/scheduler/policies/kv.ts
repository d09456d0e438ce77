// kv: the cache-aware default. Each candidate's cost (the time or blocks model, scheduler/cost.ts)
// credits the prefix the KV-event index and the router's own predictions say it holds; the pick is
// the cheapest, with sibling co-location and bounded load (pickers.ts). With load_bound_new_session
// it remembers the session keys it routed, to tell a session's first request from the rest; with
// recompute_weight_saturated it prices recomputation higher once every instance queues prefill.
import { costWithAffinity, scoresOf } from './pickers.js';
import { definePolicy, type PickLoads, type PolicyContext } from './types.js';

/** Session keys routed in this pool, forgotten wholesale past this many (a forgotten one looks new once more). */
const MAX_SESSIONS = 65_536;

export interface KvState {
  sessions: Set<string>;
}

export const kv = definePolicy({
  name: 'kv',
  summary: 'cache-aware cost on the index fed by KV events',
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
  createState: (): KvState => ({ sessions: new Set() }),
  // The same pick step (decisions report it as byCostWithAffinity), told whether the request opens a session.
  pick: function byCostWithAffinity(eligible, ctx) {
    return pickKv(scoresOf(eligible, ctx.loads), ctx);
  },
  pickScores: (scores, ctx) => pickKv(scores, ctx),
  booked(s, e) {
    if (typeof e.memo !== 'string') return;
    if (s.sessions.size >= MAX_SESSIONS) s.sessions.clear();
    s.sessions.add(e.memo);
  },
});

/** kv's pick over the candidates' columns (PickLoads). */
function pickKv(scores: PickLoads, ctx: PolicyContext<KvState>): number {
  const s = atSaturation(scores, ctx.recomputeWeightSaturated);
  const key = ctx.sessionKey;
  if (!ctx.loadBoundNewSession || ctx.loadBoundUnique || !key || ctx.state.sessions.has(key))
    return costWithAffinity(s, ctx, ctx.loadBoundUnique, false);
  // A session's first request: its later turns follow it, so over the bound an instance with no
  // prefill queued takes it on (it delays nobody); else only the prefix its pick alone holds keeps it.
  ctx.memo = key;
  return costWithAffinity(s, ctx, true, true);
}

/**
 * While every candidate has prefill queued, each one's cost plus `w` x its own predicted prefill:
 * the greedy cost prices only this request's first token, but a prefix recomputed on a queueing
 * instance is work every request arriving after it waits for, and no idle instance absorbs it
 * (decision logs at llm-d's shape, 48 requests/s: kv left a 93-block prefix's holder with 1,080 ms
 * queued for a cold instance with 720 ms, recomputing 6,000 tokens to save 360 ms). While one is
 * idle, recomputing there delays nobody: the costs stay as scored. A cost column of its own (the
 * scheduler's candidates and columns are left as scored; the pick's index is the same).
 */
function atSaturation(s: PickLoads, w: number): PickLoads {
  if (!(w > 0) || s.n < 2) return s;
  for (let k = 0; k < s.n; k++) if (s.prefill[k] <= 0) return s;
  const cost = new Float64Array(s.n);
  for (let k = 0; k < s.n; k++) cost[k] = s.cost[k] + w * s.prefillMs[k];
  return { ...s, cost };
}
