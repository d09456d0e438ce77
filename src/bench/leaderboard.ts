// `kvrouter bench leaderboard`: kvrouter's default policy against the peers' default algorithms and a
// round-robin floor, on every scenario (src/bench/leaderboard/scenarios.ts) over its load ladder and
// several seeds. Each cell is one `bench fleet` simulation (fleetSetup + simulateSetup: the same
// code path, summary and figures); this file only loops, reduces over seeds and writes the report.
import { appendFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { intOption, numberOption, type OptionTable, parseCommand } from '../common/args.js';
import { PEER_POLICIES, variant } from './cluster/policies.js';
import { splitPolicies } from './cluster.js';
import { fleetSetup, notSimulated, simulateSetup } from './fleet.js';
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

export async function run(argv: string[]): Promise<number> {
  const parsed = parseCommand('bench leaderboard', SUMMARY, OPTIONS, argv);
  if ('code' in parsed) return parsed.code;
  const v = parsed.values;
  const t0 = performance.now();
  const quick = v.quick === true;
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
  const slo = { ttftMs: numberOption(v, 'slo-ttft-ms'), tpotMs: numberOption(v, 'slo-tpot-ms') };
  const drain = String(intOption(v, 'drain-timeout'));
  const decisionLog = typeof v['decision-log'] === 'string' ? v['decision-log'] : null;
  if (decisionLog) {
    mkdirSync(dirname(decisionLog), { recursive: true });
    writeFileSync(decisionLog, '');
  }
  const runnable = policies.filter((p) => notSimulated(p) === null);
  const skipped = new Map(policies.filter((p) => notSimulated(p) !== null).map((p) => [p.name, notSimulated(p)!]));
  for (const [name, why] of skipped) process.stderr.write(`policy ${name}: not run (${why})\n`);

  const results: ScenarioResult[] = [];
  const wall: Array<{ scenario: string; seconds: number }> = [];
  for (const sc of scenarios) {
    const ts = performance.now();
    const ladder = loads ?? (quick ? sc.ladder.quick : sc.ladder.full);
    const base = quick ? sc.quick : sc.full;
    const res: ScenarioResult = {
      name: sc.name,
      title: sc.title,
      ladder: { flag: sc.ladder.flag, unit: sc.ladder.unit },
      notRun: sc.missing(),
      points: [],
      tenants: [],
    };
    results.push(res);
    if (res.notRun) {
      process.stderr.write(`${sc.name}: not run (${res.notRun})\n`);
      continue;
    }
    for (const load of ladder) {
      const args = [
        ...base,
        `--${sc.ladder.flag}`,
        String(load),
        '--slo-ttft-ms',
        String(slo.ttftMs),
        '--slo-tpot-ms',
        String(slo.tpotMs),
        '--drain-timeout',
        drain,
      ];
      const cells: PolicyCell[] = policies.map((p) => ({
        policy: p.name,
        notRun: skipped.get(p.name) ?? null,
        seeds: [],
      }));
      let described = '';
      for (const seed of seeds) {
        const tc = performance.now();
        if (runnable.length === 0) break;
        const setup = await fleetSetup([
          ...args,
          '--seed',
          String(seed),
          '--policies',
          runnable.map((p) => p.name).join(','),
        ]);
        try {
          const w = setup.workload;
          const lines: string[] = [];
          const { summary, outputs } = await simulateSetup(
            setup,
            true,
            decisionLog
              ? (policy, i, d, now) => lines.push(decisionLine({ scenario: sc.name, load, seed, policy }, i, d, now))
              : undefined,
          );
          if (decisionLog && lines.length) appendFileSync(decisionLog, lines.join('\n') + '\n');
          if (!described)
            described = `${w.description}; oracle hit rate ${(100 * summary.oracle.hitRate).toFixed(1)} %, ${summary.config.engines} engines x ${summary.config.numGpuBlocks} GPU blocks`;
          const tenants = [
            ...new Set(w.requests.map((r) => r.tenant).filter((t): t is string => t !== undefined)),
          ].sort();
          if (tenants.length > res.tenants.length) res.tenants = tenants;
          summary.results.forEach((r, k) => {
            const cell = cells.find((c) => c.policy === r.policy)!;
            cell.seeds.push(seedFigures(seed, r, outputs[k], summary.oracle.hitRate, (i) => w.requests[i]?.tenant));
          });
          const kv = summary.results.find((r) => r.policy === SUBJECT);
          process.stderr.write(
            `${sc.name} ${sc.ladder.flag}=${load} seed ${seed}: ${w.requests.length} requests x ${runnable.length} policies in ${((performance.now() - tc) / 1000).toFixed(1)} s` +
              (kv ? ` (kv TTFT p90 ${kv.ttftMs.p90.toFixed(0)} ms, ${kv.requests.ok}/${kv.requests.sent} ok)` : '') +
              '\n',
          );
        } finally {
          await setup.workload.close();
        }
      }
      const point: LoadPoint = { load, args, workload: described, cells };
      res.points.push(point);
    }
    wall.push({ scenario: sc.name, seconds: (performance.now() - ts) / 1000 });
  }

  const summary: LeaderboardSummary = {
    bench: 'leaderboard',
    quick,
    seeds,
    policies: policies.map((p) => p.name),
    subject: SUBJECT,
    slo,
    scenarios: results,
  };
  const totalSeconds = (performance.now() - t0) / 1000;
  const dir = writeReport(
    'leaderboard',
    { ...summary, args: argv, wall: { scenarios: wall, totalSeconds } },
    [verdictTable(summary)],
    typeof v.out === 'string' ? v.out : undefined,
  );
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, LEADERBOARD_SUMMARY_FILE), JSON.stringify(summary, null, 2) + '\n');
  const sections = results.map((sc) => scenarioSection(sc, summary, writeLadderCharts(dir, sc)));
  const md = [
    '# Leaderboard',
    '',
    `\`kvrouter bench leaderboard ${argv.join(' ')}\` — ${new Date().toISOString()}, ${totalSeconds.toFixed(0)} s on ${JSON.stringify(machine())}`,
    '',
    `Policies: ${policies.map((p) => (skipped.has(p.name) ? `${p.name} (not run: ${skipped.get(p.name)})` : p.name)).join(', ')}. Seeds: ${seeds.join(', ')}. SLO: TTFT <= ${slo.ttftMs} ms, TPOT <= ${slo.tpotMs} ms.`,
    '',
    ...LEADERBOARD_NOTES,
    '',
    renderTable(verdictTable(summary)),
    ...sections,
  ].join('\n');
  writeFileSync(join(dir, 'leaderboard.md'), md);
  process.stderr.write(`leaderboard: ${totalSeconds.toFixed(0)} s, written to ${dir}\n`);
  return 0;
}
