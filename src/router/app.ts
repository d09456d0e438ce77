// Composition root of `kvrouter serve`: the runtime (config -> simulated engines, indexer, KV-event
// listeners, scheduler, upstream pools, tokenizers, metrics), its HTTP routes, the server, the
// cluster, timers, reload and shutdown. Each part lives in its own module; this file wires them.
import { roleOf } from './models.js';
import { Hono } from 'hono';
import { ApiError, installErrorHandling } from '../api/errors.js';
import { honoListener, type RunningServer, startHttpServer } from '../api/http-server.js';
import { mountIndexerRoutes, type QueryScope } from '../api/indexer-routes.js';
import type { Access } from '../auth/access.js';
import type { SlotOwner } from '../auth/tenant-slots.js';
import { endpointAllowed } from '../auth/allowlist.js';
import { installAccess } from '../api/access.js';
import { attachCluster, type ClusterHandle } from '../cluster/attach.js';
import { clusterEnabled, clusterOptionsFromConfig } from '../cluster/config.js';
import { mountPeerRoutes } from '../api/peer-routes.js';
import { ListenError } from '../common/listen.js';
import type { LoadOptions } from '../config/load.js';
import type { RouterConfig } from '../config/schema.js';
import { type DashboardPart, mountDashboard, wholeRouterSource } from '../dashboard/index.js';
import type { EngineHandle } from '../engine-sim/index.js';
import type { ListenerPool } from '../events/listener-pool.js';
import type { Registry } from '../events/registry.js';
import type { TieredIndexer } from '../indexer/namespaces.js';
import type { IndexWriter } from '../indexer/writer.js';
import type { IndexSnapshot } from '../indexer/snapshot.js';
import type { Scheduler } from '../scheduler/scheduler.js';
import { dashboardSource } from './dashboard-source.js';
import { mountDebugRoute } from './debug-route.js';
import { mountDecisionRoutes } from './decision-api.js';
import { HOT_ROUTES, hotPathHandler } from './hot-path.js';
import type { ModelRuntime } from './models.js';
import { engineLoadOf, mountOpsRoutes } from './ops-routes.js';
import { startProbes } from './probes.js';
import { createReloader, type ReloadResult } from './reload.js';
import { closeRuntime, createRuntime, type RouterRuntime } from './runtime.js';
import type { FeedbackLoop } from '../feedback/loop.js';
import { startAdapterDiscovery } from './adapter-discovery.js';
import { startEngineScrape } from './engine-scrape.js';
import type { SyncLink } from '../cluster/nats-link.js';
import type { EngineRef } from './engines.js';
import { SharedRoutes } from '../api/shared-routes.js';
import { installProcessSharing } from './process-share.js';

export type { ReloadResult } from './reload.js';

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
  /** Closed-loop check of cache predictions (alarms, actions taken). */
  readonly feedback: FeedbackLoop;
  /** Every part of the running router: what front ends in the same process (the gateway picker) share. */
  readonly runtime: RouterRuntime;
  /** Apply a new configuration (or re-read the config file) without dropping in-flight requests. */
  reload(next?: RouterConfig): Promise<ReloadResult>;
  /**
   * Stop accepting, let in-flight requests finish (up to `graceMs`, by default the running config's
   * `server.shutdown_grace_ms`), close everything.
   */
  close(graceMs?: number): Promise<void>;
  /** Apply a request another `--workers` process passed on (not passed on again). */
  replay(req: ReplayedRequest): Promise<ReplayAnswer>;
}

/** A state-changing admin request, as one `--workers` process passes it to the others. */
export interface ReplayedRequest {
  method: string;
  /** Path and query. */
  path: string;
  headers: Record<string, string>;
  body: Uint8Array;
}

export interface ReplayAnswer {
  status: number;
  body: Uint8Array;
}

/**
 * This router is one of `serve --workers N` processes on one port (src/processes): one router to
 * its users, so it shares bookings, state changes and metrics with the others.
 */
export interface ProcessRole {
  /** 0-based (names this process's replica: `<router_id>-w<index>`). */
  index: number;
  /** Replica sync with the other processes (unless cluster.nats.url makes each a NATS replica). */
  link: SyncLink;
  /** The primary's simulated engines (this process starts none). */
  engines: readonly EngineRef[];
  /** The whole router's /metrics: every process's registry, aggregated. */
  metrics(): Promise<string>;
  /** A state-changing request this process served: the others apply it too. */
  replay(req: ReplayedRequest): void;
  /** Ask the other processes (the first 2xx answer, else null): for a booking another process made. */
  ask(req: ReplayedRequest): Promise<ReplayAnswer | null>;
  /** The other processes' dashboard parts (`cursors`: the last decision seq seen per pid). */
  dashboard(cursors: Record<string, number>): Promise<DashboardPart[]>;
  /** A replacement process: a copy of another process's index (null: none answered in time). */
  recoverIndex?(): Promise<IndexSnapshot | null>;
  /** Grants tenants' concurrency slots for every process (the primary); absent: admitted against replica sync's reports. */
  slots?: SlotOwner;
}

export interface StartOptions {
  log?: (line: string) => void;
  now?: () => number;
  /** The file the config came from, and how it was loaded: enables reload() without arguments. */
  configFile?: string;
  loadOptions?: LoadOptions;
  /** One of `serve --workers N` processes. */
  process?: ProcessRole;
}

/**
 * A tenant reads only the cache its own requests use: a model (or LoRA adapter) it may use, the
 * router's namespace ('default'), under its own salt. Admins (and everyone while auth is off) read
 * what they ask. The names go through the chat path's own check (`Access.modelAllowed`): a request
 * names an adapter alone, so an allowed adapter's base model needs no listing of its own.
 */
function scopeQuery(
  access: Access,
  headers: Headers,
  asked: QueryScope,
  baseOf: (adapter: string) => string | null,
  servedName: (model: string) => string,
): QueryScope {
  const p = access.identify(Object.fromEntries(headers));
  if (p === null || p.kind !== 'tenant') return asked;
  if (asked.lora !== null && !access.modelAllowed(p, asked.lora))
    throw new ApiError(403, 'model_not_allowed', `this API key may not use the adapter ${asked.lora}`, 'lora_name');
  const adapterBase = asked.lora !== null && baseOf(asked.lora) === servedName(asked.model);
  if (!adapterBase && !access.modelAllowed(p, asked.model))
    throw new ApiError(403, 'model_not_allowed', `this API key may not use the model ${asked.model}`, 'model');
  if (asked.tenant !== 'default')
    throw new ApiError(
      403,
      'forbidden',
      'an API key reads only the namespace its own requests use (tenant_id default)',
      'tenant_id',
    );
  const s = access.saltFor(p, asked.salt);
  if ('status' in s) throw new ApiError(403, s.code, s.message, 'cache_salt');
  return { ...asked, salt: s.salt };
}

/** Every route but the completions hot path, on one hono app. */
function routes(rt: RouterRuntime, reload: RouterHandle['reload'], role: ProcessRole | null): Hono {
  const { deps } = rt;
  const app = new Hono();
  installAccess(
    app,
    () => deps.access,
    (cls, d) => rt.metrics.denied(cls, d.status),
  );
  // The table the mounts below fill: which routes the `--workers` processes share.
  const shared = new SharedRoutes();
  if (role) {
    installProcessSharing(app, shared, role, () => deps.cfg.server.max_body_bytes);
    app.get('/metrics', async (c) => c.body(await role.metrics(), 200, { 'content-type': rt.prom.contentType }));
  }
  mountIndexerRoutes(app, {
    shared,
    writer: rt.writer,
    registry: rt.registry,
    listeners: rt.listeners,
    now: rt.now,
    allowEndpoint: (e) => endpointAllowed(e, deps.cfg.auth.register_allowlist),
    maxRegistrations: () => deps.cfg.auth.max_listeners,
    onQuery: (route, r) => rt.indexMetrics.observeQuery(route, r),
    scopeQuery: (c, asked) =>
      scopeQuery(
        deps.access,
        c.req.raw.headers,
        asked,
        (a) => rt.adapters.resolve(a)?.model ?? null,
        (m) => deps.models.get(m)?.name ?? m,
      ),
    limits: {
      get maxBodyBytes() {
        return deps.cfg.server.max_body_bytes; // the running config's (a reload changes it)
      },
    },
    roleOf: (id) => {
      for (const m of rt.all) if (m.roles.has(id)) return roleOf(m, id);
      return null;
    },
  });
  mountOpsRoutes(app, rt, reload, shared);
  mountDecisionRoutes(app, deps, shared);
  mountPeerRoutes(app, { peers: rt.peers, shared });
  const dashboard = dashboardSource({
    models: () => rt.all,
    indexer: rt.indexer,
    scheduler: rt.scheduler,
    listeners: rt.listeners,
    registry: rt.registry,
    log: rt.decisions,
    queueDepth: () => rt.queue.depth,
    now: rt.now,
    feedback: () => rt.feedback.verifier,
    engineLoad: (id, dp) => engineLoadOf(rt, id, dp),
  });
  // One of `--workers` processes: its dashboard merges in what only the others hold (decisions, counts).
  mountDashboard(app, role ? wholeRouterSource(dashboard, (cursors) => role.dashboard(cursors)) : dashboard);
  mountDebugRoute(app, deps);
  installErrorHandling(app, HOT_ROUTES);
  return app;
}

/** Connections refused at server.max_connections: counted, and logged at most once a minute. */
function connectionsDropped(rt: RouterRuntime, max: number): () => void {
  let dropped = 0;
  let loggedAt = -Infinity;
  return () => {
    dropped++;
    rt.metrics.connectionRefused();
    if (rt.now() - loggedAt < 60_000) return;
    loggedAt = rt.now();
    rt.log(`refusing connections: ${max} open (server.max_connections); ${dropped} refused so far`);
  };
}

/** Background work: index expiry, stale-booking sweeps, active health probes. */
function startTimers(rt: RouterRuntime): () => void {
  const { deps, scheduler, queue, now } = rt;
  const probes = startProbes(
    () => rt.all,
    () => deps.cfg.health,
  );
  const discovery = startAdapterDiscovery(
    () => rt.all,
    () => deps.cfg,
    rt.adapters,
  );
  const scrape = startEngineScrape(
    () => rt.all,
    () => deps.cfg,
    rt.engineLoads,
    now,
  );
  const timers = [
    setInterval(() => rt.indexer.expire(now()), 1000),
    setInterval(
      () => {
        const stale = scheduler.sweep(now(), deps.cfg.routing.stale_booking_ms);
        if (stale.length) {
          rt.metrics.staleFreed(stale.length);
          queue.notify();
        }
      },
      Math.min(5000, Math.max(250, deps.cfg.routing.stale_booking_ms / 4)),
    ),
  ];
  for (const t of timers) t.unref();
  return () => {
    probes.stop();
    discovery.stop();
    scrape.stop();
    for (const t of timers) clearInterval(t);
  };
}

/**
 * A replacement `--workers` process: before it takes connections, a copy of a living process's
 * index (its own KV-event listeners are already connected, so nothing published since is missed).
 */
async function recoverFromProcess(rt: RouterRuntime, recoverIndex: () => Promise<IndexSnapshot | null>): Promise<void> {
  const snap = await recoverIndex();
  try {
    if (snap)
      rt.log(
        `recovered ${rt.writer.restore(snap, rt.now())} blocks in ${snap.namespaces.length} namespaces from another router process`,
      );
    else rt.log('no other router process sent its index in time; starting with an empty one');
  } catch (err) {
    rt.log(`could not restore another router process's index (${(err as Error).message}); starting with an empty one`);
  }
}

/** Replica sync and index recovery (`cluster:`); each `--workers` process is a replica of its own. */
function joinCluster(rt: RouterRuntime, cfg: RouterConfig, role: ProcessRole | null, url: string): ClusterHandle {
  const o = clusterOptionsFromConfig(cfg.cluster);
  // Over NATS with cluster.nats.url, else over the processes' mesh.
  if (role) o.routerId = `${o.routerId ?? `r-${process.ppid}`}-w${role.index}`;
  return attachCluster(
    {
      scheduler: rt.scheduler,
      writer: rt.writer,
      url,
      peers: rt.peers,
      metrics: rt.prom,
      now: rt.now,
      onReleased: (instance) => rt.queue.notify(instance),
      log: rt.log,
      tenants: rt.deps.access.usage,
      ...(role ? { localLink: role.link } : {}),
    },
    o,
  );
}

export async function startRouter(cfgIn: RouterConfig, opts: StartOptions = {}): Promise<RouterHandle> {
  const cfg0 = structuredClone(cfgIn);
  const role = opts.process ?? null;
  const rt = await createRuntime(
    cfg0,
    opts.log ?? ((l: string) => process.stdout.write(`${l}\n`)),
    opts.now ?? Date.now,
    role?.engines,
  );
  // Kept by reloads: the usage outlives every Access.
  if (role?.slots) rt.deps.access.usage.owner = role.slots;
  const reload = createReloader(rt, opts);
  const app = routes(rt, reload, role);
  if (role?.recoverIndex) await recoverFromProcess(rt, role.recoverIndex);
  let server: RunningServer;
  try {
    const s = cfg0.server;
    server = await startHttpServer(hotPathHandler(rt, honoListener(app)), {
      host: s.host,
      port: s.port,
      role: 'router HTTP server',
      limits: {
        headersTimeoutMs: s.headers_timeout_ms,
        requestTimeoutMs: s.request_timeout_ms,
        keepAliveTimeoutMs: s.keep_alive_timeout_ms,
        maxConnections: s.max_connections,
      },
      onDrop: connectionsDropped(rt, s.max_connections),
    });
  } catch (err) {
    await rt.listeners.close();
    await Promise.all(rt.engines.map((e) => e.close()));
    throw err instanceof ListenError ? err.withHint('server.port (kvrouter serve --port)') : err;
  }
  if (role || clusterEnabled(cfg0.cluster)) rt.cluster = joinCluster(rt, cfg0, role, server.url);
  const stopTimers = startTimers(rt);
  rt.log(
    `kvrouter listening on ${server.url} (models: ${rt.all.map((m) => `${m.name} x${m.instances.length}`).join(', ')})`,
  );

  let closing: Promise<void> | null = null;
  return {
    url: server.url,
    port: server.port,
    get config() {
      return rt.deps.cfg;
    },
    engines: rt.engines,
    indexer: rt.indexer,
    writer: rt.writer,
    scheduler: rt.scheduler,
    registry: rt.registry,
    listeners: rt.listeners,
    get models() {
      return rt.deps.models;
    },
    get cluster() {
      return rt.cluster;
    },
    feedback: rt.feedback,
    runtime: rt,
    reload,
    async replay(r) {
      const res = await app.fetch(
        new Request(`http://kvrouter${r.path}`, { method: r.method, headers: r.headers, body: new Uint8Array(r.body) }),
        { replayed: true },
      );
      return { status: res.status, body: new Uint8Array(await res.arrayBuffer()) };
    },
    close(graceMs) {
      closing ??= (async () => {
        // Keep listening while in-flight requests drain: probes get /live 503 and new completions a
        // 503 with Retry-After, instead of a refused connection.
        rt.shuttingDown = true;
        await closeRuntime(rt, graceMs ?? rt.deps.cfg.server.shutdown_grace_ms, () => {
          server.server.close();
          server.server.closeAllConnections();
          stopTimers();
        });
      })();
      return closing;
    },
  };
}
