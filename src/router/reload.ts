// Hot reload: a new config is diffed against the running one and applied without dropping
// in-flight requests. Keys only a restart can change keep their running values (and are reported).
import { Access } from '../auth/access.js';
import { ConfigInvalidError, loadConfigFile, type LoadOptions } from '../config/load.js';
import type { RouterConfig } from '../config/schema.js';
import { fillEngineInstances } from './engines.js';
import { keepsInstance, reconcileModels } from './models.js';
import type { InstanceRuntime } from '../proxy/forward.js';
import { reconcileRegistrations } from './registrations.js';
import { checkAuth, feedbackOptions, indexInstances, type RouterRuntime } from './runtime.js';

export interface ReloadResult {
  ok: boolean;
  /** What changed (instances added/removed, settings). */
  changes: string[];
  /** Keys that changed in the file but only take effect after a restart. */
  restartRequired: string[];
  errors: Array<{ path: string; message: string }>;
}

const RESTART_ONLY: ReadonlyArray<[string, (c: RouterConfig) => unknown]> = [
  ['server.host', (c) => c.server.host],
  ['server.port', (c) => c.server.port],
  ['server.headers_timeout_ms', (c) => c.server.headers_timeout_ms],
  ['server.request_timeout_ms', (c) => c.server.request_timeout_ms],
  ['server.keep_alive_timeout_ms', (c) => c.server.keep_alive_timeout_ms],
  ['server.max_connections', (c) => c.server.max_connections],
  // The serve --workers primary reads it once, and tells each process it starts.
  ['server.stall_timeout_ms', (c) => c.server.stall_timeout_ms],
  ['engine_sim', (c) => JSON.stringify(c.engine_sim)],
  ['hashing.seed', (c) => c.hashing.seed],
  ['cluster', (c) => JSON.stringify(c.cluster)],
  ['kv_events', (c) => JSON.stringify(c.kv_events)],
  // The tracer is made once, at start (runtime.ts).
  ['tracing', (c) => JSON.stringify(c.tracing)],
];

/** Sections whose change a reload applies as a whole, named in its changes (routing and auth are named below). */
const APPLIED_SECTIONS = ['health', 'engine_metrics', 'lora', 'verification', 'epp'] as const;

/** Keys only a restart changes keep their running values (RESTART_ONLY reports them). */
function keepRestartOnly(cur: RouterConfig, next: RouterConfig): void {
  const {
    host,
    port,
    headers_timeout_ms,
    request_timeout_ms,
    keep_alive_timeout_ms,
    max_connections,
    stall_timeout_ms,
  } = cur.server;
  next.server = {
    ...next.server,
    host,
    port,
    headers_timeout_ms,
    request_timeout_ms,
    keep_alive_timeout_ms,
    max_connections,
    stall_timeout_ms,
  };
  next.engine_sim = cur.engine_sim;
  next.hashing = cur.hashing;
  next.tracing = cur.tracing;
}

/** Forget a removed instance everywhere (index, bookings, checks, adapters, load); its pool closes once drained. */
function dropInstance(rt: RouterRuntime, i: InstanceRuntime): string {
  rt.writer.purgeInstance({ instance: i.id });
  const freed = rt.scheduler.dropInstance(i.id);
  rt.feedback.forget(i.id);
  rt.adapters.forget(i.id);
  rt.engineLoads.drop(i.id);
  void i.upstream.pool.close().catch(() => undefined); // waits for its in-flight requests
  return `removed instance ${i.id}${freed ? ` (released ${freed} booking(s))` : ''}`;
}

/** Every setting that took effect, named (a raised shutdown grace, say, is not 'no changes'). */
function settingChanges(cur: RouterConfig, next: RouterConfig, renewedPools: number): string[] {
  const changes: string[] = [];
  if (
    JSON.stringify(cur.routing) !== JSON.stringify(next.routing) ||
    JSON.stringify(cur.models.map((m) => m.routing)) !== JSON.stringify(next.models.map((m) => m.routing))
  )
    changes.push('routing settings');
  if (JSON.stringify(cur.auth) !== JSON.stringify(next.auth)) changes.push('auth settings');
  // Every other setting that took effect is named too (a raised shutdown grace, say, is not 'no changes').
  for (const k of Object.keys(next.server) as Array<keyof RouterConfig['server']>)
    if (cur.server[k] !== next.server[k]) changes.push(`server.${k}`);
  if (JSON.stringify(cur.proxy) !== JSON.stringify(next.proxy))
    changes.push(`proxy settings${renewedPools ? ` (new connection pools for ${renewedPools} instance(s))` : ''}`);
  for (const s of APPLIED_SECTIONS)
    if (JSON.stringify(cur[s]) !== JSON.stringify(next[s])) changes.push(`${s} settings`);
  const modelSettings = (c: RouterConfig) =>
    JSON.stringify(c.models.map(({ instances: _i, routing: _r, ...rest }) => rest));
  if (modelSettings(cur) !== modelSettings(next)) changes.push('model settings');
  // A kept instance's own settings (role, adapters, KV events...); a new URL or dp_size made it a new instance above.
  const instancesOf = (c: RouterConfig) => new Map(c.models.flatMap((m) => m.instances.map((i) => [i.id, i] as const)));
  const before = instancesOf(cur);
  for (const [id, i] of instancesOf(next)) {
    const was = before.get(id);
    if (was && keepsInstance(was.url, was.dp_size, i) && JSON.stringify(was) !== JSON.stringify(i))
      changes.push(`instance ${id} settings`);
  }
  return changes;
}

async function applyConfig(rt: RouterRuntime, next: RouterConfig): Promise<ReloadResult> {
  const { deps, now, writer } = rt;
  const cur = deps.cfg;
  fillEngineInstances(next, rt.engineRefs);
  const restartRequired = RESTART_ONLY.filter(([, get]) => get(cur) !== get(next)).map(([k]) => k);
  keepRestartOnly(cur, next);
  const access = new Access({ admin_token: next.auth.admin_token, tenants: next.auth.tenants }, now, deps.access.usage);
  try {
    checkAuth(next, access);
  } catch (err) {
    return { ok: false, changes: [], restartRequired, errors: [{ path: 'auth', message: (err as Error).message }] };
  }
  next.cluster = cur.cluster;
  const r = await reconcileModels(next, { byName: deps.models, all: rt.all }, rt.onHealth, now);
  if (rt.shuttingDown) {
    // Closing while the tokenizers loaded: the listeners may be gone; nothing is changed.
    r.discard();
    return {
      ok: false,
      changes: [],
      restartRequired,
      errors: [{ path: '(reload)', message: 'the router is shutting down' }],
    };
  }
  let regs: Awaited<ReturnType<typeof reconcileRegistrations>>;
  try {
    regs = rt.relayed
      ? { removed: [], added: [] }
      : await reconcileRegistrations(next, rt.ownedRegs, rt.registry, rt.listeners, now());
  } catch (err) {
    r.discard();
    throw err;
  }
  const changes: string[] = [];
  for (const spec of regs.removed) writer.purge({ backend: spec.backendId, dpRank: spec.dpRank, tenant: spec.tenant });
  // Swap: new requests see the new config from here on; in-flight ones keep what they hold.
  rt.all = r.all;
  deps.cfg = next;
  deps.models = r.byName;
  deps.access = access;
  rt.queue.setMaxSize(next.routing.busy.queue_size);
  rt.feedback.configure(feedbackOptions(next));
  if (!next.lora.discover) rt.adapters.clearDiscovered();
  for (const i of r.removedInstances) changes.push(dropInstance(rt, i));
  const renewed = r.applyToKept();
  for (const u of renewed) void u.pool.close().catch(() => undefined); // the same
  for (const i of r.addedInstances) changes.push(`added instance ${i.id}`);
  for (const k of regs.added) changes.push(`listening to KV events of ${k}`);
  indexInstances(rt);
  for (const t of r.unusedTokenizers) void t.close();
  changes.push(...settingChanges(cur, next, renewed.length));
  rt.queue.notify();
  return { ok: true, changes, restartRequired, errors: [] };
}

/**
 * reload(next?): apply `next`, or re-read the config file. Reloads run one at a time; every outcome
 * is logged, a rejected one with each bad key (the running config stays).
 */
export function createReloader(
  rt: RouterRuntime,
  source: { configFile?: string; loadOptions?: LoadOptions },
): (next?: RouterConfig) => Promise<ReloadResult> {
  let reloading: Promise<unknown> = Promise.resolve();
  return (next) => {
    const run = async (): Promise<ReloadResult> => {
      let res: ReloadResult;
      let cfg = next ? structuredClone(next) : undefined;
      if (!cfg && !source.configFile)
        res = {
          ok: false,
          changes: [],
          restartRequired: [],
          errors: [{ path: '(file)', message: 'the router was not started from a file' }],
        };
      else {
        try {
          cfg ??= loadConfigFile(source.configFile!, source.loadOptions);
          res = await applyConfig(rt, cfg);
        } catch (err) {
          // Anything else that fails before the swap (a tokenizer that does not load) keeps the running config too.
          res = {
            ok: false,
            changes: [],
            restartRequired: [],
            errors:
              err instanceof ConfigInvalidError ? err.errors : [{ path: '(reload)', message: (err as Error).message }],
          };
        }
      }
      rt.log(
        res.ok
          ? `config reloaded: ${res.changes.join('; ') || 'no changes'}${res.restartRequired.length ? ` (needs a restart: ${res.restartRequired.join(', ')})` : ''}`
          : `config reload rejected, keeping the running config: ${res.errors.map((e) => `${e.path}: ${e.message}`).join('; ')}`,
      );
      return res;
    };
    const p = reloading.then(run, run);
    reloading = p.catch(() => undefined);
    return p;
  };
}
