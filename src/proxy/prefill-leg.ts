// What every disaggregation protocol's prefill leg does alike, for one request and all its attempts:
// choose and book a prefill instance (never one that failed this request), POST the leg, free its
// booking, and the paths without a leg (the decode instance prefills itself, or `prefill_fallback`).
// The protocols (disagg-vllm.ts, disagg-sglang.ts) only say when the leg runs and what it carries.
import { randomUUID } from 'node:crypto';
import { SpanKind } from '@opentelemetry/api';
import { reserialize } from '../api/body.js';
import type { OpenAIError } from '../api/openai.js';
import type { OpenAIBody, PathReason } from '../disagg/protocol.js';
import type { Decision } from '../scheduler/scheduler.js';
import { RequestTrace } from '../tracing/request-trace.js';
import type { DisaggDeps, DisaggJob } from './disagg.js';
import { candidatesOf, type InstanceRuntime, type LegPlan } from './forward.js';

/** The body the decode leg sends and the headers the client gets (LegPlan.prepare's answer). */
export type Prepared = { body: Buffer; headers: Record<string, string> };

/** One disaggregation protocol's prefill leg, behind the planner (disaggPlanner chooses by `protocol`). */
export interface DisaggProtocol {
  /** The plan of an attempt whose path is remote. */
  remote(): LegPlan;
  /** An earlier attempt's prefill can still serve (vLLM: its KV waits on the prefill instance). */
  prefilled(): boolean;
}

/** A prefill leg chosen and booked. */
export interface PickedPrefill {
  d: Decision;
  inst: InstanceRuntime;
  bookingId: string;
}

// Bodies go out through the one guarded serializer: what JSON cannot carry (1e400, too deep) is a 400.
export const json = (b: OpenAIBody): Buffer => reserialize(b);

/** A prefill engine refused the request itself (4xx other than 408/429): the client's error, not the instance's. */
export class PrefillRefused extends Error {
  constructor(
    readonly status: number,
    readonly text: string,
  ) {
    super(`HTTP ${status} ${text.slice(0, 200)}`);
  }
}

export class PrefillLegs {
  /** Prefill instances that failed this request: no attempt chooses them again. */
  readonly failed = new Set<string>();
  readonly model: string;
  /** The client's body, for a decode instance that prefills itself (serialized up front: a body JSON cannot carry is refused before any leg). */
  private readonly decodeBody: Buffer;

  constructor(
    readonly job: DisaggJob,
    readonly deps: DisaggDeps,
    /** The prefill leg's route (prefillLegRoute), made per pick. */
    private readonly route: () => DisaggJob['route'],
    /** `prefill_fallback` (noPrefillLeg): the error that refuses a request without a prefill leg, or null to go local. */
    private readonly noLeg: (why: string) => OpenAIError | null,
  ) {
    this.model = job.ns.model;
    this.decodeBody = json(job.body);
  }

  /** Some prefill instance is healthy and has not failed this request. */
  available(): boolean {
    return candidatesOf(this.job.prefill, this.deps.now()).some((x) => !this.failed.has(x.instance));
  }

  /** Why no prefill instance is left. */
  noneLeft(): string {
    return this.failed.size > 0
      ? `prefill instances failed: ${[...this.failed].join(', ')}`
      : 'no prefill instance is available';
  }

  /** The decode instance prefills itself: the client's body, and why. */
  local(reason: PathReason): Prepared {
    this.deps.observer?.disaggPath?.(this.model, false, reason);
    return { body: this.decodeBody, headers: { 'x-kvrouter-disagg': 'local', 'x-kvrouter-disagg-reason': reason } };
  }

  /** The request needs a prefill leg and can get none: the configured fallback (`noPrefillLeg`). */
  fallback(why: string): Prepared {
    const refused = this.noLeg(why);
    if (refused) throw refused;
    return this.local(this.failed.size > 0 ? 'prefill_failed' : 'no_prefill_instance');
  }

  /** Choose and book a prefill instance: null when none is left (failed or down), 'busy' when all are over their busy thresholds. */
  pick(): PickedPrefill | null | 'busy' {
    const { job, deps } = this;
    const now = deps.now();
    const d = deps.scheduler.decide(
      { ns: job.ns, candidates: candidatesOf(job.prefill, now), exclude: this.failed, ...this.route() },
      now,
    );
    if (!d.chosen) return d.reason === 'all_busy' ? 'busy' : null;
    const inst = job.prefill.find((i) => i.id === d.chosen!.instance)!;
    const bookingId = randomUUID();
    deps.scheduler.book(d, job.ns, { requestId: bookingId, now, speculativeTtlMs: job.speculativeTtlMs });
    return { d, inst, bookingId };
  }

  /** A prefill leg failed: its instance is not chosen again for this request. */
  failedOn(inst: string, why: string): void {
    this.failed.add(inst);
    this.deps.observer?.prefillFailed?.(this.model, inst, why);
  }

  /** POST the prefill leg; resolves with its JSON body, rejects on a transport error, a non-2xx or a timeout. */
  async send(p: PickedPrefill, body: OpenAIBody, signal: AbortSignal): Promise<unknown> {
    const { job } = this;
    const headers: Record<string, string> = { 'content-type': 'application/json', 'x-request-id': job.requestId };
    if (p.inst.dpSize > 1) headers['x-data-parallel-rank'] = String(p.d.chosen!.dpRank);
    const span = job.trace?.child(
      'prefill',
      { 'kvrouter.instance': p.inst.id, 'server.address': p.inst.upstream.url, 'kvrouter.protocol': job.cfg.protocol },
      SpanKind.CLIENT,
    );
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
  }

  /** A prefill leg is over; `failed`: the engine did not compute the prompt, so its speculative insert goes too. */
  release(bookingId: string, failed: boolean): void {
    this.deps.scheduler.prefillComplete(bookingId);
    this.deps.scheduler.free(bookingId, { failed, now: this.deps.now() });
  }
}
