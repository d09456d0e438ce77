// A leaderboard cell's figures: one policy at one load point, per seed and reduced over seeds (mean,
// and min-max as the spread), and the verdicts that compare policies at a load point. Pure: fed by
// the fleet summary (bench fleet's own figures) and the simulated records.
import type { FleetOutput } from '../../fleet-sim/types.js';
import type { FleetPolicyResult } from '../fleet/summary.js';
import { dist } from '../stats.js';

export interface SeedFigures {
  seed: number;
  sent: number;
  /** Served: a first token and a finished response. */
  ok: number;
  /** Refused by the routers (503: no capacity within the queue timeout). */
  refused: number;
  /** Failed otherwise (engine rejection, run deadline). */
  failed: number;
  ttftP50: number;
  ttftP90: number;
  ttftP99: number;
  tpotP90: number;
  /** Share of sent requests within both SLOs. */
  goodput: number;
  /** Prompt tokens served from cache (first admission) / the oracle's infinite-cache hit rate. */
  hitRate: number;
  oracleHitRate: number;
  /** TTFT p90 per tenant (request class), when the workload has tenants. */
  tenantTtftP90: Record<string, number>;
}

export interface Spread {
  mean: number;
  min: number;
  max: number;
}

export interface PolicyCell {
  policy: string;
  /** Null: run; else why not (the row is kept, marked). */
  notRun: string | null;
  seeds: SeedFigures[];
}

export function seedFigures(
  seed: number,
  r: FleetPolicyResult,
  out: FleetOutput,
  oracleHitRate: number,
  tenantOf: (i: number) => string | undefined,
): SeedFigures {
  const byTenant = new Map<string, number[]>();
  for (const rec of out.records) {
    const t = tenantOf(rec.index);
    if (t === undefined || rec.ttftMs === null || rec.error !== null) continue;
    byTenant.set(t, [...(byTenant.get(t) ?? []), rec.ttftMs]);
  }
  const refused = r.fleet.refused;
  return {
    seed,
    sent: r.requests.sent,
    ok: r.requests.ok,
    refused,
    failed: r.requests.errors - refused,
    ttftP50: r.ttftMs.p50,
    ttftP90: r.ttftMs.p90,
    ttftP99: r.ttftMs.p99,
    tpotP90: r.tpotMs?.p90 ?? NaN,
    goodput: r.fleet.goodput.share,
    hitRate: r.hitRate.usage,
    oracleHitRate,
    tenantTtftP90: Object.fromEntries([...byTenant].sort().map(([t, v]) => [t, dist(v).p90])),
  };
}

export function spread(xs: readonly number[]): Spread {
  const v = xs.filter((x) => Number.isFinite(x));
  if (v.length === 0) return { mean: NaN, min: NaN, max: NaN };
  return { mean: v.reduce((a, b) => a + b, 0) / v.length, min: Math.min(...v), max: Math.max(...v) };
}

export const over = (c: PolicyCell, f: (s: SeedFigures) => number): Spread => spread(c.seeds.map(f));
export const total = (c: PolicyCell, f: (s: SeedFigures) => number): number => c.seeds.reduce((a, s) => a + f(s), 0);

export type Standing = 'first' | 'within spread' | 'behind';

export interface Verdict {
  /** The best other policy that served as many requests as the most-served (null: none ran). */
  rival: string | null;
  ttftP90: Standing;
  goodput: Standing;
  /** kv served at least as many requests (over all seeds) as every other policy. */
  servesMost: boolean;
  /** (rival p90 - kv p90) / rival p90: > 0.1 is a 10 % win. */
  ttftGain: number;
}

/**
 * How `subject` (kvrouter's default) stands at one load point. Latency is compared only between
 * policies serving the most requests: a policy that refuses or fails more does not win on latency.
 * Within spread: the means differ but the seeds' ranges overlap.
 */
export function verdict(cells: readonly PolicyCell[], subject: string): Verdict | null {
  const ran = cells.filter((c) => c.notRun === null && c.seeds.length > 0);
  const me = ran.find((c) => c.policy === subject);
  if (!me) return null;
  const served = (c: PolicyCell) => total(c, (s) => s.ok);
  const most = Math.max(...ran.map(served));
  const others = ran.filter((c) => c !== me);
  const full = others.filter((c) => served(c) >= most);
  const p90 = (c: PolicyCell) => over(c, (s) => s.ttftP90);
  const good = (c: PolicyCell) => over(c, (s) => s.goodput);
  const rival = [...full].sort((a, b) => p90(a).mean - p90(b).mean)[0] ?? null;
  const bestGood = [...others].sort((a, b) => good(b).mean - good(a).mean)[0] ?? null;
  const stand = (mine: Spread, theirs: Spread | null, lowerIsBetter: boolean): Standing => {
    if (!theirs) return 'first';
    const better = lowerIsBetter ? mine.mean <= theirs.mean : mine.mean >= theirs.mean;
    if (better) return 'first';
    const overlap = lowerIsBetter ? mine.min <= theirs.max : mine.max >= theirs.min;
    return overlap ? 'within spread' : 'behind';
  };
  const mineP90 = p90(me);
  return {
    rival: rival?.policy ?? null,
    // A kv that serves fewer than the most cannot be first on latency.
    ttftP90: served(me) < most ? 'behind' : stand(mineP90, rival ? p90(rival) : null, true),
    goodput: stand(good(me), bestGood ? good(bestGood) : null, false),
    servesMost: served(me) >= most,
    ttftGain: rival ? (p90(rival).mean - mineP90.mean) / p90(rival).mean : NaN,
  };
}
