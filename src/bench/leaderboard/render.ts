// The leaderboard report: a verdict table over every scenario and load point, one table per
// scenario (policies x load points, seeds reduced to mean and min-max), a TTFT p90 and a goodput
// chart per load ladder. Tables go through report.ts, charts through svg.ts.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { renderTable, type Table } from '../report.js';
import { lineChart } from '../svg.js';
import { over, type PolicyCell, spread, total, type Verdict, verdict } from './figures.js';
import type { LoadLadder } from './scenarios.js';

export interface LoadPoint {
  load: number;
  /** The bench fleet flags of this point (add --seed N and --policies to rerun one cell). */
  args: string[];
  /** Oracle hit rate and working set of seed 0's workload (every seed's is in `cells`). */
  workload: string;
  /**
   * Per seed: the TTFT p90 no router can beat, every request alone on an idle engine with the
   * oracle's cache (bound.ts).
   */
  ttftFloorP90: number[];
  cells: PolicyCell[];
}

export interface ScenarioResult {
  name: string;
  title: string;
  ladder: Pick<LoadLadder, 'flag' | 'unit'>;
  /** Null: ran; else why the whole scenario did not run. */
  notRun: string | null;
  points: LoadPoint[];
  /** Tenants (request classes) with a TTFT breakdown. */
  tenants: string[];
}

/** Everything that is a function of the inputs (no wall clock, no date): the same seeds give the same bytes. */
export interface LeaderboardSummary {
  bench: 'leaderboard';
  quick: boolean;
  seeds: number[];
  policies: string[];
  subject: string;
  slo: { ttftMs: number; tpotMs: number };
  scenarios: ScenarioResult[];
}

const ms = (v: number) => (Number.isFinite(v) ? Math.round(v) : 'n/a');
const pct = (v: number) => (Number.isFinite(v) ? `${(100 * v).toFixed(1)}` : 'n/a');
const range = (lo: number, hi: number, f: (v: number) => string | number) => `${f(lo)}–${f(hi)}`;

export function verdicts(s: LeaderboardSummary): Array<{ scenario: string; load: number; v: Verdict | null }> {
  return s.scenarios.flatMap((sc) =>
    sc.points.map((p) => ({ scenario: sc.name, load: p.load, v: verdict(p.cells, s.subject) })),
  );
}

export function verdictTable(s: LeaderboardSummary): Table {
  const rows: Table['rows'] = [];
  for (const sc of s.scenarios) {
    if (sc.notRun) {
      rows.push([sc.name, 'n/a', `not run: ${sc.notRun}`, '', '', '', '', '', '', '']);
      continue;
    }
    for (const p of sc.points) {
      const v = verdict(p.cells, s.subject);
      const me = p.cells.find((c) => c.policy === s.subject);
      const rival = v?.rival ? p.cells.find((c) => c.policy === v.rival) : undefined;
      const floor = spread(p.ttftFloorP90).mean;
      const rivalP90 = rival ? over(rival, (x) => x.ttftP90).mean : NaN;
      rows.push([
        sc.name,
        `${p.load} ${sc.ladder.unit}`,
        v?.rival ?? 'n/a',
        me ? ms(over(me, (x) => x.ttftP90).mean) : 'n/a',
        rival ? ms(over(rival, (x) => x.ttftP90).mean) : 'n/a',
        v ? `${v.ttftP90}${Number.isFinite(v.ttftGain) ? ` (${(100 * v.ttftGain).toFixed(0)} %)` : ''}` : 'n/a',
        v?.goodput ?? 'n/a',
        v ? (v.servesMost ? 'yes' : 'NO') : 'n/a',
        ms(floor),
        Number.isFinite(rivalP90 + floor) ? `${((100 * (rivalP90 - floor)) / rivalP90).toFixed(0)} %` : 'n/a',
      ]);
    }
  }
  return {
    title: `${s.subject} against the best other policy (mean over seeds ${s.seeds.join(', ')})`,
    columns: [
      'scenario',
      'load',
      'best other (TTFT p90, serving the most)',
      `${s.subject} TTFT p90 ms`,
      'its TTFT p90 ms',
      `${s.subject} on TTFT p90 (gain)`,
      `${s.subject} on goodput`,
      `${s.subject} serves the most`,
      'TTFT p90 floor ms',
      'most any router could gain on the best other',
    ],
    rows,
  };
}

export function scenarioTable(sc: ScenarioResult, s: LeaderboardSummary): Table {
  const rows: Table['rows'] = [];
  for (const p of sc.points) {
    const ran = p.cells.filter((c) => c.notRun === null && c.seeds.length);
    const most = Math.max(0, ...ran.map((c) => total(c, (x) => x.ok)));
    const fullServed = ran.filter((c) => total(c, (x) => x.ok) >= most);
    const bestP90 = Math.min(...fullServed.map((c) => over(c, (x) => x.ttftP90).mean));
    const bestGood = Math.max(...ran.map((c) => over(c, (x) => x.goodput).mean));
    for (const c of p.cells) {
      if (c.notRun !== null) {
        rows.push([p.load, c.policy, `not run: ${c.notRun}`, ...Array(8 + sc.tenants.length).fill('')]);
        continue;
      }
      const p90 = over(c, (x) => x.ttftP90);
      const good = over(c, (x) => x.goodput);
      const ok = total(c, (x) => x.ok);
      const marks = [
        ok < most ? `serves ${most - ok} fewer` : '',
        ok >= most && p90.mean === bestP90 ? 'best p90' : '',
        good.mean === bestGood ? 'best goodput' : '',
      ].filter(Boolean);
      rows.push([
        p.load,
        c.policy,
        marks.join(', '),
        `${ok}/${total(c, (x) => x.sent)}`,
        `${total(c, (x) => x.refused)}/${total(c, (x) => x.failed)}`,
        ms(over(c, (x) => x.ttftP50).mean),
        `${ms(p90.mean)} (${range(p90.min, p90.max, (v) => String(ms(v)))})`,
        ms(over(c, (x) => x.ttftP99).mean),
        ms(over(c, (x) => x.tpotP90).mean),
        `${pct(good.mean)} (${range(good.min, good.max, pct)})`,
        `${pct(over(c, (x) => x.hitRate).mean)} / ${pct(over(c, (x) => x.oracleHitRate).mean)}`,
        ...sc.tenants.map((t) => ms(over(c, (x) => x.tenantTtftP90[t] ?? NaN).mean)),
      ]);
    }
  }
  return {
    title: `${sc.name}: ${sc.title}`,
    columns: [
      sc.ladder.unit,
      'policy',
      'marks',
      'served/sent',
      'refused/failed',
      'TTFT p50 ms',
      'TTFT p90 ms (min–max)',
      'TTFT p99 ms',
      'TPOT p90 ms',
      `goodput % (min–max)`,
      'hit % / oracle %',
      ...sc.tenants.map((t) => `${t} TTFT p90 ms`),
    ],
    rows,
  };
}

/** One chart per load ladder (two or more points): mean TTFT p90 and goodput against load, a line per policy. */
export function writeLadderCharts(dir: string, sc: ScenarioResult): string[] {
  if (sc.points.length < 2) return [];
  const policies = [
    ...new Set(sc.points.flatMap((p) => p.cells.filter((c) => c.notRun === null).map((c) => c.policy))),
  ];
  const series = (f: (c: PolicyCell) => number) =>
    policies.map((name) => ({
      name,
      points: sc.points.flatMap((p) => {
        const c = p.cells.find((x) => x.policy === name && x.notRun === null);
        return c ? [[p.load, f(c)] as const] : [];
      }),
    }));
  const files = [`${sc.name}-ttft-p90.svg`, `${sc.name}-goodput.svg`];
  writeFileSync(
    join(dir, files[0]),
    lineChart({
      title: `TTFT p90 against load — ${sc.name} (mean over seeds)`,
      xLabel: sc.ladder.unit,
      yLabel: 'TTFT p90 (ms)',
      series: series((c) => over(c, (x) => x.ttftP90).mean),
    }),
  );
  writeFileSync(
    join(dir, files[1]),
    lineChart({
      title: `Goodput against load — ${sc.name} (mean over seeds)`,
      xLabel: sc.ladder.unit,
      yLabel: 'goodput (% of sent within SLO)',
      series: series((c) => 100 * over(c, (x) => x.goodput).mean),
      yMax: 100,
    }),
  );
  return files;
}

export const LEADERBOARD_NOTES = [
  "- Every cell is one `kvrouter bench fleet` run (the command per load point is listed below; add `--seed N --policies P`): engine-sim EngineCores with the h200-qwen3-8b profile in virtual time, the server's own scheduler, index and KV-event path.",
  '- Figures are the mean over the seeds; "min–max" is the spread over seeds. Each seed changes the workload (tokens, arrivals), the engines and the routers\' random choices.',
  '- served/sent and refused/failed are summed over the seeds. A policy serving fewer requests than the most-served at that load is marked and never "best p90": latency of fewer requests is not comparable.',
  '- Goodput: share of sent requests with TTFT and mean TPOT (2+ tokens) within the SLO. Hit %: prompt tokens served from cache at first admission, against the oracle (infinite cache, same workload).',
  "- TTFT p90 floor: the p90 no router can beat, every request alone on an idle engine with the oracle's cache (its uncached tokens prefilled in the engine's chunks, the same perf model); \"most any router could gain\" = (best other's TTFT p90 - floor) / best other's: below 10 %, no policy can beat it by 10 %.",
  '- Verdict: "first" = best mean; "within spread" = behind on the mean but the seeds\' ranges overlap; "behind" = outside the spread. TTFT p90 is compared with the best other policy serving the most requests.',
];

export function scenarioSection(sc: ScenarioResult, s: LeaderboardSummary, charts: string[]): string {
  const head = [`## ${sc.name}`, '', sc.title, ''];
  if (sc.notRun) return [...head, `Not run: ${sc.notRun}.`, ''].join('\n');
  return [
    ...head,
    ...sc.points.map(
      (p) =>
        `- ${p.load} ${sc.ladder.unit}: ${p.workload}; TTFT p90 floor ${ms(spread(p.ttftFloorP90).mean)} ms; \`kvrouter bench fleet ${p.args.join(' ')}\``,
    ),
    '',
    renderTable(scenarioTable(sc, s)),
    ...charts.map((f) => `![${f}](${f})`),
    '',
  ].join('\n');
}
