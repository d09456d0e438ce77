// The pick step: how a policy chooses among the candidates the filters kept, each already carrying
// its cost breakdown. Argmin / softmax over cost, rendezvous co-location, bounded load, rotation,
// random, least load, power of two, rendezvous by session, and a named target.
import { WorkerMap } from '../../common/worker-map.js';
import { xxh3_64 } from '../../hashing/index.js';
import { pickByCost } from '../cost.js';
import { prefixSaving } from '../hold.js';
import type { Candidate, CandidateScore } from '../scheduler.js';
import type { PickLoads, Picker, PolicyContext } from './types.js';

/** Argmin of cost with uniform ties, or a softmax over range-normalised costs above temperature 0. */
export const byCost: Picker = (c, ctx) => {
  if (ctx.temperature <= 0) return cheapest(c, ctx.rand);
  const costs = new Float64Array(c.length);
  for (let i = 0; i < c.length; i++) costs[i] = c[i].cost;
  return pickByCost(costs, ctx.temperature, ctx.rand);
};

/**
 * pickByCost at temperature 0 read straight from the candidates (no cost array per decision): the
 * same argmin, the same draws of `rand` (one per tie, in order), so the same pick.
 */
function cheapest(c: readonly CandidateScore[], rand: () => number): number {
  let min = Infinity;
  for (let i = 0; i < c.length; i++) if (c[i].cost < min) min = c[i].cost;
  let chosen = -1;
  let ties = 0;
  for (let i = 0; i < c.length; i++) {
    if (c[i].cost !== min) continue;
    ties++;
    if (rand() * ties < 1) chosen = i; // reservoir sampling: uniform among ties
  }
  return chosen;
}

/** Each worker's name hashed once, XXH3-64 of `instance\0rank` as [lo, hi] (forgotten wholesale past 64k workers). */
const nameHashes = new WorkerMap<Uint32Array>();

/** A worker's name hash as [lo, hi] (what hrw mixes with the key). */
export function nameHash(c: { instance: string; dpRank: number }): Uint32Array {
  let h = nameHashes.get(c.instance, c.dpRank);
  if (h === undefined) {
    if (nameHashes.size >= 65_536) nameHashes.clear();
    h = new Uint32Array(BigUint64Array.of(xxh3_64(`${c.instance}\u0000${c.dpRank}`, 0n)).buffer);
    nameHashes.set(c.instance, c.dpRank, h);
  }
  return h;
}

function fmix32(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

/** A u64 key as [lo, hi], split once per decision. */
const keyHalves = (key: bigint): Uint32Array => new Uint32Array(BigUint64Array.of(key).buffer);

/**
 * Rendezvous weight of a worker for a key (highest wins): stable as workers come and go. The name
 * hash, kept per worker, is mixed with the key in 32-bit halves into a 53-bit weight: hashing the
 * name with each key (~0.25 us a call) cost a quarter of a millisecond per decision when a
 * thousand candidates tie on a shared prefix.
 */
function hrw(key: Uint32Array, c: Candidate): number {
  const n = nameHash(c);
  return hrwOf(key, n[0], n[1]);
}

/** hrw of the name hash [n0, n1]. */
function hrwOf(key: Uint32Array, n0: number, n1: number): number {
  const a = fmix32(n0 ^ key[0] ^ fmix32(n1 ^ key[1]));
  const b = fmix32(n1 ^ key[1] ^ Math.imul(a, 0x9e3779b1));
  return a * 2_097_152 + (b >>> 11);
}

/** hrw of candidate i: its name hash from the columns when they have it (PickLoads.names). */
const hrwAt = (key: Uint32Array, s: PickLoads, i: number): number =>
  s.names ? hrwOf(key, s.names[2 * i], s.names[2 * i + 1]) : hrw(key, s.of[i]);

/**
 * The cost picks' columns of `c` (PickLoads): the scorer's (`loads`, when they are c's), else read
 * from each candidate (a caller without them, e.g. a test).
 */
export function scoresOf(c: readonly CandidateScore[], loads: PickLoads | null | undefined): PickLoads {
  if (loads != null && loads.of === c) return loads;
  const n = c.length;
  const s = {
    of: c,
    n,
    requests: new Float64Array(n),
    prefill: new Float64Array(n),
    names: null,
    cost: new Float64Array(n),
    credited: new Float64Array(n),
    prefillMs: new Float64Array(n),
    queueMs: new Float64Array(n),
    hybrid: new Float64Array(n),
  };
  for (let i = 0; i < n; i++) {
    const x = c[i];
    s.requests[i] = x.load.activeRequests;
    s.prefill[i] = x.load.activePrefillTokens;
    s.cost[i] = x.cost;
    s.credited[i] = x.creditedBlocks;
    s.prefillMs[i] = x.prefillMs;
    s.queueMs[i] = x.queueMs;
    s.hybrid[i] = x.hybridPrefix ?? 0;
  }
  return s;
}

/**
 * The cheapest candidate, except that near-equals go by the prefix: among candidates crediting the
 * same cached prefix as the cheapest and within `prefixAffinity x its prefill time` of its cost, the
 * one the request's next `affinityBlocks` blocks hash to wins (while the cheapest has no prefill
 * queued, only among those without). Requests sharing a prefix nobody holds yet thus meet on one
 * instance (bounded-load consistent hashing: a loaded preferred instance falls out of the slack, and
 * its overflow lands on the prefix's next choice, not anywhere).
 */
export const byCostWithAffinity: Picker = (c, ctx) =>
  costWithAffinity(scoresOf(c, ctx.loads), ctx, ctx.loadBoundUnique);

/** byCostWithAffinity over the scorer's columns (PolicySpec.pickScores). */
export const byCostWithAffinityOf = (s: PickLoads, ctx: PolicyContext): number =>
  costWithAffinity(s, ctx, ctx.loadBoundUnique);

/**
 * byCostWithAffinity with the load bound's unique-prefix rule given; `newSession` (kv: a session's first
 * request) moves an over-bound pick to the candidate within the bound whenever that one has no prefill queued.
 */
export function costWithAffinity(s: PickLoads, ctx: PolicyContext, unique: boolean, newSession = false): number {
  // byCost over the column (pickByCost at temperature 0 draws as cheapest() does: one per tie, in order).
  let i = s.n === 0 ? -1 : pickByCost(s.cost.subarray(0, s.n), ctx.temperature, ctx.rand);
  let cap = Infinity;
  // Only for a request with something cached on its cheapest candidate: a prefix nobody holds yet
  // is co-location's to place (bounded by its own slack), and moving its siblings would scatter them.
  if (i >= 0 && ctx.loadBound > 0 && s.n > 1 && s.credited[i] > 0) {
    cap = loadCap(s, ctx.loadBound);
    if (s.requests[i] + 1 > cap) i = withinBound(s, i, cap, unique, newSession);
  }
  if (i < 0 || ctx.prefixAffinity <= 0 || ctx.temperature > 0 || ctx.seq.length === 0 || s.n < 2) return i;
  const bestCredited = s.credited[i];
  const held = Math.max(Math.floor(bestCredited), s.hybrid[i]);
  const depth = Math.min(ctx.seq.length, held + Math.max(1, ctx.affinityBlocks));
  const key = keyHalves(ctx.seq[depth - 1]);
  const limit = s.cost[i] + ctx.prefixAffinity * s.prefillMs[i];
  let chosen = i;
  let top = hrwAt(key, s, i);
  const bestIdle = s.prefill[i] === 0;
  for (let k = 0; k < s.n; k++) {
    if (k === i || s.cost[k] > limit || (!ctx.affinityAny && s.credited[k] !== bestCredited) || s.requests[k] + 1 > cap)
      continue;
    // While the cheapest has no prefill queued, neither has the pick: at light load a cold prefill
    // waiting for another is the tail, and its siblings find it by its booking wherever it goes.
    // Once every instance queues (saturation), the slack alone decides: meeting is worth more then.
    if (bestIdle && s.prefill[k] > 0) continue;
    const w = hrwAt(key, s, k);
    if (w > top) {
      top = w;
      chosen = k;
    }
  }
  return chosen;
}

/**
 * Bounded loads (consistent hashing with bounded loads, Mirrokni et al. 2018): with this request, no
 * candidate should hold more than factor x the mean in-flight requests (at least one). Returns the
 * most a candidate may hold after taking it. Not rounded up: at a few requests per instance a
 * ceiling lets three busy instances and an idle one pass as balanced.
 */
function loadCap(s: PickLoads, factor: number): number {
  let total = 1;
  for (let k = 0; k < s.n; k++) total += s.requests[k];
  return Math.max(1, (factor * total) / s.n);
}

/**
 * The cheapest pick `i` is at its cap. A greedy cost prices only this request: a new conversation
 * placed where its shared system prompt is cached saves a few ms now, but its later turns stay
 * there, so the popular prefix's holders fill up while an instance without it idles. Over the cap,
 * the pick keeps the request only if its cache, plus the prefill queued on the cheapest candidate
 * within the cap beyond the pick's own queue, saves at least half of the prefill that candidate
 * would do (a conversation's own history, a long shared document, an instance within the cap that
 * is busy with a few long prompts); otherwise that candidate takes it. `unique`, while that
 * candidate has no prefill queued: the saving counts only the prefix the pick alone holds, beyond
 * the next best candidate's (loaded or not): a system prompt several instances already hold is one an idle instance takes on for the
 * price of one prefill that delays nobody, so it does not keep a new session on a loaded holder; a
 * conversation's history, held by one instance, still does. (Onto a queue, recomputing it would
 * delay what waits there: a flood's instances keep the plain rule.) `newSession`: a session's first
 * request has no history of its own, so whatever prefix it finds cached is shared (a system prompt),
 * held by one instance or several: while the candidate within the cap has no prefill queued, that
 * candidate takes it on, whatever the prefix saves (a lone holder of a system prompt otherwise kept
 * every new session: the agentic loop, seed 1, put 268 of 768 requests on one engine and left two idle).
 */
function withinBound(s: PickLoads, i: number, cap: number, unique: boolean, newSession: boolean): number {
  let u = -1;
  let next = Infinity;
  for (let k = 0; k < s.n; k++) {
    if (s.requests[k] + 1 <= cap && (u < 0 || s.cost[k] < s.cost[u])) u = k;
    if (k !== i && s.prefillMs[k] < next) next = s.prefillMs[k];
  }
  if (u < 0) return i;
  if (newSession && s.prefill[u] === 0) return u;
  const elsewhere = unique && s.prefill[u] === 0 ? next : s.prefillMs[u];
  // The request would also wait for whatever that candidate has queued beyond the pick (the saving
  // counts it): the bound counts requests, and a few long prompts queued there are not less work
  // than many short ones here.
  return prefixSaving(s.queueMs[i], s.prefillMs[i], elsewhere, s.queueMs[u]) >= 0.5 * elsewhere ? i : u;
}

/** Load without cache credit: what least-loaded and power-of-two compare. */
const loadOf = (c: CandidateScore) =>
  c.load.activeRequests * 1e9 + c.load.activePrefillTokens / 16 + c.load.activeBlocks;

export const leastLoad: Picker = (c, ctx) => pickByCost(c.map(loadOf), 0, ctx.rand);

/** The less loaded of two candidates drawn at random. */
export const powerOfTwoChoices: Picker = (c, ctx) => {
  if (c.length < 2) return c.length - 1;
  const a = Math.floor(ctx.rand() * c.length);
  let b = Math.floor(ctx.rand() * (c.length - 1));
  if (b >= a) b++;
  return loadOf(c[a]) <= loadOf(c[b]) ? a : b;
};

/** Rendezvous (highest random weight) hashing of the session key: a session sticks while its instance is eligible. */
export const rendezvousBySession: Picker = (c, ctx) => {
  if (!ctx.sessionKey) return byCost(c, ctx);
  const key = keyHalves(xxh3_64(ctx.sessionKey, 0n));
  let best = -1;
  let bestW = -1;
  for (let i = 0; i < c.length; i++) {
    const w = hrw(key, c[i]);
    if (w > bestW) {
      bestW = w;
      best = i;
    }
  }
  return best;
};

export const rotation: Picker = (c, ctx) => (c.length === 0 ? -1 : ctx.nextTurn() % c.length);

export const uniform: Picker = (c, ctx) => (c.length === 0 ? -1 : Math.floor(ctx.rand() * c.length));

/** The named instance (the cheapest of its DP ranks), or -1 when it is not among the candidates. */
export const namedTarget: Picker = (c, ctx) => {
  const idx = c.map((x, i) => [x, i] as const).filter(([x]) => x.instance === ctx.target);
  if (idx.length === 0) return -1;
  return idx[
    pickByCost(
      idx.map(([x]) => x.cost),
      0,
      ctx.rand,
    )
  ][1];
};
