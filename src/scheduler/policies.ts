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
}

export type Policy = (eligible: readonly CandidateScore[], ctx: PolicyContext) => number;

const byCost: Policy = (c, ctx) => pickByCost(c.map((x) => x.cost), ctx.temperature, ctx.rand);

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
  kv: byCost,
  approx: byCost,
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
