// Runtime view of the configured models: tokenizer, routing defaults and instance pools.
import type { ModelConfig, RouterConfig, RoutingConfig } from '../config/schema.js';
import { effectiveRouting } from '../config/load.js';
import { InstanceHealth } from '../proxy/health.js';
import type { InstanceRuntime } from '../proxy/forward.js';
import { createUpstream } from '../proxy/upstreams.js';
import { loadTokenizer, type PromptTokenizer } from '../tokenizer/index.js';

export interface ModelRuntime {
  readonly name: string;
  readonly cfg: ModelConfig;
  readonly routing: RoutingConfig;
  readonly tokenizer: PromptTokenizer;
  readonly instances: InstanceRuntime[];
}

export async function buildModels(cfg: RouterConfig): Promise<Map<string, ModelRuntime>> {
  const byName = new Map<string, ModelRuntime>();
  const tokenizers = new Map<string, Promise<PromptTokenizer>>();
  for (const m of cfg.models) {
    const key = m.tokenizer.package ? `pkg:${m.tokenizer.package}` : `dir:${m.tokenizer.path}`;
    if (!tokenizers.has(key)) tokenizers.set(key, loadTokenizer(m.tokenizer));
    const tokenizer = await tokenizers.get(key)!;
    const instances: InstanceRuntime[] = m.instances.map((i) => ({
      id: i.id,
      dpSize: i.dp_size,
      upstream: createUpstream(i.id, i.url, {
        connectTimeoutMs: cfg.proxy.connect_timeout_ms,
        headersTimeoutMs: cfg.proxy.headers_timeout_ms,
        bodyTimeoutMs: cfg.proxy.body_timeout_ms,
        connections: cfg.proxy.connections,
      }),
      health: new InstanceHealth({ failureThreshold: cfg.health.failure_threshold, ejectionBaseMs: cfg.health.ejection_base_ms, ejectionMaxMs: cfg.health.ejection_max_ms }),
    }));
    const rt: ModelRuntime = { name: m.name, cfg: m, routing: effectiveRouting(cfg, m), tokenizer, instances };
    for (const n of [m.name, ...m.aliases]) byName.set(n, rt);
  }
  return byName;
}

/** Distinct model runtimes (the map holds one entry per name and alias). */
export function uniqueModels(models: Map<string, ModelRuntime>): ModelRuntime[] {
  return [...new Set(models.values())];
}
