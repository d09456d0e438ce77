// `kvrouter bench cluster`: every routing policy on identical, seeded input against a fleet of
// simulated engines (fresh engines and router per policy), with TTFT, throughput, hit rate against
// the oracle, load imbalance and router CPU; Markdown, JSON and SVG charts under bench/results/.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { dirname, join } from 'node:path';
import { intOption, numberOption, type OptionTable, type ParsedOptions, parseCommand } from '../common/args.js';
import { DEFAULT_POLICIES, type PolicyVariant, variant, VARIANTS } from './cluster/policies.js';
import { type ClusterReport, writeClusterReport } from './cluster/render.js';
import { runPolicy } from './cluster/run-policy.js';
import { type Sizing, sizeFleet } from './cluster/sizing.js';
import type { PolicyResult } from './cluster/summary.js';
import { kvCapacityBlocks } from '../engine-sim/core/perf-profile.js';
import { loadPerfModel } from '../engine-sim/perf-models.js';
import { BENCH_PERF_MODEL, benchModelName, type FleetOptions } from './procs/engines.js';
import { Progress } from './progress.js';
import { machine } from './report.js';
import { oracle, type OracleStats } from './workloads/oracle.js';
import { buildWorkload, DEFAULT_TRACE, WORKLOADS, type WorkloadName } from './workloads/select.js';
import type { Workload } from './workloads/types.js';

// Knobs of the synthetic workloads (defaults: full / --quick).
const KNOB_HELP: Record<string, string> = {
  groups: 'shared-prefix: groups, one system prompt each (48 / 12)',
  'prompts-per-group': 'shared-prefix: questions per group (16 / 8)',
  'system-len':
    'shared-prefix: system prompt tokens (6000 / 3000); multi-turn: system prompt words (1000 / 500); agentic: shared tool spec + system tokens (4000 / 2000)',
  'question-len': 'shared-prefix: question tokens (600 / 300); multi-turn: words per question (100 / 60)',
  'output-len': 'shared-prefix: output tokens (128 / 32)',
  rate: 'shared-prefix: requests/s (8); multi-turn: new sessions/s (1 / 2); agentic: new sessions/s (2), before --rate-scale',
  users: 'multi-turn: sessions (64 / 16); agentic: sessions (64 / 12)',
  turns: 'multi-turn: turns per session (6 / 4); agentic: (12 / 6)',
  'context-len':
    'multi-turn: words of per-user context in the first message (2000 / 1000); agentic: task tokens (1000 / 500)',
  'reply-len':
    'multi-turn: assistant reply words = max_tokens (150 / 40); agentic: reply tokens = max_tokens (100 / 32)',
  'tool-len': 'agentic: tool-result tokens appended after each reply (400 / 200)',
  'think-ms':
    'multi-turn: pause between a reply and the next turn, ms (2000 / 1000); agentic: mean tool-call gap (1500 / 1000)',
};
const KNOBS = Object.keys(KNOB_HELP);

/** Options every replay benchmark over the simulated fleet takes (cluster, sweep). */
export const FLEET_OPTIONS: OptionTable = {
  workload: {
    type: 'string',
    arg: 'NAME',
    help: `${WORKLOADS.join(' | ')} (default mooncake; --trace implies mooncake)`,
  },
  trace: {
    type: 'string',
    arg: 'FILE',
    help: `Mooncake-format trace (default ${DEFAULT_TRACE}, relative to the repo root)`,
  },
  engines: { type: 'string', default: '4', arg: 'N', help: 'simulated engines' },
  requests: { type: 'string', arg: 'N', help: 'cap on requests (default: mooncake 1000, quick 120; synthetic: all)' },
  sample: {
    type: 'string',
    arg: 'X',
    help: 'mooncake: keep this fraction of conversations, whole (default 1; quick 0.08)',
  },
  'rate-scale': {
    type: 'string',
    arg: 'X',
    help: 'divide arrival times by X (default: mooncake 3, synthetic 1; quick: arrivals squeezed into 6 s)',
  },
  speedup: {
    type: 'string',
    arg: 'X',
    help: 'engine speedup: divide simulated compute time by X (default 1; quick 4)',
  },
  'perf-model': {
    type: 'string',
    default: BENCH_PERF_MODEL,
    arg: 'M',
    help: 'engine pass times (engine-sim --perf-model): mocker, h200-qwen3-0.6b|8b|32b or a calibration FILE; the served model name follows it',
  },
  'block-size': { type: 'string', default: '64', arg: 'N', help: 'KV block size of engines and router' },
  'cache-ratio': {
    type: 'string',
    default: '0.2',
    arg: 'X',
    help: 'cluster GPU KV cache / working set (one engine holds ratio/engines of it)',
  },
  'cpu-ratio': { type: 'string', default: '2', arg: 'X', help: 'host-tier blocks per GPU block (0 = no host tier)' },
  'max-model-len': {
    type: 'string',
    default: '32768',
    arg: 'N',
    help: 'longest prompt + output; longer trace requests are skipped',
  },
  'max-output-tokens': {
    type: 'string',
    arg: 'N',
    help: "cap on output tokens (default: the workload's; quick mooncake 32)",
  },
  seed: { type: 'string', default: '0', arg: 'N', help: 'seed of tokens, arrivals and engines' },
  'drain-timeout': {
    type: 'string',
    default: '300',
    arg: 'S',
    help: 'abort requests still running this long after the last open-loop arrival',
  },
  bypass: {
    type: 'string',
    default: '0',
    arg: 'X',
    help: 'share of the requests sent straight to engine e0, bypassing the router: load the router did not book',
  },
  routers: {
    type: 'string',
    default: '1',
    arg: 'N',
    help: 'independent routers (no sync) sharing the engines, requests alternating between them: predictions diverge from the truth',
  },
  'router-processes': {
    type: 'string',
    default: '1',
    arg: 'N',
    help: 'processes of each router (kvrouter serve --workers N)',
  },
  pd: {
    type: 'string',
    default: '2P2D',
    arg: 'NPMD',
    help: 'engines of the disaggregated variants (pd, pd-no-bypass): N prefill + M decode, same sizing as one aggregated engine each',
  },
  ...Object.fromEntries(KNOBS.map((k) => [k, { type: 'string' as const, arg: 'N', help: KNOB_HELP[k] }])),
  quick: { type: 'boolean', help: 'small run: whole benchmark within about 2 minutes (per policy and point)' },
};

const OPTIONS: OptionTable = {
  policies: {
    type: 'string',
    arg: 'A,B',
    help: `policies to compare, in order (default ${DEFAULT_POLICIES.join(',')}; also: ${VARIANTS.map((v) => v.name)
      .filter((n) => !DEFAULT_POLICIES.includes(n))
      .join(',')}); routing keys inline: kv[prefix_affinity=0.25]`,
  },
  ...FLEET_OPTIONS,
  out: { type: 'string', arg: 'DIR', help: 'report directory (default bench/results/cluster-<time>)' },
  render: {
    type: 'string',
    arg: 'FILE',
    help: 'only re-render the tables and charts of an earlier JSON report (to --out)',
  },
  json: { type: 'string', arg: 'FILE', help: 'also write the JSON report here' },
};

const SUMMARY = 'Routing policies on a replayed workload against simulated engines (see docs/benchmarks.md).';
const QUICK_ARRIVALS_MS = 6000;

function opt(v: ParsedOptions, name: string, fallback: number, int = false): number {
  if (v[name] === undefined) return fallback;
  return int ? intOption(v, name) : numberOption(v, name);
}

/** Everything a run fixes before the first policy starts: workload, oracle, fleet, schedule. */
export interface ClusterSetup {
  argv: string[];
  workload: Workload;
  orc: OracleStats;
  size: Sizing;
  fleet: FleetOptions;
  config: ClusterReport['config'];
  /** Arrival span of the open-loop requests before --rate-scale (ms). */
  spanMs: number;
  followUps: number;
  drainS: number;
  routers: number;
  /** Processes per router (serve --workers). */
  routerProcesses: number;
  bypass: number;
  pd: { prefill: number; decode: number };
}

/** --routers, --router-processes, --bypass and --pd, checked. */
function routerTopology(v: ParsedOptions) {
  const routers = intOption(v, 'routers');
  if (routers < 1) throw new Error('--routers must be at least 1');
  const routerProcesses = intOption(v, 'router-processes');
  if (routerProcesses < 1 || routerProcesses > 64) throw new Error('--router-processes must be 1..64');
  const bypass = numberOption(v, 'bypass');
  if (!(bypass >= 0 && bypass < 1)) throw new Error('--bypass must be in [0, 1)');
  const pdm = /^(\d+)P(\d+)D$/i.exec(String(v.pd ?? '2P2D'));
  if (!pdm || Number(pdm[1]) < 1 || Number(pdm[2]) < 1)
    throw new Error('--pd must be like 2P2D (at least one prefill and one decode engine)');
  return { routers, routerProcesses, bypass, pd: { prefill: Number(pdm[1]), decode: Number(pdm[2]) } };
}

/** What buildWorkload needs, from the workload options (--workload, --trace, --requests, the knobs...). */
function workloadOptions(v: ParsedOptions): Parameters<typeof buildWorkload>[0] & { workload: WorkloadName } {
  const quick = v.quick === true;
  const trace = typeof v.trace === 'string' ? v.trace : null;
  const wname = (typeof v.workload === 'string' ? v.workload : 'mooncake') as WorkloadName;
  if (!WORKLOADS.includes(wname)) throw new Error(`--workload must be one of ${WORKLOADS.join(', ')}`);
  if (trace && wname !== 'mooncake') throw new Error('--trace only goes with --workload mooncake');
  const knobs: Record<string, number | undefined> = {};
  for (const k of KNOBS) if (v[k] !== undefined) knobs[k] = numberOption(v, k);
  return {
    workload: wname,
    trace,
    requests: v.requests !== undefined ? intOption(v, 'requests') : null,
    seed: intOption(v, 'seed'),
    quick,
    maxModelLen: intOption(v, 'max-model-len'),
    maxOutputTokens:
      v['max-output-tokens'] !== undefined
        ? intOption(v, 'max-output-tokens')
        : quick && wname === 'mooncake'
          ? 32
          : null,
    sample: v.sample !== undefined ? numberOption(v, 'sample') : null,
    knobs,
  };
}

/** Parse the shared options, build the workload and size the fleet (the caller closes the workload). */
export async function prepareCluster(v: ParsedOptions, argv: string[]): Promise<ClusterSetup> {
  const quick = v.quick === true;
  const wo = workloadOptions(v);
  const wname = wo.workload;
  const maxOut = wo.maxOutputTokens;
  const engines = intOption(v, 'engines');
  const blockSize = intOption(v, 'block-size');
  const seed = intOption(v, 'seed');
  const speedup = opt(v, 'speedup', quick ? 4 : 1);
  const perfModel = String(v['perf-model']);
  const perf = loadPerfModel(perfModel); // a bad value fails here, before the workload is built
  const model = benchModelName(perfModel);
  const cacheRatio = numberOption(v, 'cache-ratio');
  const cpuRatio = numberOption(v, 'cpu-ratio');
  const { routers, routerProcesses, bypass, pd } = routerTopology(v);
  const workload = await buildWorkload(wo);
  try {
    const spanMs = Math.max(...workload.requests.map((r) => r.atMs));
    const rateScale = opt(
      v,
      'rate-scale',
      quick ? Math.max(1, spanMs / QUICK_ARRIVALS_MS) : wname === 'mooncake' ? 3 : 1,
    );
    process.stderr.write(`workload: ${workload.description}\n`);
    const orc = await oracle(workload, blockSize);
    const size = sizeFleet(orc, engines, blockSize, cacheRatio, cpuRatio);
    // The cache is sized from the working set, not from the GPU: a full H200 would hold most traces whole.
    const gpuBlocks =
      perf.profile && perf.deviceMemoryGb ? kvCapacityBlocks(perf.profile, perf.deviceMemoryGb, 0.9, blockSize) : null;
    process.stderr.write(
      `oracle hit rate ${(100 * orc.hitRate).toFixed(1)}%, working set ${orc.distinctBlocks} blocks of ${blockSize}; ` +
        `engines: ${engines} x ${size.numGpuBlocks} GPU + ${size.numCpuBlocks} host blocks (working set = ${size.perEngineRatio.toFixed(2)}x one engine's GPU cache` +
        `${gpuBlocks ? `; the whole GPU would hold ${gpuBlocks}` : ''}), pass times ${perfModel}\n`,
    );
    const fleet: FleetOptions = {
      count: engines,
      blockSize,
      numGpuBlocks: size.numGpuBlocks,
      numCpuBlocks: size.numCpuBlocks,
      maxModelLen: size.maxModelLen,
      speedup,
      perfModel,
      seed,
      tokenizer: workload.engineTokenizer,
      model,
    };
    return {
      argv,
      workload,
      orc,
      size,
      fleet,
      config: {
        engines,
        blockSize,
        speedup,
        perfModel,
        rateScale,
        cacheRatio,
        cpuRatio,
        seed,
        quick,
        maxOutputTokens: maxOut,
        model,
        routers,
        routerProcesses,
        bypass,
        pd: `${pd.prefill}P${pd.decode}D`,
      },
      spanMs,
      followUps: workload.requests.filter((r) => r.after).length,
      drainS: intOption(v, 'drain-timeout'),
      routers,
      routerProcesses,
      bypass,
      pd,
    };
  } catch (err) {
    await workload.close();
    throw err;
  }
}

/** Every variant, in order, on fresh engines and routers, at one arrival scale; the report's data. */
export async function runVariants(
  setup: ClusterSetup,
  policies: readonly PolicyVariant[],
  rateScale: number,
  progress: Progress,
): Promise<{ data: ClusterReport; perRequest: string[] }> {
  const t0 = Date.now();
  const load0 = loadavg();
  const { workload, orc, followUps } = setup;
  const scheduleS = setup.spanMs / rateScale / 1000;
  const drainTimeoutMs =
    setup.drainS * 1000 + (followUps ? (followUps * 60_000) / Math.max(1, workload.requests.length - followUps) : 0);
  const results: PolicyResult[] = [];
  const perRequest: string[] = [];
  for (const p of policies) {
    progress.setLabel(p.name);
    progress.log(
      `policy ${p.name}: starting engines and ${setup.routers > 1 ? `${setup.routers} routers` : 'router'} (arrivals over ${scheduleS.toFixed(0)} s)`,
    );
    const { result: r, samples } = await runPolicy(p, {
      fleet: setup.fleet,
      workload,
      rateScale,
      drainTimeoutMs,
      routers: setup.routers,
      routerProcesses: setup.routerProcesses,
      bypass: setup.bypass,
      pd: setup.pd,
      onDone: () => progress.tick(),
    });
    results.push(r);
    for (const s of samples) perRequest.push(JSON.stringify({ policy: p.name, rateScale, ...s }));
    progress.log(
      `policy ${p.name}: TTFT p50 ${r.ttftMs.p50.toFixed(0)} ms p90 ${r.ttftMs.p90.toFixed(0)} ms p99 ${r.ttftMs.p99.toFixed(0)} ms, hit ${(100 * r.hitRate.usage).toFixed(1)}% ` +
        `(oracle ${(100 * orc.hitRate).toFixed(1)}%), req CoV ${r.imbalance.requestCov.toFixed(3)}, ${r.requests.ok}/${r.requests.sent} ok${r.requests.errors ? `, errors: ${r.requests.firstErrors.join('; ')}` : ''}`,
    );
  }
  const data: ClusterReport = {
    bench: 'cluster',
    args: setup.argv,
    machine: machine(),
    date: new Date().toISOString(),
    workload: { name: workload.name, description: workload.description, requests: workload.requests.length },
    oracle: orc,
    sizing: setup.size,
    config: { ...setup.config, rateScale },
    arrivals: { scheduleS, followUps },
    loadAverage: { before: load0, after: loadavg() },
    runSeconds: (Date.now() - t0) / 1000,
    policies: results.map((r) => r.policy),
    results,
  };
  return { data, perRequest };
}

export async function run(argv: string[]): Promise<number> {
  const parsed = parseCommand('bench cluster', SUMMARY, OPTIONS, argv);
  if ('code' in parsed) return parsed.code;
  const v = parsed.values;
  if (typeof v.render === 'string') {
    writeClusterReport(
      JSON.parse(readFileSync(v.render, 'utf8')) as ClusterReport,
      typeof v.out === 'string' ? v.out : undefined,
    );
    return 0;
  }
  const policies = (typeof v.policies === 'string' ? splitPolicies(v.policies) : DEFAULT_POLICIES).map(variant);
  const setup = await prepareCluster(v, argv);
  try {
    const progress = new Progress(setup.workload.requests.length * policies.length, '');
    const { data, perRequest } = await runVariants(setup, policies, setup.config.rateScale, progress);
    progress.finish();
    const dir = writeClusterReport(data, typeof v.out === 'string' ? v.out : undefined);
    writeFileSync(join(dir, 'samples.jsonl'), perRequest.join('\n') + '\n');
    if (typeof v.json === 'string') {
      mkdirSync(dirname(v.json), { recursive: true });
      writeFileSync(v.json, JSON.stringify(data, null, 2));
    }
    return data.results.every((r) => r.requests.ok > 0) ? 0 : 1;
  } finally {
    await setup.workload.close();
  }
}

/** Split a --policies list on commas outside inline option brackets: `kv[a=1,b=2],session`. */
export function splitPolicies(list: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let cur = '';
  for (const ch of list) {
    if (ch === '[') depth++;
    if (ch === ']') depth = Math.max(0, depth - 1);
    if (ch === ',' && depth === 0) {
      if (cur.trim()) out.push(cur.trim());
      cur = '';
    } else cur += ch;
  }
  if (cur.trim()) out.push(cur.trim());
  return out;
}
