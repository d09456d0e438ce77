// Every routing policy, once. The config schema, the router and the benchmarks read this list;
// nothing outside scheduler/ knows a policy by name. Adding a policy: one file beside this one
// (a `definePolicy` literal), one line below, its unit test in test/unit/. A peer's algorithm also
// names its source (`peer`) and goes in docs/benchmarks.md's table of peer baselines.
import { aibrix } from './aibrix.js';
import { approx } from './approx.js';
import { direct } from './direct.js';
import { dynamo } from './dynamo.js';
import { gie } from './gie.js';
import { kv } from './kv.js';
import { leastLoaded } from './least-loaded.js';
import { llmD } from './llm-d.js';
import { llmDSticky } from './llm-d-sticky.js';
import { powerOfTwo } from './power-of-two.js';
import { random } from './random.js';
import { roundRobin } from './round-robin.js';
import { session } from './session.js';
import { sglang } from './sglang.js';
import type { PolicySpec } from './types.js';
import { vllmRouter } from './vllm-router.js';

/** kvrouter's own policies, then the peers' default algorithms reimplemented as baselines (`peer` set). */
export const POLICIES = [
  kv,
  approx,
  roundRobin,
  random,
  leastLoaded,
  powerOfTwo,
  session,
  direct,
  dynamo,
  sglang,
  gie,
  llmD,
  llmDSticky,
  aibrix,
  vllmRouter,
] as const;

export type PolicyName = (typeof POLICIES)[number]['name'];

export const POLICY_NAMES: readonly PolicyName[] = POLICIES.map((p) => p.name);

export const DEFAULT_POLICY: PolicyName = 'kv';

/** The policy an x-kvrouter-target header selects when the request names no policy. */
export const TARGET_POLICY: PolicyName = 'direct';

const BY_NAME: ReadonlyMap<string, PolicySpec<PolicyName>> = new Map(POLICIES.map((p) => [p.name, p]));

export function isPolicy(name: string): name is PolicyName {
  return BY_NAME.has(name);
}

export function policySpec(name: PolicyName): PolicySpec<PolicyName> {
  const p = BY_NAME.get(name);
  if (!p) throw new Error(`unknown policy ${name}`);
  return p;
}

/**
 * The policy that serves a request: the chosen one, or its fallback (transitively) while the
 * request lacks an input it needs (no tokens: content the router cannot tokenize).
 */
export function servingPolicy(name: PolicyName, has: { tokens: boolean }): PolicyName {
  let p = policySpec(name);
  for (let hops = 0; p.needs.tokens && !has.tokens && p.fallback !== null && hops < POLICIES.length; hops++)
    p = policySpec(p.fallback as PolicyName);
  return p.name;
}

/** How long the routed prompt's blocks stay speculatively in the index: the peer's own lifetime, else the routing key's. */
export function predictionTtlMs(
  name: PolicyName,
  routing: Readonly<Record<PolicySpec['predictionTtlKey'], number>>,
): number {
  const p = policySpec(name);
  return p.predictionTtlMs ?? routing[p.predictionTtlKey];
}

/** Whether the policy reads the index: its KV events, or the router's own predictions inserted there. */
export function readsIndex(p: Pick<PolicySpec, 'needs'>): boolean {
  return p.needs.index || p.needs.predictions;
}

/** Whether a decision by this policy predicts cache hits (what the closed-loop check can judge). */
export function predictsHits(name: PolicyName): boolean {
  return readsIndex(policySpec(name));
}

/** The configuration reference's line for `routing.policy`. */
export function policiesDoc(): string {
  return POLICIES.map((p) => `${p.name} (${p.summary})`).join(', ');
}
