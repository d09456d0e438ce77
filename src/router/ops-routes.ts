// Operational routes of `kvrouter serve`: model list, health, liveness, readiness, metrics, reload.
import { type ModelRuntime, roleOf } from './models.js';
import type { InstanceRuntime } from '../proxy/forward.js';
import type { Hono } from 'hono';
import { json } from '../api/indexer-routes.js';
import type { SharedRoutes } from '../api/shared-routes.js';
import type { RouterConfig } from '../config/schema.js';
import type { ReloadResult } from './reload.js';
import { isReady, type RouterRuntime } from './runtime.js';

/** The engine's own last scraped load (engine_metrics.scrape), summed over ranks; null without a fresh scrape. */
export function engineLoadOf(
  rt: RouterRuntime,
  id: string,
  dpSize: number,
): { running: number; waiting: number; kv_usage: number | null; age_ms: number } | null {
  const c = rt.deps.cfg.engine_metrics;
  if (!c.scrape) return null;
  let out: { running: number; waiting: number; kv_usage: number | null; age_ms: number } | null = null;
  for (let r = 0; r < dpSize; r++) {
    const l = rt.engineLoads.get(id, r, rt.now(), c.stale_ms);
    if (!l) continue;
    out ??= { running: 0, waiting: 0, kv_usage: null, age_ms: 0 };
    out.running += l.running;
    out.waiting += l.waiting;
    out.kv_usage = l.kvUsage === null ? out.kv_usage : Math.max(out.kv_usage ?? 0, l.kvUsage);
    out.age_ms = Math.max(out.age_ms, rt.now() - l.at);
  }
  return out;
}

/** GET /v1/models: a tenant sees what it may use, by the chat path's own check (admin and anonymous: everything). */
function modelList(rt: RouterRuntime, headers: Headers) {
  const { deps } = rt;
  const p = deps.access.identify(Object.fromEntries(headers));
  const usable = (name: string) => p !== null && deps.access.modelAllowed(p, name);
  return {
    object: 'list',
    data: [
      ...[...deps.models.keys()].filter(usable).map((id) => ({
        id,
        object: 'model',
        created: 0,
        owned_by: 'kvrouter',
        root: deps.models.get(id)!.name,
        parent: null,
      })),
      // LoRA adapters as vLLM lists them: the adapter's id with its base model as parent.
      ...rt.adapters
        .list()
        .filter((a) => !deps.models.has(a.adapter) && usable(a.adapter))
        .map((a) => ({
          id: a.adapter,
          object: 'model',
          created: 0,
          owned_by: 'kvrouter',
          root: a.adapter,
          parent: a.model,
        })),
    ],
  };
}

/** One instance in GET /health: its health, its bookings' load summed over ranks, its adapters, its engine's own load. */
function instanceHealth(rt: RouterRuntime, m: ModelRuntime, i: InstanceRuntime) {
  const load = { active_prefill_tokens: 0, active_blocks: 0, active_requests: 0 };
  for (let r = 0; r < i.dpSize; r++) {
    const l = rt.scheduler.active.load(i.id, r);
    load.active_prefill_tokens += l.activePrefillTokens;
    load.active_blocks += l.activeBlocks;
    load.active_requests += l.activeRequests;
  }
  return {
    id: i.id,
    url: i.upstream.url,
    dp_size: i.dpSize,
    role: roleOf(m, i.id),
    ...i.health.snapshot(rt.now()),
    load,
    lora_adapters: rt.adapters.adaptersOf(i.id),
    engine_load: engineLoadOf(rt, i.id, i.dpSize),
  };
}

/** Closed-loop check in GET /health: per instance, judged responses and any open alarm with its cause. */
function hitPredictions(rt: RouterRuntime) {
  const v = rt.feedback.verifier;
  return {
    action: rt.deps.cfg.verification.enabled ? rt.deps.cfg.verification.action : 'off',
    alarms: v.alarms().map((a) => ({
      instance: a.instance,
      direction: a.direction,
      count: a.count,
      of: a.of,
      mean_predicted_tokens: a.meanPredicted,
      mean_reported_tokens: a.meanReported,
      since: a.since,
      message: a.message,
      distrusted: rt.scheduler.distrusted.has(a.instance),
    })),
    instances: Object.fromEntries(rt.all.flatMap((m) => m.instances.map((i) => [i.id, v.totals(i.id)]))),
    recent_actions: rt.feedback.actions.slice(-20),
  };
}

function healthBody(rt: RouterRuntime) {
  return {
    status: 'ok',
    models: rt.all.map((m) => ({ name: m.name, instances: m.instances.map((i) => instanceHealth(rt, m, i)) })),
    bookings: rt.scheduler.active.size,
    hit_predictions: hitPredictions(rt),
    index: rt.indexer.stats(),
    listeners: rt.listeners.statusCounts(),
  };
}

function readyBody(rt: RouterRuntime, ready: boolean) {
  return {
    ready,
    shutting_down: rt.shuttingDown,
    models: rt.all.map((m) => ({
      model: m.name,
      healthy_instances: m.instances.filter((i) => i.health.available(rt.now())).length,
      min_initial_instances: m.cfg.min_initial_instances,
    })),
    listeners: rt.listeners.statusCounts(),
    cluster: rt.cluster?.status() ?? null,
  };
}

export function mountOpsRoutes(
  app: Hono,
  rt: RouterRuntime,
  reload: (next?: RouterConfig) => Promise<ReloadResult>,
  shared: SharedRoutes,
): void {
  app.get('/v1/models', (c) => c.json(modelList(rt, c.req.raw.headers)));
  app.get('/health', (c) => json(c, healthBody(rt)));
  app.get('/live', (c) => (rt.shuttingDown ? c.json({ status: 'shutting down' }, 503) : c.json({ status: 'ok' })));
  app.get('/ready', (c) => {
    const ready = isReady(rt);
    return c.json(readyBody(rt, ready), ready ? 200 : 503);
  });
  app.get('/metrics', async (c) => c.body(await rt.prom.metrics(), 200, { 'content-type': rt.prom.contentType }));
  app.post(shared.replicated('/admin/reload'), async (c) => {
    const r = await reload();
    return json(
      c,
      {
        status: r.ok ? 'reloaded' : 'rejected',
        changes: r.changes,
        restart_required: r.restartRequired,
        errors: r.errors,
      },
      r.ok ? 200 : 400,
    );
  });
}
