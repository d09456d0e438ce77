// A prepared request's routing config -> the scheduler's RouteInput (without candidates). Pure:
// the proxy path, /debug/route, /v1/route, the gateway picker and the fleet simulator
// (src/fleet-sim) all build their RouteInput here, so they route alike.
import type { RouterConfig } from '../config/schema.js';
import type { EngineLoad } from '../engine-load/load-view.js';
import type { NamespaceId } from '../indexer/namespace.js';
import type { RouteInput } from '../scheduler/scheduler.js';
import { predictionTtlMs, servingPolicy } from '../scheduler/policies/registry.js';
import type { RequestText } from '../scheduler/policies/types.js';
import type { RequestRouting } from './overrides.js';

/** What routing reads of a prepared request (`PreparedRoute` is one): plain data, no HTTP objects. */
export interface RouteSource {
  model: { name: string; cfg: { block_size: number } };
  /** The LoRA adapter the request names, or null for the base model. */
  adapter: string | null;
  /** Prompt token ids, or null when the router cannot reproduce the engine's prompt. */
  tokens: Uint32Array | null;
  routing: RequestRouting;
  cacheSalt: string | null;
  sessionKey: string | null;
  /** The request text, for policies that declare `needs.text` (null when there is none). */
  text: RequestText | null;
}

/** The engines' scraped load (`EngineLoadView.get`), read only when `engine_metrics.scrape` is on. */
export interface EngineLoadSource {
  engineLoads: { get(instance: string, dpRank: number, now: number, staleMs: number): EngineLoad | null };
  now: () => number;
}

export interface RouteFields {
  ns: NamespaceId;
  route: Omit<RouteInput, 'candidates' | 'exclude' | 'ns'>;
}

export function routeFields(p: RouteSource, cfg: RouterConfig, deps: EngineLoadSource): RouteFields {
  const r = p.routing;
  // Without tokens (content the router cannot tokenize) a policy that needs them gives way to its fallback.
  const policy = servingPolicy(r.policy, { tokens: p.tokens !== null });
  return {
    ns: {
      model: p.model.name,
      blockSize: p.model.cfg.block_size,
      loraName: p.adapter,
      salt: p.cacheSalt,
      tenant: 'default',
    },
    route: {
      tokens: p.tokens ?? new Uint32Array(0),
      policy,
      weights: {
        model: r.cost_model,
        overlapWeight: r.overlap_weight,
        medium: r.medium_weights,
        trackActiveBlocks: r.track_active_blocks,
        decodeInterference: r.decode_interference,
        decodeBlockMs: r.decode_block_ms,
        recomputeWeight: r.recompute_weight,
      },
      temperature: r.temperature,
      ratePrior: { tokensPerS: r.prefill_tokens_per_s, overheadMs: r.prefill_overhead_ms },
      // The slack is in milliseconds: only the time model's costs are.
      prefixAffinity: r.cost_model === 'time' ? r.prefix_affinity : 0,
      affinityBlocks: r.affinity_blocks,
      affinityAny: r.prefix_affinity_any,
      // Dynamo's block cost stays Dynamo's: the bound compares prefill times.
      loadBound: r.cost_model === 'time' ? r.load_bound : 0,
      loadBoundUnique: r.load_bound_unique,
      loadBoundNewSession: r.load_bound_new_session,
      recomputeWeightSaturated: r.cost_model === 'time' ? r.recompute_weight_saturated : 0,
      evictionAware: r.eviction_aware,
      adapter: p.adapter,
      adapterLoadMs: r.cost_model === 'time' ? cfg.lora.adapter_load_ms : 0,
      adapterWarmMs: cfg.lora.adapter_warm_ms,
      ...(cfg.engine_metrics.scrape
        ? {
            engineLoad: (instance: string, dpRank: number) =>
              deps.engineLoads.get(instance, dpRank, deps.now(), cfg.engine_metrics.stale_ms),
            engineWeights: {
              waiting: r.engine_waiting_weight,
              running: r.engine_running_weight,
              kvUsageMs: r.cost_model === 'time' ? r.engine_kv_usage_ms : 0,
            },
          }
        : {}),
      sessionKey: p.sessionKey,
      text: p.text,
      target: r.target,
      busy: {
        maxActivePrefillTokens: cfg.routing.busy.max_active_prefill_tokens,
        maxActiveBlocks: cfg.routing.busy.max_active_blocks,
      },
    },
  };
}

/** How long the routed prompt's blocks stay speculatively in the index (approx has nothing else). */
export function speculativeTtl(p: Pick<RouteSource, 'routing'>, route: { policy: RouteInput['policy'] }): number {
  return predictionTtlMs(route.policy, p.routing);
}
