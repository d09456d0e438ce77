// Disaggregated prefill/decode: the prefill leg around the proxy's decode leg. forward() decides,
// books and streams the decode leg; per attempt, the plan made here chooses remote or local
// prefill (src/disagg/protocol.ts), and a remote attempt runs its protocol's prefill leg
// (prefill-leg.ts, what both share): vLLM's before the decode request (disagg-vllm.ts: its
// kv_transfer_params go with it), SGLang's at the same time (disagg-sglang.ts: both carry one
// bootstrap room). Every prefill booking is freed exactly once, when its leg's response ends or fails.
import { OpenAIError } from '../api/openai.js';
import type { ModelConfig } from '../config/schema.js';
import { choosePath, type DisaggMode, type OpenAIBody, type PathReason } from '../disagg/protocol.js';
import type { NamespaceId } from '../indexer/namespace.js';
import type { Decision, RouteInput, Scheduler } from '../scheduler/scheduler.js';
import type { InstanceRuntime, LegPlan } from './forward.js';
import type { RequestTrace } from '../tracing/request-trace.js';
import { DEFAULT_POLICY, policySpec } from '../scheduler/policies/registry.js';
import { sglangProtocol } from './disagg-sglang.js';
import { vllmProtocol } from './disagg-vllm.js';
import { PrefillLegs } from './prefill-leg.js';

export { hostOf } from './disagg-sglang.js';

export type DisaggConfig = NonNullable<ModelConfig['disaggregation']>;
export const DEFAULT_DISAGG: DisaggConfig = {
  protocol: 'vllm',
  bypass: true,
  uncached_token_threshold: 1024,
  min_prompt_tokens: 0,
  prefill_fallback: 'local',
  prefill_timeout_ms: 60_000,
};

export interface DisaggObserver {
  /** Which path an attempt took and why. */
  disaggPath?(model: string, remote: boolean, reason: PathReason): void;
  /** A prefill leg failed (it is retried elsewhere, or the request falls back). */
  prefillFailed?(model: string, instance: string, why: string): void;
}

export interface DisaggJob {
  cfg: DisaggConfig;
  mode: DisaggMode;
  path: string;
  requestId: string;
  /** The body as the engines get it (model name and salt already applied). */
  body: OpenAIBody;
  ns: NamespaceId;
  route: Route;
  prefill: readonly InstanceRuntime[];
  /** A prefill instance's bootstrap port (sglang). */
  bootstrapPort: (instance: string) => number;
  speculativeTtlMs: number;
  maxRetries: number;
  /** The request's trace: each prefill leg is a client span, its context passed to the prefill engine. */
  trace?: RequestTrace | null;
}

export interface DisaggDeps {
  scheduler: Scheduler;
  now: () => number;
  rand?: () => number;
  observer?: DisaggObserver;
}

type Route = Omit<RouteInput, 'candidates' | 'exclude' | 'ns'>;

/**
 * The decode leg of a disaggregated model is priced as Dynamo prices decode workers: blocks of
 * decode memory held plus (overlap_weight x) the prompt blocks it would prefill itself, so load
 * spreads over the pool while a decode instance holding the prompt still wins its bypass. (The time
 * model would price a remote-prefilled request's decode by a prefill it does not run.)
 */
export function decodeLegRoute(route: Route): Route {
  return {
    ...route,
    weights: { ...route.weights, model: 'blocks', trackActiveBlocks: true },
    prefixAffinity: 0,
    loadBound: 0,
  };
}

/** The prefill leg is priced on prefill alone (it holds no decode); an admin's target names the decode leg. */
export function prefillLegRoute(route: Route): Route {
  return {
    ...route,
    policy: policySpec(route.policy).needs.target ? DEFAULT_POLICY : route.policy,
    target: null,
    weights: { ...route.weights, trackActiveBlocks: false },
  };
}

/** A model's eligible instances: decode and aggregated ones serve the decode leg, prefill ones the prefill leg. */
export function splitLegs(
  instances: readonly InstanceRuntime[],
  roles: ReadonlyMap<string, string>,
): { decodeSide: InstanceRuntime[]; prefill: InstanceRuntime[] } {
  const decodeSide: InstanceRuntime[] = [];
  const prefill: InstanceRuntime[] = [];
  for (const i of instances) (roles.get(i.id) === 'prefill' ? prefill : decodeSide).push(i);
  return { decodeSide, prefill };
}

/** Remote or local prefill for a decode leg's decision (the proxy's plan and the decision API ask alike). */
export function pathFor(
  cfg: DisaggConfig,
  mode: DisaggMode,
  d: Decision,
  prefillAvailable: boolean,
): { remote: boolean; reason: PathReason } {
  return choosePath({
    mode,
    isl: d.isl,
    uncachedOnDecode: Math.max(0, d.isl - d.chosen!.creditedBlocks * d.blockSize),
    bypass: cfg.bypass,
    uncachedThreshold: cfg.uncached_token_threshold,
    minPromptTokens: cfg.min_prompt_tokens,
    prefillAvailable,
  });
}

/**
 * `prefill_fallback`, one rule for the proxy and the decision API: a request whose path needs a
 * prefill leg (it is not bypassed, nor local by header) and cannot get one, because no prefill
 * instance is available (down, ejected) or every one tried failed, is refused with a 502 under
 * `fail` (returned here), and prefilled on the decode instance under `local` (null). Every prefill
 * instance being busy is an overload, not a missing leg: it goes local under either setting.
 */
export function noPrefillLeg(cfg: DisaggConfig, why: string): OpenAIError | null {
  return cfg.prefill_fallback === 'fail'
    ? new OpenAIError(502, `no prefill leg (prefill_fallback: fail): ${why}`, 'server_error')
    : null;
}

/** The plan factory forward() calls per attempt: local prefill, the fallback, or the protocol's remote leg. */
export function disaggPlanner(job: DisaggJob, deps: DisaggDeps): (d: Decision, attempt: number) => LegPlan {
  const legs = new PrefillLegs(
    job,
    deps,
    () => prefillLegRoute(job.route),
    (why) => noPrefillLeg(job.cfg, why),
  );
  const protocol = job.cfg.protocol === 'sglang' ? sglangProtocol(legs) : vllmProtocol(legs);
  return (d: Decision) => {
    const path = pathFor(job.cfg, job.mode, d, legs.available() || protocol.prefilled());
    // A prefill leg is needed and no prefill instance is left (down, ejected or failed): the configured fallback decides.
    if (!path.remote && path.reason === 'no_prefill_instance') {
      const why = legs.noneLeft();
      return { teachesRate: true, prepare: async () => legs.fallback(why) };
    }
    if (!path.remote) return { teachesRate: true, prepare: async () => legs.local(path.reason) };
    deps.observer?.disaggPath?.(legs.model, true, path.reason);
    return protocol.remote();
  };
}
