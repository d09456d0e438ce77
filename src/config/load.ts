// Load, override and validate the router configuration. Errors name the key path.
import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { type ConfigError, validate } from '../common/schema-dsl.js';
import { type RouterConfig, ROUTER_SCHEMA, ROUTING_KEYS, type RoutingConfig, type ModelConfig } from './schema.js';
import { policySpec } from '../scheduler/policies/registry.js';

export class ConfigInvalidError extends Error {
  constructor(
    readonly source: string,
    readonly errors: ConfigError[],
  ) {
    super(`${source}: invalid configuration\n${errors.map((e) => `  ${e.path}: ${e.message}`).join('\n')}`);
  }
}

/** Set `a.b.c` (list items as `models.0.block_size`) to a YAML scalar. */
export function setPath(root: Record<string, unknown>, path: string, raw: string): void {
  const parts = path.split('.').filter(Boolean);
  let cur: Record<string, unknown> | unknown[] = root;
  for (let i = 0; i < parts.length - 1; i++) {
    const k = parts[i];
    const next = (cur as Record<string, unknown>)[k];
    if (next === undefined || next === null || typeof next !== 'object') {
      const created = /^\d+$/.test(parts[i + 1]) ? [] : {};
      (cur as Record<string, unknown>)[k] = created;
      cur = created;
    } else cur = next as Record<string, unknown>;
  }
  let value: unknown = raw;
  try {
    value = parseYaml(raw);
  } catch {
    value = raw;
  }
  (cur as Record<string, unknown>)[parts[parts.length - 1]] = value;
}

/**
 * Environment overrides: KVROUTER_<PATH> with `__` between keys, e.g. KVROUTER_SERVER__PORT=9000,
 * KVROUTER_ROUTING__OVERLAP_WEIGHT=2, KVROUTER_MODELS__0__BLOCK_SIZE=64.
 */
export function envOverrides(env: NodeJS.ProcessEnv): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  for (const [k, v] of Object.entries(env)) {
    if (!k.startsWith('KVROUTER_') || v === undefined || k === 'KVROUTER_CONFIG' || k === 'KVROUTER_ADMIN_TOKEN')
      continue;
    out.push([k.slice('KVROUTER_'.length).toLowerCase().split('__').join('.'), v]);
  }
  return out;
}

export function validateConfig(raw: unknown, source: string): RouterConfig {
  const errors: ConfigError[] = [];
  const cfg = validate(ROUTER_SCHEMA, raw, '', errors) as RouterConfig;
  if (errors.length === 0) crossCheck(cfg, errors);
  if (errors.length) throw new ConfigInvalidError(source, errors);
  return cfg;
}

function crossCheck(cfg: RouterConfig, errors: ConfigError[]): void {
  const names = new Map<string, string>();
  cfg.models.forEach((m, i) => {
    for (const n of [m.name, ...m.aliases]) {
      if (names.has(n))
        errors.push({ path: `models[${i}]`, message: `model name "${n}" is already used by ${names.get(n)}` });
      names.set(n, `models[${i}]`);
    }
    if (!m.tokenizer.package && !m.tokenizer.path)
      errors.push({ path: `models[${i}].tokenizer`, message: 'needs `package` or `path`' });
    if (m.tokenizer.package && m.tokenizer.path)
      errors.push({ path: `models[${i}].tokenizer`, message: 'give `package` or `path`, not both' });
    const ids = new Set<string>();
    m.instances.forEach((inst, j) => {
      if (ids.has(inst.id))
        errors.push({ path: `models[${i}].instances[${j}].id`, message: `duplicate instance id "${inst.id}"` });
      ids.add(inst.id);
    });
    const prefill = m.instances.filter((x) => x.role === 'prefill').length;
    if (prefill > 0 && prefill === m.instances.length) {
      errors.push({
        path: `models[${i}].instances`,
        message: 'has only prefill instances: a disaggregated model needs decode (or both) instances to stream from',
      });
    }
    if (m.disaggregation && prefill === 0) {
      errors.push({ path: `models[${i}].disaggregation`, message: 'is set but no instance has role prefill' });
    }
    const policy = m.routing?.policy;
    if (policy !== undefined && policySpec(policy).needs.engineMetrics && !cfg.engine_metrics.scrape)
      errors.push(needsScrape(`models[${i}].routing.policy`, policy));
    if (m.instances.length === 0 && cfg.engine_sim.count === 0) {
      errors.push({
        path: `models[${i}].instances`,
        message: 'is empty and engine_sim.count is 0: nothing would serve this model',
      });
    }
  });
  if (policySpec(cfg.routing.policy).needs.engineMetrics && !cfg.engine_metrics.scrape)
    errors.push(needsScrape('routing.policy', cfg.routing.policy));
  const tids = new Set<string>();
  cfg.auth.tenants.forEach((t, i) => {
    if (tids.has(t.id)) errors.push({ path: `auth.tenants[${i}].id`, message: `duplicate tenant id "${t.id}"` });
    tids.add(t.id);
  });
  if (cfg.auth.admin_token !== undefined && cfg.auth.admin_token.length < 16)
    errors.push({ path: 'auth.admin_token', message: 'must be at least 16 characters' });
  if (cfg.health.ejection_max_ms < cfg.health.ejection_base_ms)
    errors.push({ path: 'health.ejection_max_ms', message: 'must be >= health.ejection_base_ms' });
}

/** A policy that scores the engines' own gauges (GIE's queue and KV utilisation) cannot run blind. */
function needsScrape(path: string, policy: string): ConfigError {
  return { path, message: `${policy} reads the engines' queue length and KV usage: set engine_metrics.scrape: true` };
}

export interface LoadOptions {
  /** `key.path=value` overrides from the command line (applied after the environment). */
  set?: string[];
  env?: NodeJS.ProcessEnv;
}

export function loadConfigFile(file: string, opts: LoadOptions = {}): RouterConfig {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new ConfigInvalidError(file, [{ path: '(file)', message: (err as Error).message }]);
  }
  return loadConfigText(text, file, opts);
}

export function loadConfigText(text: string, source: string, opts: LoadOptions = {}): RouterConfig {
  let raw: unknown;
  try {
    raw = parseYaml(text) ?? {};
  } catch (err) {
    throw new ConfigInvalidError(source, [{ path: '(yaml)', message: (err as Error).message.split('\n')[0] }]);
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw))
    throw new ConfigInvalidError(source, [{ path: '(root)', message: 'must be a mapping' }]);
  for (const [p, v] of envOverrides(opts.env ?? {})) setPath(raw as Record<string, unknown>, p, v);
  // The admin token is taken verbatim (never parsed as YAML) and preferably from the environment.
  const adminToken = opts.env?.KVROUTER_ADMIN_TOKEN;
  if (adminToken) {
    const r = raw as Record<string, unknown>;
    const auth = (r.auth && typeof r.auth === 'object' ? r.auth : (r.auth = {})) as Record<string, unknown>;
    auth.admin_token = adminToken;
  }
  for (const s of opts.set ?? []) {
    const eq = s.indexOf('=');
    if (eq <= 0)
      throw new ConfigInvalidError(source, [{ path: '(--set)', message: `expected key.path=value, got "${s}"` }]);
    setPath(raw as Record<string, unknown>, s.slice(0, eq), s.slice(eq + 1));
  }
  return validateConfig(raw, source);
}

/** Model routing = global defaults + the model's overrides. */
export function effectiveRouting(cfg: RouterConfig, model: ModelConfig): RoutingConfig {
  const g = cfg.routing as Record<string, unknown>;
  const o = (model.routing ?? {}) as Record<string, unknown>;
  const out: Record<string, unknown> = {};
  for (const k of ROUTING_KEYS) out[k] = o[k] ?? g[k];
  out.medium_weights = { ...cfg.routing.medium_weights, ...(model.routing?.medium_weights ?? {}) };
  return out as RoutingConfig;
}
