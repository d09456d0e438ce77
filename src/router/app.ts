// Composition root of `kvrouter serve`: config -> indexer, KV-event listeners, scheduler, upstream
// pools, tokenizers, HTTP front end (and simulated engines when configured). The parts a new config
// may change live (models, instances, routing, auth, limits) sit in one mutable `deps` object that
// request handlers read per request; `reload` swaps them without touching in-flight requests.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Hono } from 'hono';
import { Registry as PromRegistry, collectDefaultMetrics } from 'prom-client';
import { honoListener, type RunningServer, startHttpServer } from '../api/http-server.js';
import { INDEXER_ROUTES, installErrorHandling, json, mountIndexerRoutes } from '../api/indexer-routes.js';
import { OpenAIError } from '../api/openai.js';
import { Access } from '../auth/access.js';
import { mulberry32 } from '../common/prng.js';
import { attachCluster, type ClusterHandle } from '../cluster/attach.js';
import { clusterEnabled, clusterOptionsFromConfig } from '../cluster/config.js';
import { mountPeerRoutes, PEER_ROUTES } from '../cluster/peer-routes.js';
import { modelSeeds } from '../cluster/registrations.js';
import { PeerList } from '../cluster/peers.js';
import { endpointAllowed, isLoopbackHost } from '../auth/allowlist.js';
import { denialBody, installAccess } from '../auth/http.js';
import { ConfigInvalidError, loadConfigFile, type LoadOptions } from '../config/load.js';
import type { RouterConfig } from '../config/schema.js';
import { mountDashboard } from '../dashboard/index.js';
import { ENGINE_ROLES, type EngineHandle, startEngines } from '../engine-sim/index.js';
import { ListenError } from '../common/listen.js';
import { type IndexWriter, KvIndexWriter } from '../indexer/writer.js';
import { ListenerPool } from '../events/listener-pool.js';
import { listenerOptionsFromConfig } from '../events/config.js';
import { type PublisherType, Registry } from '../events/registry.js';
import { registerIndexMetrics } from '../indexer/metrics.js';
import { TieredIndexer } from '../indexer/tiered-indexer.js';
import { CapacityQueue } from '../proxy/capacity.js';
import { Scheduler } from '../scheduler/scheduler.js';
import { type CompletionDeps, handleCompletion, sendOpenAIError } from './completions.js';
import { dashboardSource } from './dashboard-source.js';
import { mountDebugRoute } from './debug-route.js';
import { mountDecisionRoutes } from './decision-api.js';
import { combineObservers, DecisionLog } from './decision-log.js';
import { createRouterMetrics } from './metrics.js';
import { type ModelRuntime, reconcileModels } from './models.js';
import { startProbes } from './probes.js';
import { reconcileRegistrations } from './registrations.js';

export interface ReloadResult {
  ok: boolean;
  /** What changed (instances added/removed, settings). */
  changes: string[];
  /** Keys that changed in the file but only take effect after a restart. */
  restartRequired: string[];
  errors: Array<{ path: string; message: string }>;
}

export interface RouterHandle {
  readonly url: string;
  readonly port: number;
  readonly config: RouterConfig;
  readonly engines: readonly EngineHandle[];
  readonly indexer: TieredIndexer;
  /** The one write path into `indexer`. */
  readonly writer: IndexWriter;
  readonly scheduler: Scheduler;
  readonly registry: Registry;
  readonly listeners: ListenerPool;
  readonly models: ReadonlyMap<string, ModelRuntime>;
  /** Replica sync, peer recovery and relayed events (null when `cluster:` asks for none). */
  readonly cluster: ClusterHandle | null;
  /** Apply a new configuration (or re-read the config file) without dropping in-flight requests. */
  reload(next?: RouterConfig): Promise<ReloadResult>;
  /** Stop accepting, let in-flight requests finish (up to the grace period), close everything. */
  close(): Promise<void>;
}

export interface StartOptions {
  log?: (line: string) => void;
  now?: () => number;
  /** The file the config came from, and how it was loaded: enables reload() without arguments. */
  configFile?: string;
  loadOptions?: LoadOptions;
}

const ENGINE_TYPES: Record<RouterConfig['engine_sim']['event_format'], PublisherType> = { map: 'vLLM', array: 'vLLM', sglang: 'SGLang', mooncake: 'Mooncake' };

// Engine i of `engine_sim` listens on port + i and publishes on zmq_port / replay_port + 2i.
const EMBEDDED_ENGINE_HINTS: Record<string, string> = {
  [ENGINE_ROLES.http]: 'engine_sim.port (engine i takes port + i)',
  [ENGINE_ROLES.pub]: 'engine_sim.zmq_port (engine i takes zmq_port + 2i)',
  [ENGINE_ROLES.replay]: 'engine_sim.replay_port (engine i takes replay_port + 2i)',
};

async function startEmbeddedEngines(cfg: RouterConfig, log: (l: string) => void): Promise<EngineHandle[]> {
  const es = cfg.engine_sim;
  if (es.count === 0) return [];
  const m = cfg.models[0];
  const engines = await startEngines(es.count, {
    host: '127.0.0.1',
    port: es.port,
    zmqPort: es.zmq_port,
    replayPort: es.replay_port,
    model: m.name,
    tokenizer: m.tokenizer.package ?? m.tokenizer.path,
    blockSize: m.block_size,
    numGpuBlocks: es.num_gpu_blocks,
    numCpuBlocks: es.num_cpu_blocks,
    speedup: es.speedup,
    seed: es.seed,
    eventFormat: es.event_format,
    hashSeed: BigInt(m.hash_seed ?? cfg.hashing.seed),
  }).catch((err: unknown) => {
    throw err instanceof ListenError ? err.withHint(EMBEDDED_ENGINE_HINTS[err.role] ?? 'the engine_sim ports') : err;
  });
  for (const e of engines) log(`engine-sim ${e.id} ${e.url} zmq ${e.zmqEndpoint} replay ${e.replayEndpoint}`);
  return engines;
}

/** Models without instances are served by the simulated engines. */
function fillEngineInstances(cfg: RouterConfig, engines: readonly EngineHandle[]): void {
  if (engines.length === 0) return;
  for (const model of cfg.models) {
    if (model.instances.length > 0) continue;
    model.instances = engines.map((e) => ({
      id: e.id,
      url: e.url,
      dp_size: e.ranks.length,
      ...(e.zmqEndpoint ? { kv_events: { endpoint: e.zmqEndpoint, ...(e.replayEndpoint ? { replay_endpoint: e.replayEndpoint } : {}), type: ENGINE_TYPES[cfg.engine_sim.event_format], topic: '' } } : {}),
    }));
  }
}

function checkAuth(cfg: RouterConfig, access: Access): void {
  if (!access.enabled && !isLoopbackHost(cfg.server.host) && !cfg.auth.allow_unauthenticated) {
    throw new Error(`refusing to serve on ${cfg.server.host} without authentication: configure auth.admin_token / auth.tenants, or set auth.allow_unauthenticated: true`);
  }
}

const RESTART_ONLY: ReadonlyArray<[string, (c: RouterConfig) => unknown]> = [
  ['server.host', (c) => c.server.host],
  ['server.port', (c) => c.server.port],
  ['engine_sim', (c) => JSON.stringify(c.engine_sim)],
  ['hashing.seed', (c) => c.hashing.seed],
  ['cluster', (c) => JSON.stringify(c.cluster)],
  ['kv_events', (c) => JSON.stringify(c.kv_events)],
];

export async function startRouter(cfgIn: RouterConfig, opts: StartOptions = {}): Promise<RouterHandle> {
  const cfg0 = structuredClone(cfgIn);
  const log = opts.log ?? ((l: string) => process.stdout.write(`${l}\n`));
  const now = opts.now ?? Date.now;
  const access0 = new Access({ admin_token: cfg0.auth.admin_token, tenants: cfg0.auth.tenants }, now);
  checkAuth(cfg0, access0);
  if (!access0.enabled) log(`auth disabled: no admin token and no tenants, serving without credentials${isLoopbackHost(cfg0.server.host) ? ' (loopback only)' : ' (allow_unauthenticated is set)'}`);
  const engines = await startEmbeddedEngines(cfg0, log);
  fillEngineInstances(cfg0, engines);

  const indexer = new TieredIndexer({ defaultSeed: BigInt(cfg0.hashing.seed), modelSeeds: modelSeeds(cfg0) });
  const registry = new Registry();
  const writer = new KvIndexWriter(indexer);
  const prom = new PromRegistry();
  collectDefaultMetrics({ register: prom });
  const listeners = new ListenerPool({ registry, writer, metrics: prom, now, options: listenerOptionsFromConfig(cfg0.kv_events) });
  const scheduler = new Scheduler(indexer, cfg0.routing.seed !== undefined ? mulberry32(cfg0.routing.seed) : Math.random);
  const queue = new CapacityQueue(cfg0.routing.busy.queue_size);
  const modelSet = await reconcileModels(cfg0, null);
  const ownedRegs = new Set<string>();
  // In relay mode the index arrives through JetStream: this replica opens no ZMQ socket.
  const relayed = cfg0.cluster.events.source === 'jetstream';
  if (!relayed) await reconcileRegistrations(cfg0, ownedRegs, registry, listeners, now());
  const peers = new PeerList(cfg0.cluster.peers);
  let cluster: ClusterHandle | null = null;
  let all: ModelRuntime[] = modelSet.all;
  const modelOfInstance = new Map<string, string>();
  const indexInstances = () => {
    modelOfInstance.clear();
    for (const m of all) {
      for (const i of m.instances) {
        modelOfInstance.set(i.id, m.name);
        writer.enroll({ model: m.name, blockSize: m.cfg.block_size }, i.id);
      }
    }
  };
  indexInstances();

  const metrics = createRouterMetrics(
    prom,
    {
      scheduler,
      instances: () => all.flatMap((m) => m.instances.map((i) => ({ id: i.id, model: m.name, healthy: i.health.available(now()), dpSize: i.dpSize }))),
      queueDepth: () => queue.depth,
      tokenizerStats: () => {
        let hits = 0;
        let misses = 0;
        for (const t of new Set(all.map((m) => m.tokenizer))) {
          const s = t.stats();
          hits += s.segmentCacheHits;
          misses += s.segmentCacheMisses;
        }
        return { hits, misses };
      },
    },
    (i) => modelOfInstance.get(i) ?? 'unknown',
  );
  const im = registerIndexMetrics(prom, indexer);
  const decisions = new DecisionLog(500, (i) => modelOfInstance.get(i) ?? 'unknown', now);
  // Request handlers read these fields per request; reload() replaces them.
  const deps: CompletionDeps & { indexer: TieredIndexer } = {
    cfg: cfg0,
    models: modelSet.byName,
    metrics,
    scheduler,
    queue,
    now,
    access: access0,
    indexer,
    observer: combineObservers(metrics, decisions),
  };

  let shuttingDown = false;
  const ready = () =>
    !shuttingDown &&
    (cluster?.isReady() ?? true) &&
    all.every((m) => m.instances.filter((i) => i.health.available(now())).length >= Math.max(1, m.cfg.min_initial_instances));

  const app = new Hono();
  installAccess(app, () => deps.access, (cls, d) => metrics.denied(cls, d.status));
  mountIndexerRoutes(app, {
    writer,
    registry,
    listeners,
    now,
    allowEndpoint: (e) => endpointAllowed(e, deps.cfg.auth.register_allowlist),
    maxRegistrations: () => deps.cfg.auth.max_listeners,
    onQuery: (route, r) => im.observeQuery(route, r),
    limits: { maxBodyBytes: cfg0.server.max_body_bytes },
  });
  app.get('/v1/models', (c) =>
    c.json({
      object: 'list',
      data: [...deps.models.keys()].map((id) => ({ id, object: 'model', created: 0, owned_by: 'kvrouter', root: deps.models.get(id)!.name })),
    }),
  );
  app.get('/health', (c) =>
    json(c, {
      status: 'ok',
      models: all.map((m) => ({
        name: m.name,
        instances: m.instances.map((i) => {
          const load = { active_prefill_tokens: 0, active_blocks: 0, active_requests: 0 };
          for (let r = 0; r < i.dpSize; r++) {
            const l = scheduler.active.load(i.id, r);
            load.active_prefill_tokens += l.activePrefillTokens;
            load.active_blocks += l.activeBlocks;
            load.active_requests += l.activeRequests;
          }
          return { id: i.id, url: i.upstream.url, dp_size: i.dpSize, ...i.health.snapshot(now()), load };
        }),
      })),
      bookings: scheduler.active.size,
      index: indexer.stats(),
      listeners: listeners.statusCounts(),
    }),
  );
  app.get('/live', (c) => (shuttingDown ? c.json({ status: 'shutting down' }, 503) : c.json({ status: 'ok' })));
  app.get('/ready', (c) => {
    const details = all.map((m) => ({
      model: m.name,
      healthy_instances: m.instances.filter((i) => i.health.available(now())).length,
      min_initial_instances: m.cfg.min_initial_instances,
    }));
    return c.json({ ready: ready(), shutting_down: shuttingDown, models: details, listeners: listeners.statusCounts(), cluster: cluster?.status() ?? null }, ready() ? 200 : 503);
  });
  mountDecisionRoutes(app, deps);
  mountPeerRoutes(app, { peers });
  mountDashboard(app, dashboardSource({ models: () => all, indexer, scheduler, listeners, registry, log: decisions, queueDepth: () => queue.depth, now }));
  mountDebugRoute(app, deps);
  app.get('/metrics', async (c) => c.body(await prom.metrics(), 200, { 'content-type': prom.contentType }));
  app.post('/admin/reload', async (c) => {
    const r = await handle.reload();
    return json(c, { status: r.ok ? 'reloaded' : 'rejected', changes: r.changes, restart_required: r.restartRequired, errors: r.errors }, r.ok ? 200 : 400);
  });
  installErrorHandling(app, [
    ...INDEXER_ROUTES,
    ...PEER_ROUTES,
    ['GET', '/v1/models'],
    ['GET', '/health'],
    ['GET', '/live'],
    ['GET', '/ready'],
    ['GET', '/metrics'],
    ['POST', '/debug/route'],
    ['POST', '/admin/reload'],
    ['POST', '/v1/chat/completions'],
    ['POST', '/v1/completions'],
    ['POST', '/v1/route'],
    ['POST', '/v1/route/loads'],
    ['GET', '/v1/route/events'],
    ['POST', '/v1/route/:id/prefill_complete'],
    ['POST', '/v1/route/:id/free'],
    ['GET', '/dashboard'],
    ['GET', '/dashboard/stream'],
    ['GET', '/dashboard/snapshot'],
  ]);
  const rest = honoListener(app);

  const inflight = new Set<ServerResponse>();
  const handler = (req: IncomingMessage, res: ServerResponse) => {
    const path = req.url?.split('?')[0];
    if (req.method === 'POST' && (path === '/v1/chat/completions' || path === '/v1/completions')) {
      if (shuttingDown) {
        sendOpenAIError(res, new OpenAIError(503, 'the router is shutting down', 'server_error'));
        req.resume();
        return;
      }
      const principal = deps.access.identify(req.headers);
      if (principal === null) {
        const d = { status: 401 as const, code: 'invalid_api_key', message: 'missing or invalid API key (Authorization: Bearer <key>)' };
        metrics.denied('api', 401);
        const body = JSON.stringify(denialBody(path, d));
        res.writeHead(401, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
        res.end(body);
        req.resume();
        return;
      }
      inflight.add(res);
      res.on('close', () => inflight.delete(res));
      void handleCompletion(path === '/v1/chat/completions' ? 'chat' : 'completion', req, res, deps, principal);
      return;
    }
    rest(req, res);
  };

  let server: RunningServer;
  try {
    server = await startHttpServer(handler, { host: cfg0.server.host, port: cfg0.server.port, role: 'router HTTP server' });
  } catch (err) {
    await listeners.close();
    await Promise.all(engines.map((e) => e.close()));
    throw err instanceof ListenError ? err.withHint('server.port (kvrouter serve --port)') : err;
  }

  cluster = clusterEnabled(cfg0.cluster)
    ? attachCluster({ scheduler, writer, url: server.url, peers, metrics: prom, now, onReleased: () => queue.notify(), log }, clusterOptionsFromConfig(cfg0.cluster))
    : null;

  const probes = startProbes(() => all, () => deps.cfg.health, now, (id, ev) => {
    metrics.healthChanged?.(id, ev);
    if (ev === 'readmitted') queue.notify();
  });
  const timers = [
    setInterval(() => indexer.expire(now()), 1000),
    setInterval(() => {
      const stale = scheduler.sweep(now(), deps.cfg.routing.stale_booking_ms);
      if (stale.length) {
        metrics.staleFreed(stale.length);
        queue.notify();
      }
    }, Math.min(5000, Math.max(250, cfg0.routing.stale_booking_ms / 4))),
  ];
  for (const t of timers) t.unref();
  log(`kvrouter listening on ${server.url} (models: ${all.map((m) => `${m.name} x${m.instances.length}`).join(', ')})`);

  let reloading: Promise<unknown> = Promise.resolve();
  const applyConfig = async (next: RouterConfig): Promise<ReloadResult> => {
    const cur = deps.cfg;
    fillEngineInstances(next, engines);
    const restartRequired = RESTART_ONLY.filter(([, get]) => get(cur) !== get(next)).map(([k]) => k);
    // Restart-only keys keep their running values.
    next.server = { ...next.server, host: cur.server.host, port: cur.server.port };
    next.engine_sim = cur.engine_sim;
    next.hashing = cur.hashing;
    const access = new Access({ admin_token: next.auth.admin_token, tenants: next.auth.tenants }, now);
    try {
      checkAuth(next, access);
    } catch (err) {
      return { ok: false, changes: [], restartRequired, errors: [{ path: 'auth', message: (err as Error).message }] };
    }
    next.cluster = cur.cluster;
    const r = await reconcileModels(next, { byName: deps.models, all });
    const regs = relayed ? { removed: [], added: [] } : await reconcileRegistrations(next, ownedRegs, registry, listeners, now());
    const changes: string[] = [];
    for (const spec of regs.removed) writer.purge({ backend: spec.backendId, dpRank: spec.dpRank, tenant: spec.tenant });
    // Swap: new requests see the new config from here on; in-flight ones keep what they hold.
    all = r.all;
    deps.cfg = next;
    deps.models = r.byName;
    deps.access = access;
    queue.setMaxSize(next.routing.busy.queue_size);
    for (const i of r.removedInstances) {
      writer.purgeInstance({ instance: i.id });
      const freed = scheduler.active.dropInstance(i.id);
      changes.push(`removed instance ${i.id}${freed ? ` (released ${freed} booking(s))` : ''}`);
      void i.upstream.pool.close().catch(() => undefined); // waits for its in-flight requests
    }
    for (const i of r.addedInstances) changes.push(`added instance ${i.id}`);
    for (const k of regs.added) changes.push(`listening to KV events of ${k}`);
    indexInstances();
    for (const t of r.unusedTokenizers) void t.close();
    if (JSON.stringify(cur.routing) !== JSON.stringify(next.routing) || JSON.stringify(cur.models.map((m) => m.routing)) !== JSON.stringify(next.models.map((m) => m.routing))) changes.push('routing settings');
    if (JSON.stringify(cur.auth) !== JSON.stringify(next.auth)) changes.push('auth settings');
    queue.notify();
    return { ok: true, changes, restartRequired, errors: [] };
  };

  let closing: Promise<void> | null = null;
  const handle: RouterHandle = {
    url: server.url,
    port: server.port,
    get config() {
      return deps.cfg;
    },
    engines,
    indexer,
    writer,
    scheduler,
    registry,
    listeners,
    get models() {
      return deps.models;
    },
    get cluster() {
      return cluster;
    },
    reload(next) {
      const run = async (): Promise<ReloadResult> => {
        let cfg = next ? structuredClone(next) : undefined;
        if (!cfg) {
          if (!opts.configFile) return { ok: false, changes: [], restartRequired: [], errors: [{ path: '(file)', message: 'the router was not started from a file' }] };
          try {
            cfg = loadConfigFile(opts.configFile, opts.loadOptions);
          } catch (err) {
            if (err instanceof ConfigInvalidError) return { ok: false, changes: [], restartRequired: [], errors: err.errors };
            throw err;
          }
        }
        const res = await applyConfig(cfg);
        log(res.ok ? `config reloaded: ${res.changes.join('; ') || 'no changes'}${res.restartRequired.length ? ` (needs a restart: ${res.restartRequired.join(', ')})` : ''}` : `config reload rejected, keeping the running config: ${res.errors.map((e) => `${e.path}: ${e.message}`).join('; ')}`);
        return res;
      };
      const p = reloading.then(run, run);
      reloading = p.catch(() => undefined);
      return p;
    },
    close() {
      closing ??= (async () => {
        shuttingDown = true;
        server.server.close();
        const deadline = Date.now() + deps.cfg.server.shutdown_grace_ms;
        while (inflight.size > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
        for (const res of inflight) res.destroy();
        server.server.closeAllConnections();
        probes.stop();
        await cluster?.close();
        for (const t of timers) clearInterval(t);
        queue.notify();
        await listeners.close();
        await Promise.all(all.flatMap((m) => m.instances.map((i) => i.upstream.pool.close().catch(() => undefined))));
        await Promise.all(engines.map((e) => e.close()));
        await Promise.all([...new Set(all.map((m) => m.tokenizer))].map((t) => t.close()));
      })();
      return closing;
    },
  };
  return handle;
}
