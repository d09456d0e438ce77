// Disaggregated prefill/decode: the prefill leg around the proxy's decode leg. forward() decides,
// books and streams the decode leg; per attempt, the plan made here chooses remote or local
// prefill (src/disagg/protocol.ts) and runs the prefill leg: vLLM's before the decode request
// (its kv_transfer_params go with it), SGLang's at the same time (both carry one bootstrap room).
// Every prefill booking is freed exactly once, when its leg's response ends or fails.
import { randomUUID } from 'node:crypto';
import { OpenAIError } from '../api/openai.js';
import { reserialize } from '../api/body.js';
import type { ModelConfig } from '../config/schema.js';
import {
  bootstrapRoom,
  choosePath,
  type DisaggMode,
  type OpenAIBody,
  type PathReason,
  sglangBody,
  transferParamsOf,
  vllmDecodeBody,
  vllmPrefillBody,
} from '../disagg/protocol.js';
import type { NamespaceId } from '../indexer/namespace.js';
import type { Decision, RouteInput, Scheduler } from '../scheduler/scheduler.js';
import { candidatesOf, type InstanceRuntime, type LegPlan } from './forward.js';
import { SpanKind } from '@opentelemetry/api';
import { RequestTrace } from '../tracing/request-trace.js';
import { DEFAULT_POLICY, policySpec } from '../scheduler/policies/registry.js';

export type DisaggConfig = NonNullable<ModelConfig['disaggregation']>;
export const DEFAULT_DISAGG: DisaggConfig = { protocol: 'vllm', bypass: true, uncached_token_threshold: 1024, min_prompt_tokens: 0, prefill_fallback: 'local', prefill_timeout_ms: 60_000 };

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

// Bodies go out through the one guarded serializer: what JSON cannot carry (1e400, too deep) is a 400.
const json = (b: OpenAIBody): Buffer => reserialize(b);

/** A prefill engine refused the request itself (4xx other than 408/429): the client's error, not the instance's. */
class PrefillRefused extends Error {
  constructor(
    readonly status: number,
    readonly text: string,
  ) {
    super(`HTTP ${status} ${text.slice(0, 200)}`);
  }
}

type Route = Omit<RouteInput, 'candidates' | 'exclude' | 'ns'>;

/**
 * The decode leg of a disaggregated model is priced as Dynamo prices decode workers: blocks of
 * decode memory held plus (overlap_weight x) the prompt blocks it would prefill itself, so load
 * spreads over the pool while a decode instance holding the prompt still wins its bypass. (The time
 * model would price a remote-prefilled request's decode by a prefill it does not run.)
 */
export function decodeLegRoute(route: Route): Route {
  return { ...route, weights: { ...route.weights, model: 'blocks', trackActiveBlocks: true }, prefixAffinity: 0, loadBound: 0 };
}

/** The prefill leg is priced on prefill alone (it holds no decode); an admin's target names the decode leg. */
export function prefillLegRoute(route: Route): Route {
  return { ...route, policy: policySpec(route.policy).needs.target ? DEFAULT_POLICY : route.policy, target: null, weights: { ...route.weights, trackActiveBlocks: false } };
}

/** A model's eligible instances: decode and aggregated ones serve the decode leg, prefill ones the prefill leg. */
export function splitLegs(instances: readonly InstanceRuntime[], roles: ReadonlyMap<string, string>): { decodeSide: InstanceRuntime[]; prefill: InstanceRuntime[] } {
  const decodeSide: InstanceRuntime[] = [];
  const prefill: InstanceRuntime[] = [];
  for (const i of instances) (roles.get(i.id) === 'prefill' ? prefill : decodeSide).push(i);
  return { decodeSide, prefill };
}

/** Remote or local prefill for a decode leg's decision (the proxy's plan and the decision API ask alike). */
export function pathFor(cfg: DisaggConfig, mode: DisaggMode, d: Decision, prefillAvailable: boolean): { remote: boolean; reason: PathReason } {
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
  return cfg.prefill_fallback === 'fail' ? new OpenAIError(502, `no prefill leg (prefill_fallback: fail): ${why}`, 'server_error') : null;
}

/** Host of an instance's URL as SGLang's bootstrap_host wants it (IPv6 without brackets). */
export function hostOf(url: string): string {
  try {
    return new URL(url).hostname.replace(/^\[|\]$/g, '');
  } catch {
    return '127.0.0.1';
  }
}

/** The plan factory forward() calls per attempt. State shared by the attempts: prefill instances already failed, vLLM's transfer params. */
export function disaggPlanner(job: DisaggJob, deps: DisaggDeps): (d: Decision, attempt: number) => LegPlan {
  const failedPrefill = new Set<string>();
  let transfer: { params: OpenAIBody | null; instance: string; attempts: number } | null = null;
  const model = job.ns.model;
  const rand = deps.rand ?? Math.random;
  const decodeBody = json(job.body);

  /** The decode instance prefills itself: the client's body, and why. */
  const goLocal = (reason: PathReason): { body: Buffer; headers: Record<string, string> } => {
    deps.observer?.disaggPath?.(model, false, reason);
    return { body: decodeBody, headers: { 'x-kvrouter-disagg': 'local', 'x-kvrouter-disagg-reason': reason } };
  };
  const local = (reason: PathReason): LegPlan => ({ teachesRate: true, prepare: async () => goLocal(reason) });

  /** Choose and book a prefill instance: null when none is left (failed or down), 'busy' when all are over their busy thresholds. */
  const pickPrefill = (): { d: Decision; inst: InstanceRuntime; bookingId: string } | null | 'busy' => {
    const now = deps.now();
    const d = deps.scheduler.decide({ ns: job.ns, candidates: candidatesOf(job.prefill, now), exclude: failedPrefill, ...prefillLegRoute(job.route) }, now);
    if (!d.chosen) return d.reason === 'all_busy' ? 'busy' : null;
    const inst = job.prefill.find((i) => i.id === d.chosen!.instance)!;
    const bookingId = randomUUID();
    deps.scheduler.book(d, job.ns, { requestId: bookingId, now, speculativeTtlMs: job.speculativeTtlMs });
    return { d, inst, bookingId };
  };

  /** POST the prefill leg; resolves with its JSON body, rejects on a transport error, a non-2xx or a timeout. */
  const sendPrefill = async (p: { d: Decision; inst: InstanceRuntime }, body: OpenAIBody, signal: AbortSignal): Promise<unknown> => {
    const headers: Record<string, string> = { 'content-type': 'application/json', 'x-request-id': job.requestId };
    if (p.inst.dpSize > 1) headers['x-data-parallel-rank'] = String(p.d.chosen!.dpRank);
    const span = job.trace?.child('prefill', { 'kvrouter.instance': p.inst.id, 'server.address': p.inst.upstream.url, 'kvrouter.protocol': job.cfg.protocol }, SpanKind.CLIENT);
    if (span) job.trace!.inject(span, headers);
    let status = 0;
    let text: string;
    try {
      const up = await p.inst.upstream.pool.request({
        path: p.inst.upstream.basePath + job.path,
        method: 'POST',
        headers,
        body: json(body),
        signal: AbortSignal.any([signal, AbortSignal.timeout(job.cfg.prefill_timeout_ms)]),
      });
      status = up.statusCode;
      text = await up.body.text();
    } catch (err) {
      if (span) RequestTrace.finish(span, status, (err as Error).message);
      throw err;
    }
    if (span) RequestTrace.finish(span, status);
    if (status >= 400 && status < 500 && status !== 408 && status !== 429) throw new PrefillRefused(status, text);
    if (status >= 300) throw new Error(`HTTP ${status} ${text.slice(0, 200)}`);
    // Only kv_transfer_params is read: small integers and strings, plain JSON is exact for them.
    try {
      return text.trim().startsWith('{') ? (JSON.parse(text) as unknown) : null;
    } catch {
      return null;
    }
  };

  /** A prefill leg is over; `failed`: the engine did not compute the prompt, so its speculative insert goes too. */
  const releasePrefill = (bookingId: string, failed: boolean) => {
    deps.scheduler.prefillComplete(bookingId);
    deps.scheduler.free(bookingId, { failed, now: deps.now() });
  };

  /** The request needs a prefill leg and can get none: the configured fallback (`noPrefillLeg`). */
  const fallback = (why: string): { body: Buffer; headers: Record<string, string> } => {
    const refused = noPrefillLeg(job.cfg, why);
    if (refused) throw refused;
    return goLocal(failedPrefill.size > 0 ? 'prefill_failed' : 'no_prefill_instance');
  };

  const vllmPrepare = async (signal: AbortSignal): Promise<{ body: Buffer; headers: Record<string, string> }> => {
    if (!transfer) {
      let lastError = 'no prefill instance is available';
      for (let a = 0; a <= job.maxRetries && !transfer; a++) {
        const p = pickPrefill();
        if (p === 'busy') return goLocal('prefill_busy');
        if (!p) break;
        let served = false;
        try {
          const response = await sendPrefill(p, vllmPrefillBody(job.body), signal);
          served = true;
          transfer = { params: transferParamsOf(response), instance: p.inst.id, attempts: a + 1 };
        } catch (err) {
          if (signal.aborted) throw err;
          // The engine refused the request itself: the client gets that answer, no instance is blamed.
          if (err instanceof PrefillRefused) throw new OpenAIError(err.status, `the prefill instance refused the request: ${err.text.slice(0, 500)}`, 'invalid_request_error');
          lastError = `${p.inst.id}: ${(err as Error).message}`;
          failedPrefill.add(p.inst.id);
          deps.observer?.prefillFailed?.(model, p.inst.id, lastError);
        } finally {
          releasePrefill(p.bookingId, !served);
        }
      }
      if (!transfer) return fallback(failedPrefill.size > 0 ? `every prefill attempt failed; last error: ${lastError}` : lastError);
    }
    const t = transfer;
    return {
      // Without params (the prefill engine sent none) the decode engine prefills itself, as vLLM's proxy does.
      body: json(vllmDecodeBody(job.body, t.params)),
      headers: {
        'x-kvrouter-disagg': 'remote',
        'x-kvrouter-disagg-reason': t.params ? 'remote' : 'no_transfer_params',
        'x-kvrouter-prefill-instance': t.instance,
        'x-kvrouter-prefill-attempts': String(t.attempts),
      },
    };
  };

  /**
   * A vLLM decode leg failed: its KV may be what is gone (pulled already, or the prefill instance
   * died), so the retry prefills again. The decode instance is blamed all the same.
   */
  const vllmDecodeFailed = async (): Promise<boolean> => {
    transfer = null;
    return false;
  };

  /** SGLang: the current attempt's prefill leg. Each attempt's leg is its own, aborted when the attempt is over. */
  let leg: { ctl: AbortController; settled: Promise<void>; failed: boolean } | null = null;
  const legFailed = async (): Promise<boolean> => {
    const l = leg;
    if (!l) return false;
    // Bounded: a slow prefill that is still alive did not fail.
    await Promise.race([l.settled, new Promise((r) => setTimeout(r, 2000).unref())]);
    return l.failed;
  };
  const batch = Array.isArray(job.body.prompt) && job.body.prompt.length > 0 && (typeof job.body.prompt[0] === 'string' || Array.isArray(job.body.prompt[0])) ? job.body.prompt.length : 0;

  const sglangPrepare = async (signal: AbortSignal, fail: (reason: string) => void): Promise<{ body: Buffer; headers: Record<string, string> }> => {
    // The previous attempt is over: its prefill waits for a decode that will not come.
    leg?.ctl.abort();
    const p = pickPrefill();
    if (p === 'busy') return goLocal('prefill_busy');
    if (!p) return fallback(failedPrefill.size > 0 ? `prefill instances failed: ${[...failedPrefill].join(', ')}` : 'no prefill instance is available');
    const bootstrap = { host: hostOf(p.inst.upstream.url), port: job.bootstrapPort(p.inst.id), room: bootstrapRoom(rand) };
    const body = sglangBody(job.body, bootstrap, batch, rand);
    // Both legs at once: the decode engine waits for the KV the prefill engine sends to the room.
    // The prefill's response is drained; if it fails, this attempt is cut (and retried elsewhere).
    const ctl = new AbortController();
    const mine: { ctl: AbortController; settled: Promise<void>; failed: boolean } = { ctl, failed: false, settled: Promise.resolve() };
    let served = false;
    mine.settled = sendPrefill(p, body, AbortSignal.any([signal, ctl.signal]))
      .then(() => {
        served = true;
      })
      .catch((err: unknown) => {
        // Aborted on purpose (client gone, attempt over), or refused like the decode leg will be: no blame.
        if (signal.aborted || ctl.signal.aborted || err instanceof PrefillRefused) return;
        mine.failed = true;
        const why = `prefill ${p.inst.id}: ${(err as Error).message}`;
        failedPrefill.add(p.inst.id);
        deps.observer?.prefillFailed?.(model, p.inst.id, why);
        fail(why);
      })
      .finally(() => releasePrefill(p.bookingId, !served));
    leg = mine;
    return {
      body: json(body),
      headers: {
        'x-kvrouter-disagg': 'remote',
        'x-kvrouter-disagg-reason': 'remote',
        'x-kvrouter-prefill-instance': p.inst.id,
        'x-kvrouter-bootstrap-room': String(bootstrap.room),
      },
    };
  };

  return (d: Decision) => {
    const path = pathFor(job.cfg, job.mode, d, candidatesOf(job.prefill, deps.now()).some((x) => !failedPrefill.has(x.instance)) || transfer !== null);
    // A prefill leg is needed and no prefill instance is left (down, ejected or failed): the configured fallback decides.
    if (!path.remote && path.reason === 'no_prefill_instance') {
      const why = failedPrefill.size > 0 ? `prefill instances failed: ${[...failedPrefill].join(', ')}` : 'no prefill instance is available';
      return { teachesRate: true, prepare: async () => fallback(why) };
    }
    if (!path.remote) return local(path.reason);
    deps.observer?.disaggPath?.(model, true, path.reason);
    // The decode instance computes no prompt: its first token waits on a remote prefill, so it teaches no prefill rate.
    return job.cfg.protocol === 'sglang'
      ? { prefillTokens: 0, teachesRate: false, prepare: sglangPrepare, otherLegFailed: legFailed }
      : { prefillTokens: 0, teachesRate: false, prepare: vllmPrepare, otherLegFailed: vllmDecodeFailed };
  };
}
