// `kvrouter bench leaderboard`: kvrouter's default policy against the peers' default algorithms and a
// round-robin floor, on every scenario (src/bench/leaderboard/scenarios.ts) over its load ladder and
// several seeds. Each cell is one `bench fleet` simulation (fleetSetup + simulateSetup: the same
// code path, summary and figures); this file only loops, reduces over seeds and writes the report.
import { appendFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { intOption, numberOption, type OptionTable, type ParsedOptions, parseCommand } from '../common/args.js';
import { PEER_POLICIES, variant } from './cluster/policies.js';
import { splitPolicies } from './cluster.js';
import { fleetSetup, notSimulated, simulateSetup } from './fleet.js';
import { ttftFloorP90 } from './leaderboard/bound.js';
import { decisionLine } from './leaderboard/decisions.js';
import { type PolicyCell, seedFigures } from './leaderboard/figures.js';
import {
  LEADERBOARD_NOTES,
  type LeaderboardSummary,
  type LoadPoint,
  type ScenarioResult,
  scenarioSection,
  verdictTable,
  writeLadderCharts,
} from './leaderboard/render.js';
import { SCENARIOS } from './leaderboard/scenarios.js';
import { machine, renderTable, writeReport } from './report.js';

const SUBJECT = 'kv';
const DEFAULT_POLICIES = [SUBJECT, ...PEER_POLICIES, 'round-robin'];

const OPTIONS: OptionTable = {
  scenarios: {
    type: 'string',
    arg: 'A,B',
    help: `scenarios to run, in order (default all: ${SCENARIOS.map((s) => s.name).join(', ')})`,
  },
  policies: {
    type: 'string',
    arg: 'A,B',
    help: `policies (bench fleet variants; default ${DEFAULT_POLICIES.join(',')}); ones the simulator cannot run yet are listed as not run`,
  },
  seeds: {
    type: 'string',
    default: '0,1,2',
    arg: 'A,B',
    help: 'seeds of every cell (the spread is min-max over them)',
  },
  loads: {
    type: 'string',
    arg: 'A,B',
    help: "load points replacing every chosen scenario's ladder (values of its load flag: see the report)",
  },
  'slo-ttft-ms': { type: 'string', default: '2000', arg: 'MS', help: 'goodput: TTFT objective' },
  'slo-tpot-ms': { type: 'string', default: '100', arg: 'MS', help: 'goodput: time-per-output-token objective' },
  'drain-timeout': {
    type: 'string',
    default: '300',
    arg: 'S',
    help: 'requests still running this long (virtual s) after the last open-loop arrival fail (counted as failed)',
  },
  'decision-log': {
    type: 'string',
    arg: 'FILE',
    help: 'also write every routing decision (each candidate: cached blocks, load, predicted queue/prefill/TTFT, cost) as JSON lines; narrow it with --scenarios, --loads, --seeds',
  },
  quick: {
    type: 'boolean',
    help: 'small scenarios (4 engines, a fleet of 32, one or two load points): a few minutes at most',
  },
  out: { type: 'string', arg: 'DIR', help: 'report directory (default bench/results/leaderboard-<time>)' },
};

const SUMMARY =
  "kvrouter's default routing against the peers' default algorithms, scenario x load x seed, on the fleet simulator (docs/benchmarks.md).";

export const LEADERBOARD_SUMMARY_FILE = 'summary.json';

const list = (s: string) =>
  s
    .split(',')
    .map((x) => x.trim())
    .filter(Boolean);

/** The parsed command line: what to run and how. */
interface Plan {
  quick: boolean;
  scenarios: typeof SCENARIOS;
  policies: ReturnType<typeof variant>[];
  runnable: ReturnType<typeof variant>[];
  /** Policies the simulator cannot run, with the reason (listed as not run, never dropped). */
  skipped: Map<string, string>;
  seeds: number[];
  loads: number[] | null;
  slo: { ttftMs: number; tpotMs: number };
  drain: string;
  decisionLog: string | null;
}

function plan(v: ParsedOptions): Plan {
  const names = typeof v.scenarios === 'string' ? list(v.scenarios) : SCENARIOS.map((s) => s.name);
  const scenarios = names.map((n) => {
    const s = SCENARIOS.find((x) => x.name === n);
    if (!s) throw new Error(`unknown scenario '${n}' (one of ${SCENARIOS.map((x) => x.name).join(', ')})`);
    return s;
  });
  const policies = (typeof v.policies === 'string' ? splitPolicies(v.policies) : DEFAULT_POLICIES).map(variant);
  if (!policies.some((p) => p.name === SUBJECT))
    process.stderr.write(`note: ${SUBJECT} is not among the policies: no verdicts\n`);
  const seeds = list(String(v.seeds)).map((x) => {
    const n = Number(x);
    if (!Number.isInteger(n) || n < 0) throw new Error(`--seeds: '${x}' is not a non-negative integer`);
    return n;
  });
  if (seeds.length === 0) throw new Error('--seeds: at least one seed');
  const loads = typeof v.loads === 'string' ? list(v.loads).map(Number) : null;
  if (loads?.some((x) => !(x > 0))) throw new Error('--loads: positive numbers');
  const decisionLog = typeof v['decision-log'] === 'string' ? v['decision-log'] : null;
  const skipped = new Map(policies.filter((p) => notSimulated(p) !== null).map((p) => [p.name, notSimulated(p)!]));
  return {
    quick: v.quick === true,
    scenarios,
    policies,
    runnable: policies.filter((p) => !skipped.has(p.name)),
    skipped,
    seeds,
    loads,
    slo: { ttftMs: numberOption(v, 'slo-ttft-ms'), tpotMs: numberOption(v, 'slo-tpot-ms') },
    drain: String(intOption(v, 'drain-timeout')),
    decisionLog,
  };
}

type Scenario = (typeof SCENARIOS)[number];

/** One seed of one load point: a bench fleet simulation of every runnable policy, into `cells`; its workload and TTFT p90 floor. */
async function runSeed(
  p: Plan,
  sc: Scenario,
  load: number,
  args: string[],
  seed: number,
  cells: PolicyCell[],
  res: ScenarioResult,
): Promise<{ workload: string; floor: number }> {
  const tc = performance.now();
  const setup = await fleetSetup([
    ...args,
    '--seed',
    String(seed),
    '--policies',
    p.runnable.map((x) => x.name).join(','),
  ]);
  try {
    const w = setup.workload;
    const lines: string[] = [];
    const { summary, outputs } = await simulateSetup(
      setup,
      true,
      p.decisionLog
        ? (policy, i, d, now) => lines.push(decisionLine({ scenario: sc.name, load, seed, policy }, i, d, now))
        : undefined,
    );
    if (p.decisionLog && lines.length) appendFileSync(p.decisionLog, lines.join('\n') + '\n');
    const tenants = [...new Set(w.requests.map((r) => r.tenant).filter((t): t is string => t !== undefined))].sort();
    if (tenants.length > res.tenants.length) res.tenants = tenants;
    summary.results.forEach((r, k) => {
      const cell = cells.find((c) => c.policy === r.policy)!;
      cell.seeds.push(seedFigures(seed, r, outputs[k], summary.oracle.hitRate, (i) => w.requests[i]?.tenant));
    });
    const kv = summary.results.find((r) => r.policy === SUBJECT);
    process.stderr.write(
      `${sc.name} ${sc.ladder.flag}=${load} seed ${seed}: ${w.requests.length} requests x ${p.runnable.length} policies in ${((performance.now() - tc) / 1000).toFixed(1)} s` +
        (kv ? ` (kv TTFT p90 ${kv.ttftMs.p90.toFixed(0)} ms, ${kv.requests.ok}/${kv.requests.sent} ok)` : '') +
        '\n',
    );
    return {
      workload: `${w.description}; oracle hit rate ${(100 * summary.oracle.hitRate).toFixed(1)} %, ${summary.config.engines} engines x ${summary.config.numGpuBlocks} GPU blocks`,
      floor: await ttftFloorP90(setup),
    };
  } finally {
    await setup.workload.close();
  }
}

/** One scenario over its load ladder, every seed of every point. */
async function runScenario(p: Plan, sc: Scenario): Promise<ScenarioResult> {
  const res: ScenarioResult = {
    name: sc.name,
    title: sc.title,
    ladder: { flag: sc.ladder.flag, unit: sc.ladder.unit },
    notRun: sc.missing(),
    points: [],
    tenants: [],
  };
  if (res.notRun) {
    process.stderr.write(`${sc.name}: not run (${res.notRun})\n`);
    return res;
  }
  const base = p.quick ? sc.quick : sc.full;
  for (const load of p.loads ?? (p.quick ? sc.ladder.quick : sc.ladder.full)) {
    const args = [
      ...base,
      `--${sc.ladder.flag}`,
      String(load),
      '--slo-ttft-ms',
      String(p.slo.ttftMs),
      '--slo-tpot-ms',
      String(p.slo.tpotMs),
      '--drain-timeout',
      p.drain,
    ];
    const cells: PolicyCell[] = p.policies.map((x) => ({
      policy: x.name,
      notRun: p.skipped.get(x.name) ?? null,
      seeds: [],
    }));
    let described = '';
    const floors: number[] = [];
    for (const seed of p.seeds) {
      if (p.runnable.length === 0) break;
      const d = await runSeed(p, sc, load, args, seed, cells, res);
      described ||= d.workload;
      floors.push(d.floor);
    }
    const point: LoadPoint = { load, args, workload: described, ttftFloorP90: floors, cells };
    res.points.push(point);
  }
  return res;
}

export async function run(argv: string[]): Promise<number> {
  const parsed = parseCommand('bench leaderboard', SUMMARY, OPTIONS, argv);
  if ('code' in parsed) return parsed.code;
  const v = parsed.values;
  const t0 = performance.now();
  const p = plan(v);
  if (p.decisionLog) {
    mkdirSync(dirname(p.decisionLog), { recursive: true });
    writeFileSync(p.decisionLog, '');
  }
  for (const [name, why] of p.skipped) process.stderr.write(`policy ${name}: not run (${why})\n`);
  const results: ScenarioResult[] = [];
  const wall: Array<{ scenario: string; seconds: number }> = [];
  for (const sc of p.scenarios) {
    const ts = performance.now();
    results.push(await runScenario(p, sc));
    if (!results[results.length - 1].notRun) wall.push({ scenario: sc.name, seconds: (performance.now() - ts) / 1000 });
  }
  const summary: LeaderboardSummary = {
    bench: 'leaderboard',
    quick: p.quick,
    seeds: p.seeds,
    policies: p.policies.map((x) => x.name),
    subject: SUBJECT,
    slo: p.slo,
    scenarios: results,
  };
  const totalSeconds = (performance.now() - t0) / 1000;
  const dir = writeLeaderboard(argv, typeof v.out === 'string' ? v.out : undefined, p, summary, wall, totalSeconds);
  process.stderr.write(`leaderboard: ${totalSeconds.toFixed(0)} s, written to ${dir}\n`);
  return 0;
}

/** The report: JSON summary, verdict table, one section and chart per scenario. */
function writeLeaderboard(
  argv: string[],
  out: string | undefined,
  p: Plan,
  summary: LeaderboardSummary,
  wall: Array<{ scenario: string; seconds: number }>,
  totalSeconds: number,
): string {
  const dir = writeReport(
    'leaderboard',
    { ...summary, args: argv, wall: { scenarios: wall, totalSeconds } },
    [verdictTable(summary)],
    out,
  );
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, LEADERBOARD_SUMMARY_FILE), JSON.stringify(summary, null, 2) + '\n');
  const sections = summary.scenarios.map((sc) => scenarioSection(sc, summary, writeLadderCharts(dir, sc)));
  const md = [
    '# Leaderboard',
    '',
    `\`kvrouter bench leaderboard ${argv.join(' ')}\` — ${new Date().toISOString()}, ${totalSeconds.toFixed(0)} s on ${JSON.stringify(machine())}`,
    '',
    `Policies: ${p.policies.map((x) => (p.skipped.has(x.name) ? `${x.name} (not run: ${p.skipped.get(x.name)})` : x.name)).join(', ')}. Seeds: ${p.seeds.join(', ')}. SLO: TTFT <= ${p.slo.ttftMs} ms, TPOT <= ${p.slo.tpotMs} ms.`,
    '',
    ...LEADERBOARD_NOTES,
    '',
    renderTable(verdictTable(summary)),
    ...sections,
  ].join('\n');
  writeFileSync(join(dir, 'leaderboard.md'), md);
  return dir;
}
