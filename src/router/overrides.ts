// Per-request routing overrides from x-kvrouter-* headers: bounded, validated, optional.
import type { IncomingHttpHeaders } from 'node:http';
import { OpenAIError } from '../api/openai.js';
import type { RoutingConfig } from '../config/schema.js';
import { COST_MODELS } from '../scheduler/cost.js';
import { isPolicy, type PolicyName, policySpec, TARGET_POLICY } from '../scheduler/policies/registry.js';
import { DISAGG_MODES, type DisaggMode } from '../disagg/protocol.js';

export interface RequestRouting extends RoutingConfig {
  /** Instance for the direct policy. */
  target: string | null;
  disagg: DisaggMode;
}

const header = (h: IncomingHttpHeaders, name: string): string | undefined => {
  const v = h[name];
  return Array.isArray(v) ? v[0] : v;
};

function bounded(h: IncomingHttpHeaders, name: string, min: number, max: number): number | undefined {
  const raw = header(h, name);
  if (raw === undefined) return undefined;
  const n = Number(raw.trim());
  if (raw.trim() === '' || !Number.isFinite(n) || n < min || n > max) {
    throw new OpenAIError(
      400,
      `header ${name} must be a number in [${min}, ${max}], got "${raw}"`,
      'invalid_request_error',
      name,
    );
  }
  return n;
}

/** The numeric knobs a header may set, each bounded to [0, 100]. */
const NUMERIC_OVERRIDES: ReadonlyArray<
  [string, 'overlap_weight' | 'temperature' | 'decode_interference' | 'prefix_affinity' | 'load_bound']
> = [
  ['x-kvrouter-overlap-weight', 'overlap_weight'],
  ['x-kvrouter-temperature', 'temperature'],
  ['x-kvrouter-decode-interference', 'decode_interference'],
  ['x-kvrouter-prefix-affinity', 'prefix_affinity'],
  ['x-kvrouter-load-bound', 'load_bound'],
];

function oneOf<T extends string>(h: IncomingHttpHeaders, name: string, values: readonly T[]): T | undefined {
  const v = header(h, name);
  if (v === undefined || (values as readonly string[]).includes(v)) return v as T | undefined;
  throw new OpenAIError(
    400,
    `header ${name} must be one of ${values.join(', ')}, got "${v}"`,
    'invalid_request_error',
    name,
  );
}

/** x-kvrouter-medium-weights: "cpu=0.5,disk=0.1", each weight in [0, 1]. */
function mediumWeights(h: IncomingHttpHeaders): Array<['cpu' | 'disk' | 'shared', number]> {
  const mw = header(h, 'x-kvrouter-medium-weights');
  if (mw === undefined) return [];
  const out: Array<['cpu' | 'disk' | 'shared', number]> = [];
  for (const part of mw
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)) {
    const m = /^(cpu|disk|shared)\s*=\s*([0-9.eE+-]+)$/.exec(part);
    const v = m ? Number(m[2]) : NaN;
    if (!m || !Number.isFinite(v) || v < 0 || v > 1) {
      throw new OpenAIError(
        400,
        `header x-kvrouter-medium-weights: "${part}" is not cpu|disk|shared=<0..1> (e.g. "cpu=0.5,disk=0.1")`,
        'invalid_request_error',
        'x-kvrouter-medium-weights',
      );
    }
    out.push([m[1] as 'cpu' | 'disk' | 'shared', v]);
  }
  return out;
}

const OVERRIDE_HEADERS = [
  'x-kvrouter-overlap-weight',
  'x-kvrouter-temperature',
  'x-kvrouter-medium-weights',
  'x-kvrouter-policy',
  'x-kvrouter-target',
  'x-kvrouter-cost-model',
  'x-kvrouter-decode-interference',
  'x-kvrouter-prefix-affinity',
  'x-kvrouter-load-bound',
  'x-kvrouter-disagg',
];

/** A model's routing without overrides, built once per config object (frozen: shared by its requests). */
const plain = new WeakMap<RoutingConfig, RequestRouting>();

/** A model's routing without overrides (frozen, one per config object). */
function plainRouting(base: RoutingConfig): RequestRouting {
  let r = plain.get(base);
  if (!r)
    plain.set(
      base,
      (r = Object.freeze({
        target: null,
        disagg: 'auto' as const,
        ...base,
        medium_weights: Object.freeze({ ...base.medium_weights }),
      })),
    );
  return r;
}

/**
 * Apply the request's override headers to the model's routing (throws 400 on bad values). Headers
 * that only restate the configuration share the plain routing: a copy is made for a real change.
 */
export function applyOverrides(h: IncomingHttpHeaders, base: RoutingConfig, allowed: boolean): RequestRouting {
  // Most requests carry none: share one frozen copy instead of building it each time.
  if (!OVERRIDE_HEADERS.some((n) => h[n] !== undefined)) return plainRouting(base);
  const touched = OVERRIDE_HEADERS.filter((n) => header(h, n) !== undefined);
  if (touched.length === 0) return plainRouting(base);
  if (!allowed)
    throw new OpenAIError(
      400,
      `routing override headers are disabled on this router (${touched.join(', ')})`,
      'invalid_request_error',
      touched[0],
    );
  let copy: RequestRouting | null = null;
  // New keys before the spread (V8's fast path; the config has neither key: unknown keys are refused).
  const edit = (): RequestRouting =>
    (copy ??= { target: null, disagg: 'auto', ...base, medium_weights: { ...base.medium_weights } });
  const target = header(h, 'x-kvrouter-target');
  for (const [name, key] of NUMERIC_OVERRIDES) {
    const v = bounded(h, name, 0, 100);
    if (v !== undefined && v !== base[key]) edit()[key] = v;
  }
  const cm = oneOf(h, 'x-kvrouter-cost-model', COST_MODELS);
  if (cm !== undefined && cm !== base.cost_model) edit().cost_model = cm;
  for (const [medium, v] of mediumWeights(h))
    if (v !== (copy ?? base).medium_weights[medium]) edit().medium_weights[medium] = v;
  const dm = oneOf(h, 'x-kvrouter-disagg', DISAGG_MODES);
  if (dm !== undefined && dm !== 'auto') edit().disagg = dm;
  const p = header(h, 'x-kvrouter-policy');
  if (p !== undefined) {
    if (!isPolicy(p))
      throw new OpenAIError(
        400,
        `header x-kvrouter-policy: unknown policy "${p}"`,
        'invalid_request_error',
        'x-kvrouter-policy',
      );
    if (p !== base.policy) edit().policy = p as PolicyName;
  }
  if (target !== undefined) {
    const out = edit();
    out.target = target;
    if (p === undefined) out.policy = TARGET_POLICY;
  }
  const out: RequestRouting = copy ?? plainRouting(base);
  if (policySpec(out.policy).needs.target && !out.target)
    throw new OpenAIError(
      400,
      `the ${out.policy} policy needs an x-kvrouter-target header naming the instance`,
      'invalid_request_error',
      'x-kvrouter-target',
    );
  return out;
}
