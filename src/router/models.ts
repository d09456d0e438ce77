// Runtime view of the configured models: tokenizer, routing defaults and instance pools.
// `reconcileModels` builds it from a config, reusing what an earlier config already built
// (instances keep their health and pools, tokenizers are not reloaded) so a hot reload only
// touches what changed.
import type { InstanceConfig, ModelConfig, RouterConfig, RoutingConfig } from '../config/schema.js';
import { effectiveRouting } from '../config/load.js';
import { InstanceHealth } from '../proxy/health.js';
import type { InstanceRuntime } from '../proxy/forward.js';
import type { HealthEvent } from '../proxy/health-interceptor.js';
import { createUpstream, sameUpstreamOptions, type Upstream } from '../proxy/upstreams.js';
import { loadTokenizer, type PromptTokenizer } from '../tokenizer/index.js';

export interface ModelRuntime {
  readonly name: string;
  readonly cfg: ModelConfig;
  readonly routing: RoutingConfig;
  readonly tokenizer: PromptTokenizer;
  readonly instances: InstanceRuntime[];
  /** Each instance's serving role, from the config (absent: both). */
  readonly roles: ReadonlyMap<string, InstanceRole>;
  /** The model has a prefill pool: its requests may take two legs. */
  readonly disaggregated: boolean;
}

export type InstanceRole = InstanceConfig['role'];

export interface ModelSet {
  /** By model name and alias. */
  byName: Map<string, ModelRuntime>;
  all: ModelRuntime[];
}

export interface Reconciled extends ModelSet {
  addedInstances: InstanceRuntime[];
  removedInstances: InstanceRuntime[];
  /**
   * Gives the kept instances the new health thresholds and, when the proxy settings changed, a new
   * pool; returns the pools replaced, for the caller to close (in-flight requests finish first).
   * Nothing is changed before this runs, at the caller's swap: a reload that fails on the way changes
   * no instance.
   */
  applyToKept(): Upstream[];
  /** The config is not used after all (a later step of the reload failed): close what it opened. */
  discard(): void;
  unusedTokenizers: PromptTokenizer[];
}

const tokenizerKey = (m: ModelConfig) =>
  m.tokenizer.package ? `pkg:${m.tokenizer.package}` : `dir:${m.tokenizer.path}`;
/** A reload keeps an instance (its bookings, health and pool) when its URL and DP size stay the same. */
export const keepsInstance = (url: string, dpSize: number, c: InstanceConfig): boolean =>
  url === c.url && dpSize === c.dp_size;
const sameInstance = (rt: InstanceRuntime, c: InstanceConfig) => keepsInstance(rt.upstream.url, rt.dpSize, c);

/** An instance's serving role (both unless the config says prefill or decode). */
export function roleOf(m: ModelRuntime, instance: string): InstanceRole {
  return m.roles.get(instance) ?? 'both';
}

/** Hears every health change of every instance (metrics, the capacity queue). */
export type HealthListener = (instance: string, event: HealthEvent) => void;

function healthOptionsOf(cfg: RouterConfig) {
  return {
    failureThreshold: cfg.health.failure_threshold,
    ejectionBaseMs: cfg.health.ejection_base_ms,
    ejectionMaxMs: cfg.health.ejection_max_ms,
  };
}

function upstreamOptionsOf(cfg: RouterConfig) {
  return {
    connectTimeoutMs: cfg.proxy.connect_timeout_ms,
    headersTimeoutMs: cfg.proxy.headers_timeout_ms,
    bodyTimeoutMs: cfg.proxy.body_timeout_ms,
    connections: cfg.proxy.connections,
  };
}

/** What reconcileModels shares with each instance it reconciles: the new options, the old instances, what it kept and added. */
interface InstanceBuild {
  healthOptions: ReturnType<typeof healthOptionsOf>;
  upstreamOptions: ReturnType<typeof upstreamOptionsOf>;
  onHealth: HealthListener;
  now: () => number;
  oldInst: ReadonlyMap<string, InstanceRuntime>;
  /** Kept instances, and the pool each takes at the swap when the proxy settings changed (null: its own). */
  kept: Map<InstanceRuntime, Upstream | null>;
  added: InstanceRuntime[];
}

/** The running instance kept (noted in `kept`, with a new pool when the proxy settings changed), or a new one (noted in `added`). */
function reconcileInstance(c: InstanceConfig, b: InstanceBuild): InstanceRuntime {
  const { upstreamOptions, onHealth, now } = b;
  const old = b.oldInst.get(c.id);
  if (old && sameInstance(old, c)) {
    // A new pool is made now (it opens no connection until used), so the swap itself cannot fail.
    b.kept.set(
      old,
      sameUpstreamOptions(old.upstream.options, upstreamOptions)
        ? null
        : createUpstream(c.id, c.url, upstreamOptions, {
            health: old.health,
            now,
            onChange: (ev) => onHealth(c.id, ev),
          }),
    );
    return old;
  }
  const health = new InstanceHealth(b.healthOptions);
  const rt: InstanceRuntime = {
    id: c.id,
    dpSize: c.dp_size,
    upstream: createUpstream(c.id, c.url, upstreamOptions, { health, now, onChange: (ev) => onHealth(c.id, ev) }),
    health,
  };
  b.added.push(rt);
  return rt;
}

export async function reconcileModels(
  cfg: RouterConfig,
  previous: ModelSet | null,
  onHealth: HealthListener = () => {},
  now: () => number = Date.now,
): Promise<Reconciled> {
  const oldTok = new Map<string, PromptTokenizer>();
  const oldInst = new Map<string, InstanceRuntime>();
  for (const m of previous?.all ?? []) {
    oldTok.set(tokenizerKey(m.cfg), m.tokenizer);
    for (const i of m.instances) oldInst.set(i.id, i);
  }
  const tokenizers = new Map<string, Promise<PromptTokenizer>>();
  const byName = new Map<string, ModelRuntime>();
  const all: ModelRuntime[] = [];
  const added: InstanceRuntime[] = [];
  /** Kept instances, and the pool each takes at the swap when the proxy settings changed (null: its own). */
  const kept = new Map<InstanceRuntime, Upstream | null>();
  /** Nothing of this config is used (it failed here or later): its new pools and tokenizers go. */
  const discard = () => {
    for (const i of added) void i.upstream.pool.close().catch(() => undefined);
    for (const u of kept.values()) if (u) void u.pool.close().catch(() => undefined);
    for (const [key, t] of tokenizers)
      if (!oldTok.has(key))
        void t.then(
          (tok) => tok.close(),
          () => undefined,
        );
  };
  const healthOptions = healthOptionsOf(cfg);
  const build: InstanceBuild = {
    healthOptions,
    upstreamOptions: upstreamOptionsOf(cfg),
    onHealth,
    now,
    oldInst,
    kept,
    added,
  };
  try {
    for (const m of cfg.models) {
      const key = tokenizerKey(m);
      if (!tokenizers.has(key))
        tokenizers.set(key, oldTok.has(key) ? Promise.resolve(oldTok.get(key)!) : loadTokenizer(m.tokenizer));
      const tokenizer = await tokenizers.get(key)!;
      const instances = m.instances.map((c) => reconcileInstance(c, build));
      const roles = new Map(m.instances.map((i) => [i.id, i.role]));
      const disaggregated = m.instances.some((i) => i.role === 'prefill');
      const rt: ModelRuntime = {
        name: m.name,
        cfg: m,
        routing: effectiveRouting(cfg, m),
        tokenizer,
        instances,
        roles,
        disaggregated,
      };
      all.push(rt);
      for (const n of [m.name, ...m.aliases]) byName.set(n, rt);
    }
  } catch (err) {
    discard();
    throw err;
  }
  const usedTok = new Set(all.map((m) => m.tokenizer));
  return {
    byName,
    all,
    addedInstances: added,
    removedInstances: [...oldInst.values()].filter((i) => !kept.has(i)),
    discard,
    applyToKept() {
      const replaced: Upstream[] = [];
      for (const [old, upstream] of kept) {
        old.health.configure(healthOptions);
        if (!upstream) continue;
        replaced.push(old.upstream);
        old.upstream = upstream;
      }
      return replaced;
    },
    unusedTokenizers: [...new Set(oldTok.values())].filter((t) => !usedTok.has(t)),
  };
}
