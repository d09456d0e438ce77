// The parts of a running router and the state a reload swaps. Request handlers read `deps` and
// `models` per request; reload replaces their fields without touching in-flight requests.
import { roleOf } from './models.js';
import type { Tracing } from '../tracing/tracing.js';
import { KVROUTER_VERSION } from '../tracing/request-trace.js';
import type { ServerResponse } from 'node:http';
import { Registry as PromRegistry, collectDefaultMetrics } from 'prom-client';
import { Access } from '../auth/access.js';
import { isLoopbackHost } from '../auth/allowlist.js';
import type { ClusterHandle } from '../cluster/attach.js';
import { PeerList } from '../cluster/peers.js';
import { mulberry32 } from '../common/prng.js';
import type { RouterConfig } from '../config/schema.js';
import type { EngineHandle } from '../engine-sim/index.js';
import { ingestLimitsFromConfig, listenerOptionsFromConfig } from '../events/config.js';
import { ListenerPool } from '../events/listener-pool.js';
import { Registry } from '../events/registry.js';
import { type IndexMetrics, registerIndexMetrics } from '../indexer/metrics.js';
import { TieredIndexer } from '../indexer/namespaces.js';
import { KvIndexWriter } from '../indexer/writer.js';
import { CapacityQueue } from '../proxy/capacity.js';
import { cutResponse } from '../proxy/forward.js';
import { Scheduler } from '../scheduler/scheduler.js';
import { FeedbackLoop, type FeedbackOptions } from '../feedback/loop.js';
import { AdapterDirectory } from '../lora/directory.js';
import { EngineLoadView } from '../engine-load/load-view.js';
import type { CompletionDeps } from './completions.js';
import { combineObservers, DecisionLog } from './decision-log.js';
import { type EngineRef, fillEngineInstances, startEmbeddedEngines } from './engines.js';
import { createRouterMetrics, type RouterMetrics } from './metrics.js';
import { type HealthListener, type ModelRuntime, reconcileModels } from './models.js';
import { modelSeeds, reconcileRegistrations } from './registrations.js';

export interface RouterRuntime {
  readonly log: (line: string) => void;
  readonly now: () => number;
  /** Simulated engines this process started (and closes). */
  readonly engines: EngineHandle[];
  /** Simulated engines models without instances are served by: this process's, or the primary's under `--workers`. */
  readonly engineRefs: readonly EngineRef[];
  readonly indexer: TieredIndexer;
  /** The one write path into `indexer`. */
  readonly writer: KvIndexWriter;
  readonly registry: Registry;
  readonly listeners: ListenerPool;
  readonly scheduler: Scheduler;
  readonly queue: CapacityQueue;
  readonly prom: PromRegistry;
  readonly metrics: RouterMetrics;
  readonly indexMetrics: IndexMetrics;
  readonly decisions: DecisionLog;
  /** Closed-loop check of cache predictions against the engines' usage reports. */
  readonly feedback: FeedbackLoop;
  /** LoRA adapters: which instances serve which (config and discovery). */
  readonly adapters: AdapterDirectory;
  /** The engines' own load, scraped from their metrics (engine_metrics.scrape). */
  readonly engineLoads: EngineLoadView;
  readonly peers: PeerList;
  /** Per-request view: config, models, access (reload swaps these fields). */
  readonly deps: CompletionDeps & { indexer: TieredIndexer; feedback: FeedbackLoop };
  /** Every model, in config order (reload swaps it). */
  all: ModelRuntime[];
  /** Registrations the config owns (reload reconciles them; /register ones are left alone). */
  readonly ownedRegs: Set<string>;
  /** In relay mode the index arrives through JetStream: this replica opens no ZMQ socket. */
  readonly relayed: boolean;
  cluster: ClusterHandle | null;
  shuttingDown: boolean;
  /** Completions in flight (drained on shutdown). */
  readonly inflight: Set<ServerResponse>;
  /** Hears every instance's health changes (passed to every upstream pool). */
  readonly onHealth: HealthListener;
  /** Instance id -> model name (metrics labels). */
  readonly modelOfInstance: Map<string, string>;
}

export function checkAuth(cfg: RouterConfig, access: Access): void {
  if (!access.enabled && !isLoopbackHost(cfg.server.host) && !cfg.auth.allow_unauthenticated) {
    throw new Error(
      `refusing to serve on ${cfg.server.host} without authentication: configure auth.admin_token / auth.tenants, or set auth.allow_unauthenticated: true`,
    );
  }
}

export function feedbackOptions(cfg: RouterConfig): FeedbackOptions {
  const v = cfg.verification;
  return { enabled: v.enabled, window: v.window, alarmRatio: v.alarm_ratio, action: v.action };
}

/** Enrol every configured instance in its model's namespace and label it for metrics. */
export function indexInstances(rt: RouterRuntime): void {
  rt.modelOfInstance.clear();
  for (const m of rt.all) {
    for (const i of m.instances) {
      rt.modelOfInstance.set(i.id, m.name);
      rt.writer.enroll({ model: m.name, blockSize: m.cfg.block_size }, i.id);
    }
    for (const c of m.cfg.instances)
      rt.adapters.setConfigured(c.id, m.name, [...m.cfg.lora_adapters, ...c.lora_adapters]);
  }
}

/** Ready: not draining, the cluster has recovered, every model has its minimum of healthy instances. */
export function isReady(rt: RouterRuntime): boolean {
  return (
    !rt.shuttingDown &&
    (rt.cluster?.isReady() ?? true) &&
    rt.all.every(
      (m) => m.instances.filter((i) => i.health.available(rt.now())).length >= Math.max(1, m.cfg.min_initial_instances),
    )
  );
}

/** `sharedEngines`: engines another process runs (the `--workers` primary): none are started here. */
export async function createRuntime(
  cfg0: RouterConfig,
  log: (line: string) => void,
  now: () => number,
  sharedEngines?: readonly EngineRef[],
): Promise<RouterRuntime> {
  const access = createAccess(cfg0, log, now);
  const engines = sharedEngines ? [] : await startEmbeddedEngines(cfg0, log);
  const engineRefs = sharedEngines ?? engines;
  fillEngineInstances(cfg0, engineRefs);

  const prom = new PromRegistry();
  collectDefaultMetrics({ register: prom });
  const { indexer, writer, registry, listeners } = createIndexParts(cfg0, prom, now);
  const scheduler = new Scheduler(
    indexer,
    cfg0.routing.seed !== undefined ? mulberry32(cfg0.routing.seed) : Math.random,
  );
  const queue = new CapacityQueue(cfg0.routing.busy.queue_size);
  // Health changes reach the metrics and wake the capacity queue (an instance came back).
  const onHealth: HealthListener = (id, ev) => {
    rt.metrics.healthChanged?.(id, ev);
    if (ev === 'readmitted') rt.queue.notify();
  };
  const modelSet = await reconcileModels(cfg0, null, onHealth, now);
  const ownedRegs = new Set<string>();
  const relayed = cfg0.cluster.events.source === 'jetstream';
  if (!relayed) await reconcileRegistrations(cfg0, ownedRegs, registry, listeners, now());
  const modelOfInstance = new Map<string, string>();
  const { feedback, metrics, decisions } = createMonitoring(cfg0, prom, {
    writer,
    scheduler,
    queue,
    log,
    now,
    models: () => rt.all,
    label: (i) => modelOfInstance.get(i) ?? 'unknown',
  });
  const adapters = new AdapterDirectory();
  const engineLoads = new EngineLoadView();
  const rt: RouterRuntime = {
    log,
    now,
    engines,
    engineRefs,
    indexer,
    writer,
    registry,
    listeners,
    scheduler,
    queue,
    prom,
    metrics,
    indexMetrics: registerIndexMetrics(prom, indexer),
    decisions,
    feedback,
    adapters,
    engineLoads,
    peers: new PeerList(cfg0.cluster.peers),
    deps: {
      cfg: cfg0,
      models: modelSet.byName,
      adapters,
      engineLoads,
      metrics,
      scheduler,
      queue,
      now,
      access,
      indexer,
      feedback,
      tracing: await startTracing(cfg0),
      observer: combineObservers(metrics, decisions, { reported: (d, u) => feedback.reported(d, u) }),
    },
    all: modelSet.all,
    ownedRegs,
    relayed,
    cluster: null,
    shuttingDown: false,
    inflight: new Set(),
    modelOfInstance,
    onHealth,
  };
  indexInstances(rt);
  return rt;
}

/** The feedback loop, the Prometheus metrics and the decision log, which all label by instance. */
function createMonitoring(
  cfg: RouterConfig,
  prom: PromRegistry,
  parts: {
    writer: KvIndexWriter;
    scheduler: Scheduler;
    queue: CapacityQueue;
    log: (line: string) => void;
    now: () => number;
    /** Read at scrape time, so the gauges follow reloads. */
    models: () => readonly ModelRuntime[];
    label: (instance: string) => string;
  },
) {
  const { writer, scheduler, queue, log, now, models, label } = parts;
  // The metrics sink is bound late: the loop is created first so the metrics can read its alarms.
  let judged: RouterMetrics['hitJudged'] = () => undefined;
  const feedback = new FeedbackLoop(feedbackOptions(cfg), {
    writer,
    distrusted: scheduler.distrusted,
    log,
    now,
    judged: (...a) => judged(...a),
  });
  const metrics = createRouterMetrics(
    prom,
    {
      scheduler,
      instances: () => instanceGauges(models(), now()),
      queueDepth: () => queue.depth,
      tokenizerStats: () => tokenizerTotals(models()),
      alarms: () => feedback.verifier.alarms(),
    },
    label,
  );
  judged = metrics.hitJudged;
  return { feedback, metrics, decisions: new DecisionLog(500, label, now) };
}

function createAccess(cfg: RouterConfig, log: (line: string) => void, now: () => number): Access {
  const access = new Access({ admin_token: cfg.auth.admin_token, tenants: cfg.auth.tenants }, now);
  checkAuth(cfg, access);
  if (!access.enabled)
    log(
      `auth disabled: no admin token and no tenants, serving without credentials${isLoopbackHost(cfg.server.host) ? ' (loopback only)' : ' (allow_unauthenticated is set)'}`,
    );
  return access;
}

/** The index, its one writer, the registrations and the KV event listeners that feed the writer. */
function createIndexParts(cfg: RouterConfig, prom: PromRegistry, now: () => number) {
  const indexer = new TieredIndexer({
    defaultSeed: BigInt(cfg.hashing.seed),
    modelSeeds: modelSeeds(cfg),
    kvCacheGroups: cfg.kv_events.kv_cache_groups,
  });
  const writer = new KvIndexWriter(indexer);
  const registry = new Registry();
  const listeners = new ListenerPool({
    registry,
    writer,
    metrics: prom,
    now,
    options: listenerOptionsFromConfig(cfg.kv_events),
    ingestLimits: ingestLimitsFromConfig(cfg.kv_events),
  });
  return { indexer, writer, registry, listeners };
}

/** Every instance of every model as the health/role gauges label it (read at scrape time). */
function instanceGauges(all: readonly ModelRuntime[], now: number) {
  return all.flatMap((m) =>
    m.instances.map((i) => ({
      id: i.id,
      model: m.name,
      healthy: i.health.available(now),
      dpSize: i.dpSize,
      role: roleOf(m, i.id),
    })),
  );
}

/** Segment cache counters summed over the distinct tokenizers (models may share one). */
function tokenizerTotals(all: readonly ModelRuntime[]) {
  let hits = 0;
  let misses = 0;
  let encodedChars = 0;
  for (const t of new Set(all.map((m) => m.tokenizer))) {
    const s = t.stats();
    hits += s.segmentCacheHits;
    misses += s.segmentCacheMisses;
    encodedChars += s.encodedChars;
  }
  return { hits, misses, encodedChars };
}

/** The tracer, when `tracing.enabled` (fixed for the process: a reload keeps it); the SDK is loaded only then. */
async function startTracing(cfg: RouterConfig): Promise<Tracing | null> {
  const t = cfg.tracing;
  if (!t.enabled) return null;
  const headers: Record<string, string> = {};
  for (const h of t.headers) {
    const i = h.indexOf(':');
    headers[h.slice(0, i).trim().toLowerCase()] = h.slice(i + 1).trim();
  }
  const { Tracing } = await import('../tracing/tracing.js');
  return Tracing.start(
    {
      endpoint: t.endpoint,
      sampleRatio: t.sample_ratio,
      serviceName: t.service_name,
      headers,
      batchDelayMs: t.batch_delay_ms,
    },
    KVROUTER_VERSION,
  );
}

/** Let in-flight completions finish (up to the grace period), then `afterDrain`, then close every part. */
export async function closeRuntime(rt: RouterRuntime, graceMs: number, afterDrain: () => void): Promise<void> {
  const deadline = Date.now() + graceMs;
  while (rt.inflight.size > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  for (const res of rt.inflight)
    cutResponse(
      res,
      'the router is shutting down: the stream was cut at the end of its grace period (server.shutdown_grace_ms)',
      503,
    );
  afterDrain();
  await rt.cluster?.close();
  await rt.deps.tracing?.shutdown();
  rt.queue.notify();
  await rt.listeners.close();
  await Promise.all(rt.all.flatMap((m) => m.instances.map((i) => i.upstream.pool.close().catch(() => undefined))));
  await Promise.all(rt.engines.map((e) => e.close()));
  await Promise.all([...new Set(rt.all.map((m) => m.tokenizer))].map((t) => t.close()));
}
