// Composition root of `kvrouter serve`: config -> indexer, KV-event listeners, scheduler, upstream
// pools, tokenizers, HTTP front end (and simulated engines when configured).
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Hono } from 'hono';
import { Registry as PromRegistry, collectDefaultMetrics } from 'prom-client';
import { honoListener, type RunningServer, startHttpServer } from '../api/http-server.js';
import { INDEXER_ROUTES, installErrorHandling, json, mountIndexerRoutes } from '../api/indexer-routes.js';
import { OpenAIError } from '../api/openai.js';
import type { RouterConfig } from '../config/schema.js';
import { type EngineHandle, startEngines } from '../engine-sim/index.js';
import { EventApplier } from '../events/apply.js';
import { ListenerPool } from '../events/listener-pool.js';
import { Registry, type PublisherType } from '../events/registry.js';
import { registerIndexMetrics } from '../indexer/metrics.js';
import { TieredIndexer } from '../indexer/tiered-indexer.js';
import { CapacityQueue } from '../proxy/capacity.js';
import { Scheduler } from '../scheduler/scheduler.js';
import { handleCompletion, prepareRoute, routeFields, sendOpenAIError } from './completions.js';
import { createRouterMetrics } from './metrics.js';
import { buildModels, type ModelRuntime, uniqueModels } from './models.js';
import { Access } from '../auth/access.js';
import { endpointAllowed, isLoopbackHost } from '../auth/allowlist.js';
import { mountDashboard } from '../dashboard/index.js';
import { denialBody, installAccess } from '../auth/http.js';
import { dashboardSource } from './dashboard-source.js';
import { mountDecisionRoutes } from './decision-api.js';
import { combineObservers, DecisionLog } from './decision-log.js';
import { startProbes } from './probes.js';

export interface RouterHandle {
  readonly url: string;
  readonly port: number;
  readonly config: RouterConfig;
  readonly engines: readonly EngineHandle[];
  readonly indexer: TieredIndexer;
  readonly scheduler: Scheduler;
  readonly registry: Registry;
  readonly listeners: ListenerPool;
  readonly models: ReadonlyMap<string, ModelRuntime>;
  /** Stop accepting, let in-flight requests finish (up to the grace period), close everything. */
  close(): Promise<void>;
}

export interface StartOptions {
  log?: (line: string) => void;
  now?: () => number;
}

const ENGINE_TYPES: Record<RouterConfig['engine_sim']['event_format'], PublisherType> = { map: 'vLLM', array: 'vLLM', sglang: 'SGLang', mooncake: 'Mooncake' };

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
  });
  for (const e of engines) log(`engine-sim ${e.id} ${e.url} zmq ${e.zmqEndpoint} replay ${e.replayEndpoint}`);
  // Models without instances are served by the simulated engines.
  for (const model of cfg.models) {
    if (model.instances.length > 0) continue;
    model.instances = engines.map((e) => ({
      id: e.id,
      url: e.url,
      dp_size: e.ranks.length,
      ...(e.zmqEndpoint ? { kv_events: { endpoint: e.zmqEndpoint, ...(e.replayEndpoint ? { replay_endpoint: e.replayEndpoint } : {}), type: ENGINE_TYPES[es.event_format], topic: '' } } : {}),
    }));
  }
  return engines;
}

function bumpPort(endpoint: string, by: number): string {
  return by === 0 ? endpoint : endpoint.replace(/:(\d+)$/, (_m, p: string) => `:${Number(p) + by}`);
}

export async function startRouter(cfgIn: RouterConfig, opts: StartOptions = {}): Promise<RouterHandle> {
  const cfg = structuredClone(cfgIn);
  const log = opts.log ?? ((l: string) => process.stdout.write(`${l}\n`));
  const now = opts.now ?? Date.now;
  const access = new Access({ admin_token: cfg.auth.admin_token, tenants: cfg.auth.tenants }, now);
  if (!access.enabled) {
    if (!isLoopbackHost(cfg.server.host) && !cfg.auth.allow_unauthenticated) {
      throw new Error(`refusing to serve on ${cfg.server.host} without authentication: configure auth.admin_token / auth.tenants, or set auth.allow_unauthenticated: true`);
    }
    log(`auth disabled: no admin token and no tenants, serving without credentials${isLoopbackHost(cfg.server.host) ? ' (loopback only)' : ' (allow_unauthenticated is set)'}`);
  }
  const engines = await startEmbeddedEngines(cfg, log);

  const modelSeeds = new Map(cfg.models.filter((m) => m.hash_seed !== undefined).map((m) => [m.name, BigInt(m.hash_seed!)] as const));
  const indexer = new TieredIndexer({ defaultSeed: BigInt(cfg.hashing.seed), modelSeeds });
  const registry = new Registry();
  const applier = new EventApplier(indexer);
  const prom = new PromRegistry();
  collectDefaultMetrics({ register: prom });
  const listeners = new ListenerPool({ registry, indexer, applier, metrics: prom, now });
  const scheduler = new Scheduler(indexer);
  const queue = new CapacityQueue(cfg.routing.busy.queue_size);
  const models = await buildModels(cfg);
  const all = uniqueModels(models);
  const modelOfInstance = new Map<string, string>();
  for (const m of all) for (const i of m.instances) modelOfInstance.set(i.id, m.name);

  // KV events: one registration (and ZMQ listener) per instance and dp rank.
  for (const m of all) {
    for (const inst of m.cfg.instances) {
      indexer.namespace({ model: m.name, blockSize: m.cfg.block_size }).instances.add(inst.id);
      if (!inst.kv_events) continue;
      for (let r = 0; r < inst.dp_size; r++) {
        const res = registry.register(
          {
            endpoint: bumpPort(inst.kv_events.endpoint, r),
            replayEndpoint: inst.kv_events.replay_endpoint ? bumpPort(inst.kv_events.replay_endpoint, r) : null,
            type: inst.kv_events.type,
            model: m.name,
            loraName: null,
            tenant: 'default',
            instanceId: inst.id,
            blockSize: m.cfg.block_size,
            dpRank: r,
            additionalSalt: null,
            topic: inst.kv_events.topic,
            backendId: inst.id,
            shared: false,
          },
          now(),
        );
        listeners.add(res.registration);
      }
    }
  }

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
  const deps = { cfg, models, metrics, scheduler, queue, now, access, observer: combineObservers(metrics, decisions) };

  let shuttingDown = false;
  const ready = () =>
    !shuttingDown && all.every((m) => m.instances.filter((i) => i.health.available(now())).length >= Math.max(1, m.cfg.min_initial_instances));

  const app = new Hono();
  installAccess(app, access, (cls, d) => metrics.rejected(cls, d.status));
  mountIndexerRoutes(app, {
    indexer,
    registry,
    applier,
    listeners,
    now,
    allowEndpoint: (e) => endpointAllowed(e, cfg.auth.register_allowlist),
    maxRegistrations: cfg.auth.max_listeners, onQuery: (route, r) => im.observeQuery(route, r), limits: { maxBodyBytes: cfg.server.max_body_bytes } });
  app.get('/v1/models', (c) =>
    c.json({
      object: 'list',
      data: [...models.keys()].map((id) => ({ id, object: 'model', created: 0, owned_by: 'kvrouter', root: models.get(id)!.name })),
    }),
  );
  app.get('/health', (c) =>
    json(c, {
      status: 'ok',
      models: all.map((m) => ({
        name: m.name,
        instances: m.instances.map((i) => ({ id: i.id, url: i.upstream.url, dp_size: i.dpSize, ...i.health.snapshot(now()), load: scheduler.active.load(i.id, 0) })),
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
    return c.json({ ready: ready(), shutting_down: shuttingDown, models: details, listeners: listeners.statusCounts() }, ready() ? 200 : 503);
  });
  mountDecisionRoutes(app, { ...deps, indexer });
  mountDashboard(app, dashboardSource({ models: all, indexer, scheduler, applier, listeners, log: decisions, queueDepth: () => queue.depth, now }));
  app.get('/metrics', async (c) => c.body(await prom.metrics(), 200, { 'content-type': prom.contentType }));
  app.post('/debug/route', async (c) => {
    // Same preparation as the proxy path (model, overrides, tokens); scores every candidate, books nothing.
    let raw: unknown;
    try {
      raw = await c.req.json();
    } catch {
      return c.json(new OpenAIError(400, 'request body is not valid JSON').body(), 400);
    }
    const kind = c.req.query('kind') === 'completion' || (raw !== null && typeof raw === 'object' && 'prompt' in raw) ? 'completion' : 'chat';
    try {
      const headers = Object.fromEntries(c.req.raw.headers);
      const p = await prepareRoute(kind, raw, headers, deps, access.identify(headers) ?? { kind: 'anonymous' });
      const { ns, route } = routeFields(p, cfg);
      const candidates = p.model.instances.filter((i) => i.health.available(now())).flatMap((i) => Array.from({ length: i.dpSize }, (_, r) => ({ instance: i.id, dpRank: r })));
      const d = scheduler.decide({ ...route, ns, candidates }, now());
      return json(c, {
        model: p.model.name,
        policy: d.policy,
        prompt_tokens: d.isl,
        block_size: d.blockSize,
        chosen: d.chosen ? { instance: d.chosen.instance, dp_rank: d.chosen.dpRank } : null,
        reason: d.reason,
        candidates: d.candidates.map((x) => ({
          instance: x.instance,
          dp_rank: x.dpRank,
          overlap_tokens: { gpu: x.device * d.blockSize, cpu: x.host * d.blockSize, disk: x.disk * d.blockSize, shared: x.shared * d.blockSize },
          credited_blocks: x.creditedBlocks,
          prefill_blocks: x.prefillBlocks,
          decode_blocks: x.decodeBlocks,
          new_blocks: x.newBlocks,
          cost: x.cost,
          load: { active_prefill_tokens: x.load.activePrefillTokens, active_blocks: x.load.activeBlocks, active_requests: x.load.activeRequests },
          busy: x.busy,
        })),
      });
    } catch (err) {
      if (err instanceof OpenAIError) return c.json(err.body(), err.status as 400);
      throw err;
    }
  });
  installErrorHandling(app, [...INDEXER_ROUTES, ['GET', '/v1/models'], ['GET', '/health'], ['GET', '/live'], ['GET', '/ready'], ['GET', '/metrics'], ['POST', '/debug/route'], ['POST', '/v1/chat/completions'], ['POST', '/v1/completions'], ['POST', '/v1/route'], ['POST', '/v1/route/loads'], ['GET', '/v1/route/events'], ['POST', '/v1/route/:id/prefill_complete'], ['POST', '/v1/route/:id/free']]);
  const rest = honoListener(app);

  const inflight = new Set<ServerResponse>();
  const handler = (req: IncomingMessage, res: ServerResponse) => {
    const path = req.url?.split('?')[0];
    if (req.method === 'POST' && (path === '/v1/chat/completions' || path === '/v1/completions')) {
      if (shuttingDown) {
        sendOpenAIError(res, new OpenAIError(503, 'the router is shutting down', 'server_error'));
        return;
      }
      const principal = access.identify(req.headers);
      if (principal === null) {
        const d = { status: 401 as const, code: 'invalid_api_key', message: 'missing or invalid API key (Authorization: Bearer <key>)' };
        metrics.rejected('unknown', 401);
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
    server = await startHttpServer(handler, { host: cfg.server.host, port: cfg.server.port });
  } catch (err) {
    await listeners.close();
    await Promise.all(engines.map((e) => e.close()));
    throw err;
  }

  const probes = startProbes(all, cfg.health, now, (id, ev) => {
    metrics.healthChanged?.(id, ev);
    if (ev === 'readmitted') queue.notify();
  });
  const timers = [
    setInterval(() => indexer.expire(now()), 1000),
    setInterval(() => {
      const stale = scheduler.sweep(now(), cfg.routing.stale_booking_ms);
      if (stale.length) {
        metrics.staleFreed(stale.length);
        queue.notify();
      }
    }, Math.min(5000, Math.max(250, cfg.routing.stale_booking_ms / 4))),
  ];
  for (const t of timers) t.unref();
  log(`kvrouter listening on ${server.url} (models: ${all.map((m) => `${m.name} x${m.instances.length}`).join(', ')})`);

  let closing: Promise<void> | null = null;
  return {
    url: server.url,
    port: server.port,
    config: cfg,
    engines,
    indexer,
    scheduler,
    registry,
    listeners,
    models,
    close() {
      closing ??= (async () => {
        shuttingDown = true;
        server.server.close();
        const deadline = Date.now() + cfg.server.shutdown_grace_ms;
        while (inflight.size > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
        for (const res of inflight) res.destroy();
        server.server.closeAllConnections();
        probes.stop();
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
}
