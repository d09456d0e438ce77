// Routing policies: strategies behind one function type. Each picks among eligible candidates
// (healthy, not over their busy threshold) that already carry their cost breakdown.
import { xxh3_64 } from '../hashing/index.js';
import { pickByCost } from './cost.js';
import type { CandidateScore } from './scheduler.js';

export const POLICIES = ['kv', 'approx', 'round-robin', 'random', 'least-loaded', 'power-of-two', 'session', 'direct'] as const;
export type PolicyName = (typeof POLICIES)[number];

export interface PolicyContext {
  temperature: number;
  rand: () => number;
  /** Monotonic counter for round-robin, owned by the caller per pool. */
  nextTurn: () => number;
  sessionKey: string | null;
  target: string | null;
  /** Sibling co-location slack (fraction of the cheapest candidate's prefill time; 0 = off). */
  prefixAffinity: number;
  affinityBlocks: number;
  /** The request's seq hashes (names its prefixes). */
  seq: BigUint64Array;
}

export type Policy = (eligible: readonly CandidateScore[], ctx: PolicyContext) => number;

const byCost: Policy = (c, ctx) => pickByCost(c.map((x) => x.cost), ctx.temperature, ctx.rand);

/** Rendezvous weight of a worker for a key (highest wins): stable as workers come and go. */
const hrw = (key: bigint, c: CandidateScore): bigint => xxh3_64(`${c.instance}\u0000${c.dpRank}`, key);

/**
 * The cheapest candidate, except that near-equals go by the prefix: among candidates crediting the
 * same cached prefix as the cheapest and within `prefixAffinity x its prefill time` of its cost, the
 * one the request's next `affinityBlocks` blocks hash to wins. Requests sharing a prefix nobody holds
 * yet thus meet on one instance (bounded-load consistent hashing: a loaded preferred instance
 * falls out of the slack, and its overflow lands on the prefix's next choice, not anywhere).
 */
const byCostWithAffinity: Policy = (c, ctx) => {
  const i = byCost(c, ctx);
  if (i < 0 || ctx.prefixAffinity <= 0 || ctx.temperature > 0 || ctx.seq.length === 0 || c.length < 2) return i;
  const best = c[i];
  const depth = Math.min(ctx.seq.length, Math.floor(best.creditedBlocks) + Math.max(1, ctx.affinityBlocks));
  const key = ctx.seq[depth - 1];
  const limit = best.cost + ctx.prefixAffinity * best.prefillMs;
  let chosen = i;
  let top = hrw(key, best);
  for (let k = 0; k < c.length; k++) {
    const x = c[k];
    if (k === i || x.cost > limit || x.creditedBlocks !== best.creditedBlocks) continue;
    const w = hrw(key, x);
    if (w > top) {
      top = w;
      chosen = k;
    }
  }
  return chosen;
};

/** Load without cache credit: what least-loaded and power-of-two compare. */
const loadOf = (c: CandidateScore) => c.load.activeRequests * 1e9 + c.load.activePrefillTokens / 16 + c.load.activeBlocks;

const leastLoaded: Policy = (c, ctx) => pickByCost(c.map(loadOf), 0, ctx.rand);

const powerOfTwo: Policy = (c, ctx) => {
  if (c.length < 2) return c.length - 1;
  const a = Math.floor(ctx.rand() * c.length);
  let b = Math.floor(ctx.rand() * (c.length - 1));
  if (b >= a) b++;
  return loadOf(c[a]) <= loadOf(c[b]) ? a : b;
};

/** Rendezvous (highest random weight) hashing: a session sticks to one instance while it is eligible. */
const session: Policy = (c, ctx) => {
  if (!ctx.sessionKey) return byCost(c, ctx);
  let best = -1;
  let bestW = -1n;
  for (let i = 0; i < c.length; i++) {
    const w = xxh3_64(`${ctx.sessionKey}\u0000${c[i].instance}\u0000${c[i].dpRank}`, 0n);
    if (w > bestW) {
      bestW = w;
      best = i;
    }
  }
  return best;
};

const direct: Policy = (c, ctx) => {
  const idx = c.map((x, i) => [x, i] as const).filter(([x]) => x.instance === ctx.target);
  if (idx.length === 0) return -1;
  return idx[pickByCost(idx.map(([x]) => x.cost), 0, ctx.rand)][1];
};

export const POLICY_IMPL: Readonly<Record<PolicyName, Policy>> = {
  kv: byCostWithAffinity,
  approx: byCostWithAffinity,
  'round-robin': (c, ctx) => (c.length === 0 ? -1 : ctx.nextTurn() % c.length),
  random: (c, ctx) => (c.length === 0 ? -1 : Math.floor(ctx.rand() * c.length)),
  'least-loaded': leastLoaded,
  'power-of-two': powerOfTwo,
  session,
  direct,
};

export function isPolicy(name: string): name is PolicyName {
  return (POLICIES as readonly string[]).includes(name);
}
