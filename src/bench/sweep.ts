// `kvrouter bench sweep`: one workload over a grid of routing options (and, optionally, several
// arrival rates), each point on fresh engines and routers like `bench cluster`; prints the best
// point per rate, and writes every point's figures, curves of the objective along each grid key and
// TTFT percentiles against the rate (SVG) under bench/results/.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { type OptionTable, parseCommand } from '../common/args.js';
import { FLEET_OPTIONS, prepareCluster, runVariants, splitPolicies } from './cluster.js';
import { type PolicyVariant, variant } from './cluster/policies.js';
import type { ClusterReport } from './cluster/render.js';
import type { PolicyResult } from './cluster/summary.js';
import { Progress } from './progress.js';
import { type Table, writeReport } from './report.js';
import { lineChart, type Series } from './svg.js';

const OBJECTIVES = {
  ttft_p50: (r: PolicyResult) => r.ttftMs.p50,
  ttft_p90: (r: PolicyResult) => r.ttftMs.p90,
  ttft_p99: (r: PolicyResult) => r.ttftMs.p99,
  ttft_mean: (r: PolicyResult) => r.ttftMs.mean,
  // Higher is better: negated so that every objective is minimised.
  hit: (r: PolicyResult) => -r.hitRate.usage,
} as const;
type Objective = keyof typeof OBJECTIVES;

const OPTIONS: OptionTable = {
  base: {
    type: 'string',
    default: 'kv',
    arg: 'POLICY',
    help: 'the variant the grid sets keys on (a bench cluster policy name)',
  },
  grid: {
    type: 'string',
    arg: 'K=V,V;K=V',
    help: 'routing keys and their values, e.g. "prefix_affinity=0,0.25,0.5;decode_interference=0,0.1" (every combination runs)',
  },
  also: {
    type: 'string',
    arg: 'A,B',
    help: 'reference policies run once per rate, e.g. round-robin,session,kv-blocks',
  },
  'rate-scales': {
    type: 'string',
    arg: 'X,Y',
    help: "arrival scales to run every point at (default: the workload's --rate-scale)",
  },
  objective: {
    type: 'string',
    default: 'ttft_p90',
    arg: 'NAME',
    help: `what "best" minimises: ${Object.keys(OBJECTIVES).join(', ')} (hit maximises the first-admission hit rate)`,
  },
  ...FLEET_OPTIONS,
  out: { type: 'string', arg: 'DIR', help: 'report directory (default bench/results/sweep-<time>)' },
};

const SUMMARY =
  'A workload over a grid of routing options and arrival rates; prints the best point (see docs/tuning.md).';

export interface GridKey {
  key: string;
  values: string[];
}

/** "a=1,2;b=x" -> [{a,[1,2]},{b,[x]}]. */
export function parseGrid(spec: string): GridKey[] {
  return spec
    .split(';')
    .map((s) => s.trim())
    .filter(Boolean)
    .map((dim) => {
      const eq = dim.indexOf('=');
      const values =
        eq > 0
          ? dim
              .slice(eq + 1)
              .split(',')
              .map((x) => x.trim())
              .filter(Boolean)
          : [];
      if (eq <= 0 || values.length === 0) throw new Error(`--grid: "${dim}" is not key=value[,value...]`);
      return { key: dim.slice(0, eq).trim(), values };
    });
}

/** Every combination of the grid as inline variant names on `base`, in grid order. */
export function gridPoints(base: string, grid: readonly GridKey[]): { name: string; at: Record<string, string> }[] {
  let points: Record<string, string>[] = [{}];
  for (const g of grid) points = points.flatMap((p) => g.values.map((v) => ({ ...p, [g.key]: v })));
  return points.map((at) => ({
    at,
    name: Object.keys(at).length
      ? `${base}[${Object.entries(at)
          .map(([k, v]) => `${k}=${v}`)
          .join(',')}]`
      : base,
  }));
}

interface SweepRow {
  rateScale: number;
  name: string;
  at: Record<string, string> | null;
  result: PolicyResult;
}

export async function run(argv: string[]): Promise<number> {
  const parsed = parseCommand('bench sweep', SUMMARY, OPTIONS, argv);
  if ('code' in parsed) return parsed.code;
  const v = parsed.values;
  const objective = String(v.objective) as Objective;
  if (!(objective in OBJECTIVES)) throw new Error(`--objective must be one of ${Object.keys(OBJECTIVES).join(', ')}`);
  const grid = typeof v.grid === 'string' ? parseGrid(v.grid) : [];
  const points = gridPoints(String(v.base), grid);
  const also = typeof v.also === 'string' ? splitPolicies(v.also) : [];
  // Resolve every name first: a typo fails before engines start.
  const variants: { v: PolicyVariant; at: Record<string, string> | null }[] = [
    ...points.map((p) => ({ v: variant(p.name), at: p.at })),
    ...also.map((n) => ({ v: variant(n), at: null })),
  ];
  const setup = await prepareCluster(v, argv);
  try {
    const scales =
      typeof v['rate-scales'] === 'string'
        ? String(v['rate-scales'])
            .split(',')
            .map((x) => Number(x.trim()))
        : [setup.config.rateScale];
    if (scales.some((x) => !(x > 0))) throw new Error('--rate-scales must be positive numbers');
    const progress = new Progress(setup.workload.requests.length * variants.length * scales.length, '');
    const rows: SweepRow[] = [];
    const reports: ClusterReport[] = [];
    for (const scale of scales) {
      progress.log(`rate scale ${scale}: ${variants.length} variants`);
      const { data } = await runVariants(
        setup,
        variants.map((x) => x.v),
        scale,
        progress,
      );
      reports.push(data);
      data.results.forEach((r, i) => {
        rows.push({ rateScale: scale, name: variants[i].v.name, at: variants[i].at, result: r });
      });
    }
    progress.finish();
    const score = OBJECTIVES[objective];
    const best = scales.map((scale) => {
      const mine = rows.filter((r) => r.rateScale === scale && r.at !== null);
      return mine.reduce<SweepRow | null>((b, r) => (b === null || score(r.result) < score(b.result) ? r : b), null);
    });
    const dir = writeReport(
      'sweep',
      { bench: 'sweep', args: argv, objective, grid, scales, rows, reports },
      tables(rows, objective, setup.orc.hitRate),
      typeof v.out === 'string' ? v.out : undefined,
    );
    const charts = writeSweepCharts(dir, rows, grid, best, objective, setup.workload.name);
    writeFileSync(join(dir, 'charts.md'), charts.map((c) => `![${c}](${c})\n`).join('\n'));
    for (const b of best) {
      if (!b) continue;
      process.stdout.write(
        `best at rate scale ${b.rateScale} by ${objective}: ${b.name} (TTFT p50 ${b.result.ttftMs.p50.toFixed(0)} / p90 ${b.result.ttftMs.p90.toFixed(0)} / p99 ${b.result.ttftMs.p99.toFixed(0)} ms, hit ${(100 * b.result.hitRate.usage).toFixed(1)}%)\n`,
      );
    }
    process.stdout.write(`report: ${dir}\n`);
    return rows.every((r) => r.result.requests.ok > 0) ? 0 : 1;
  } finally {
    await setup.workload.close();
  }
}

function tables(rows: readonly SweepRow[], objective: Objective, oracleHit: number): Table[] {
  const ms = (x: number) => (Number.isFinite(x) ? Math.round(x) : NaN);
  return [
    {
      title: `Every point (objective: ${objective}; oracle hit ${(100 * oracleHit).toFixed(1)} %)`,
      columns: [
        'rate scale',
        'variant',
        'TTFT p50 ms',
        'p90',
        'p99',
        'mean',
        'hit % (first admission)',
        'req CoV',
        'ok/sent',
      ],
      rows: rows.map((r) => [
        r.rateScale,
        r.name,
        ms(r.result.ttftMs.p50),
        ms(r.result.ttftMs.p90),
        ms(r.result.ttftMs.p99),
        ms(r.result.ttftMs.mean),
        +(100 * r.result.hitRate.usage).toFixed(1),
        +r.result.imbalance.requestCov.toFixed(3),
        `${r.result.requests.ok}/${r.result.requests.sent}`,
      ]),
    },
  ];
}

/** Objective along each grid key (the other keys at the best point), and TTFT against the rate. */
function writeSweepCharts(
  dir: string,
  rows: readonly SweepRow[],
  grid: readonly GridKey[],
  best: readonly (SweepRow | null)[],
  objective: Objective,
  title: string,
): string[] {
  const files: string[] = [];
  const score = OBJECTIVES[objective];
  const sign = objective === 'hit' ? -100 : 1;
  for (const g of grid) {
    if (g.values.length < 2 || g.values.some((x) => !Number.isFinite(Number(x)))) continue;
    const series: Series[] = [];
    for (const b of best) {
      const at = b?.at;
      if (!b || !at) continue;
      const line = rows.filter(
        (r) =>
          r.rateScale === b.rateScale &&
          r.at &&
          Object.entries(at).every(([k, val]) => k === g.key || r.at![k] === val),
      );
      series.push({
        name: `rate scale ${b.rateScale}`,
        points: line.map((r) => [Number(r.at![g.key]), sign * score(r.result)] as const).sort((a, c) => a[0] - c[0]),
      });
    }
    const file = `sweep-${g.key}.svg`;
    writeFileSync(
      join(dir, file),
      lineChart({
        title: `${objective} along ${g.key} (other keys at the best point) — ${title}`,
        xLabel: g.key,
        yLabel: objective === 'hit' ? 'hit rate %' : `${objective} (ms)`,
        series,
      }),
    );
    files.push(file);
  }
  const scales = [...new Set(rows.map((r) => r.rateScale))].sort((a, b) => a - b);
  if (scales.length > 1) {
    for (const [q, pick] of [
      ['p50', (r: PolicyResult) => r.ttftMs.p50],
      ['p90', (r: PolicyResult) => r.ttftMs.p90],
      ['p99', (r: PolicyResult) => r.ttftMs.p99],
    ] as const) {
      const names = [...new Set(rows.map((r) => r.name))];
      const series = names.map((n) => ({
        name: n,
        points: rows
          .filter((r) => r.name === n)
          .map((r) => [r.rateScale, pick(r.result)] as const)
          .sort((a, b) => a[0] - b[0]),
      }));
      const file = `ttft-${q}-vs-rate.svg`;
      writeFileSync(
        join(dir, file),
        lineChart({
          title: `TTFT ${q} against arrival rate — ${title}`,
          xLabel: 'rate scale (arrivals x)',
          yLabel: `TTFT ${q} (ms)`,
          series,
        }),
      );
      files.push(file);
    }
  }
  return files;
}
