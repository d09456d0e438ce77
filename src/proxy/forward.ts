// The proxy path for one OpenAI request: decide -> book -> dispatch -> stream -> release.
// The booking is released exactly once in a finally, whatever happens (completion, upstream error,
// client disconnect). Failures before any byte reached the client are retried on the next-best
// instance; after that the client gets a clean error instead.
import { randomUUID } from 'node:crypto';
import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import { type Attributes, type Span, SpanKind } from '@opentelemetry/api';
import { RequestTrace } from '../tracing/request-trace.js';
import { endStreamWithError, sendError } from '../api/errors.js';
import { OpenAIError } from '../api/openai.js';
import type { NamespaceId } from '../indexer/namespace.js';
import {
  type Candidate,
  type Decision,
  type KeptDecision,
  keptOf,
  type RouteInput,
  type Scheduler,
} from '../scheduler/scheduler.js';
import { type EngineUsage, UsageTail } from '../feedback/usage-tail.js';
import { waitOn } from '../scheduler/hold.js';
import { type CapacityQueue, type CapacityTry, capacityPool, decideWithinCapacity } from './capacity.js';
import type { InstanceHealth } from './health.js';
import type { Upstream } from './upstreams.js';
import { type ExchangeHead, UpstreamExchange } from './exchange.js';
import { engineResponseHeaders } from './hop-by-hop.js';

export interface InstanceRuntime {
  readonly id: string;
  readonly dpSize: number;
  /** Renewed by a reload that changes the proxy settings (requests in flight keep the old pool). */
  upstream: Upstream;
  readonly health: InstanceHealth;
}

export type FinishOutcome = 'ok' | 'upstream_error' | 'client_abort' | 'no_capacity' | 'failed';

export interface ForwardObserver {
  /** Routing decided and booked (attempt counts from 0). */
  routed?(d: Decision, attempt: number, routingMs: number): void;
  /** First upstream byte. */
  firstByte?(instance: string, ttftMs: number, stream: boolean): void;
  /** The request ended (once per request). */
  finished?(instance: string | null, status: number, outcome: FinishOutcome, durationMs: number, policy: string): void;
  retried?(instance: string, reason: string): void;
  /** A successful response ended: what the engine reported about the prompt (null: no usage in it). */
  reported?(d: KeptDecision, usage: EngineUsage | null): void;
  healthChanged?(instance: string, event: 'ejected' | 'readmitted'): void;
}

export interface ForwardOptions {
  maxRetries: number;
  queueTimeoutMs: number;
  speculativeTtlMs: number;
}

/** done; retry elsewhere; or retry where it may go again (the attempt's other leg failed, not this instance). */
type Outcome = 'done' | 'retry' | 'retry-leg';

/** What one attempt sends, when the request is more than one leg (disaggregated serving). */
export interface LegPlan {
  /** Prompt tokens the chosen instance computes itself (undefined: what the decision predicts). */
  prefillTokens?: number;
  /** False when the first token's time is not the chosen instance's prefill (it includes a remote one). */
  teachesRate: boolean;
  /**
   * Runs once booked, before the request goes upstream: the body to send and headers for the client.
   * `fail` ends this attempt if the response has not started (retried like an upstream failure:
   * nothing reached the client); later it does nothing. Throws OpenAIError to end the request.
   */
  prepare(
    signal: AbortSignal,
    fail: (reason: string) => void,
  ): Promise<{ body: Buffer; headers: Record<string, string> }>;
  /** After this attempt's upstream failed: whether its other leg failed too (then the failure was that leg's). */
  otherLegFailed?(): Promise<boolean>;
}

export interface ForwardJob {
  path: string;
  body: Buffer;
  stream: boolean;
  requestId: string;
  ns: NamespaceId;
  route: Omit<RouteInput, 'candidates' | 'exclude' | 'ns'>;
  instances: readonly InstanceRuntime[];
  receivedAt: number;
  /** Per attempt, for multi-leg requests: decides the other legs once this one is chosen. */
  plan?: (d: Decision, attempt: number) => LegPlan;
  /** The request's trace (null: tracing off): route and upstream spans hang off it. */
  trace?: RequestTrace | null;
  /** The client's trace context, passed through unchanged when the router does not trace. */
  traceContext?: { traceparent: string; tracestate?: string } | null;
}

export interface ForwardDeps {
  scheduler: Scheduler;
  queue: CapacityQueue;
  now: () => number;
  observer?: ForwardObserver;
}

/** Every healthy (instance, dp rank) of a pool. */
export function candidatesOf(instances: readonly InstanceRuntime[], now: number): Candidate[] {
  const out: Candidate[] = [];
  for (const i of instances) {
    if (!i.health.available(now)) continue;
    for (let r = 0; r < i.dpSize; r++) out.push({ instance: i.id, dpRank: r });
  }
  return out;
}

/** What the route span says about a decision (set once, at its end). */
function endRouteSpan(span: Span, d: Decision): void {
  const c = d.chosen;
  const attrs: Attributes = {
    'kvrouter.policy': d.policy,
    'kvrouter.candidates': d.candidates.length,
    'gen_ai.usage.input_tokens': d.isl,
  };
  if (c) {
    Object.assign(attrs, {
      'kvrouter.instance': c.instance,
      'kvrouter.dp_rank': c.dpRank,
      'kvrouter.overlap.gpu_tokens': c.device * d.blockSize,
      'kvrouter.overlap.cpu_tokens': c.host * d.blockSize,
      'kvrouter.overlap.disk_tokens': c.disk * d.blockSize,
      'kvrouter.overlap.shared_tokens': c.shared * d.blockSize,
      'kvrouter.cost': c.cost,
      'kvrouter.predicted_ttft_ms': c.ttftMs,
    });
  } else attrs['kvrouter.no_choice'] = d.reason ?? 'none';
  span.setAttributes(attrs);
  span.end();
}

export function explanationHeaders(d: KeptDecision, requestId: string, attempt: number): Record<string, string> {
  const c = d.chosen!;
  return {
    'x-kvrouter-request-id': requestId,
    'x-kvrouter-instance': c.instance,
    'x-kvrouter-dp-rank': String(c.dpRank),
    'x-kvrouter-policy': d.policy,
    'x-kvrouter-overlap-tokens': String(Math.min(d.isl, Math.max(c.disk, c.shared) * d.blockSize)),
    'x-kvrouter-overlap': `gpu=${c.device * d.blockSize},cpu=${c.host * d.blockSize},disk=${c.disk * d.blockSize},shared=${c.shared * d.blockSize}`,
    'x-kvrouter-cost': c.cost.toFixed(3),
    'x-kvrouter-predicted-ttft-ms': c.ttftMs.toFixed(1),
    'x-kvrouter-attempts': String(attempt + 1),
  };
}

/**
 * The client left: a flag and the few listeners of one request. Node's AbortController costs ~10 us
 * per request to create and listen on; a real signal is made only for the APIs that take one (the
 * capacity wait, a disaggregated plan's prefill leg), rarely on the hot path.
 */
export class ClientAbort {
  aborted = false;
  private listeners: Array<() => void> = [];
  private ctl: AbortController | null = null;

  abort(): void {
    if (this.aborted) return;
    this.aborted = true;
    this.ctl?.abort();
    const ls = this.listeners;
    this.listeners = [];
    for (const l of ls) l();
  }

  /** Calls `fn` once when the client leaves (at once if it has); returns the cancellation. */
  onAbort(fn: () => void): () => void {
    if (this.aborted) {
      fn();
      return () => undefined;
    }
    this.listeners.push(fn);
    return () => {
      const i = this.listeners.indexOf(fn);
      if (i >= 0) this.listeners.splice(i, 1);
    };
  }

  get signal(): AbortSignal {
    if (!this.ctl) {
      this.ctl = new AbortController();
      if (this.aborted) this.ctl.abort();
    }
    return this.ctl.signal;
  }
}

/** Responses streaming SSE to their client: a cut at shutdown ends them with an error event. */
export const sseResponses = new WeakSet<ServerResponse>();

/** End a response the router must cut: an SSE stream gets an error event first, others are reset. */
export function cutResponse(res: ServerResponse, why: string, status: number): void {
  if (sseResponses.has(res)) endStreamWithError(res, new OpenAIError(status, why, 'server_error'));
  res.destroy();
}

/** One call of forward(): what its attempts share, and the one place the request ends. */
class ForwardCall {
  readonly abort = new ClientAbort();
  /** Instances an attempt failed on: later decisions exclude them. */
  readonly tried = new Set<string>();
  /** The last attempt's failure: the client's 502 once every attempt failed. */
  lastError = '';
  private ended = false;

  constructor(
    readonly res: ServerResponse,
    readonly job: ForwardJob,
    readonly opts: ForwardOptions,
    readonly deps: ForwardDeps,
  ) {}

  /** How the request ended, told to the observer exactly once: later calls do nothing. */
  finish(instance: string | null, status: number, outcome: FinishOutcome): void {
    if (this.ended) return;
    this.ended = true;
    const { deps, job } = this;
    deps.observer?.finished?.(instance, status, outcome, deps.now() - job.receivedAt, job.route.policy);
  }

  /** Answer with an error (unless a response is under way) and finish. */
  refuse(instance: string | null, err: OpenAIError, outcome: FinishOutcome, headers?: Record<string, string>): void {
    sendError(this.res, this.job.path, err, headers);
    this.finish(instance, err.status, outcome);
  }
}

/**
 * One try at serving a request on the instance a decision chose, booked by the caller. It ends the
 * request (finish, refuse: 'done') or leaves it to the next attempt ('retry', 'retry-leg').
 */
class Attempt {
  /** The engine computed the prompt: a successful response's first byte arrived. If not, the booking is freed as failed. */
  served = false;
  /** Set when the attempt's other leg cut it (a failed SGLang prefill) before its response started. */
  cutReason: string | null = null;
  responded = false;
  /** A plan's attempt can also be cut by its other leg: then the exchange listens to this, which the client's abort aborts too. */
  readonly ctl: AbortController | null;
  upstreamSpan: Span | undefined;
  upstreamStatus = 0;
  upstreamError: string | undefined;

  constructor(
    readonly call: ForwardCall,
    readonly n: number,
    readonly d: KeptDecision,
    readonly inst: InstanceRuntime,
    readonly bookingId: string,
    readonly plan: LegPlan | undefined,
  ) {
    this.ctl = plan ? new AbortController() : null;
  }

  get canRetry(): boolean {
    return this.n < this.call.opts.maxRetries;
  }

  /** The plan's `fail`: cuts this attempt if its response has not started; later it does nothing. */
  readonly cut = (reason: string): void => {
    if (this.responded || this.cutReason !== null) return;
    this.cutReason = reason;
    this.ctl?.abort();
  };

  finish(status: number, outcome: FinishOutcome): 'done' {
    this.call.finish(this.inst.id, status, outcome);
    return 'done';
  }

  refuse(err: OpenAIError, outcome: FinishOutcome): 'done' {
    this.call.refuse(this.inst.id, err, outcome);
    return 'done';
  }

  /** A failure before any byte reached the client: retried elsewhere (or here, when its other leg failed). */
  async retry(msg: string): Promise<Outcome> {
    this.call.lastError = msg;
    return (await this.plan?.otherLegFailed?.()) ? 'retry-leg' : 'retry';
  }
}

export async function forward(
  res: ServerResponse,
  job: ForwardJob,
  opts: ForwardOptions,
  deps: ForwardDeps,
): Promise<void> {
  const { scheduler, queue, now, observer } = deps;
  const call = new ForwardCall(res, job, opts, deps);
  const { abort, tried } = call;
  const onClose = () => {
    if (!res.writableFinished) abort.abort();
  };
  res.on('close', onClose);
  // The client may have gone while the body was read or tokenized ('close' already fired).
  if (res.destroyed || res.socket?.destroyed) abort.abort();
  let attempt = 0;
  const deadline = job.receivedAt + opts.queueTimeoutMs;
  try {
    for (;;) {
      if (abort.aborted) return call.finish(null, 499, 'client_abort');
      // (Its own function: while the request streams, this frame holds the attempt, which keeps of
      // the decision only its choice, not every candidate's score.)
      const a = await nextAttempt(call, attempt, deadline);
      if (a === null) return;
      const inst = a.inst;
      const bookingId = a.bookingId;
      let outcome: Outcome = 'done';
      try {
        outcome = await dispatch(a);
      } finally {
        scheduler.free(bookingId, { failed: !a.served, now: now() });
        queue.notify(inst.id);
      }
      if (outcome === 'done') return;
      // An attempt its other leg failed says nothing against this instance: it may serve the retry.
      if (outcome === 'retry') tried.add(inst.id);
      observer?.retried?.(inst.id, call.lastError);
      attempt++;
    }
  } finally {
    res.off('close', onClose);
  }
}

/**
 * The attempt loop's next decision: waited for within capacity, decided and booked (the attempt), or
 * the request ended (refused or aborted: null).
 */
async function nextAttempt(call: ForwardCall, attempt: number, deadline: number): Promise<Attempt | null> {
  const { job, deps, abort } = call;
  const { queue, now, observer } = deps;
  // All busy, a busy holder of the prefix worth waiting for, or all down: wait for capacity
  // (bounded, in arrival order), then decide again. A try that chooses books at once.
  const r = await decideWithinCapacity(
    queue,
    { deadline, now, signal: abort.signal },
    (mayHold) => decideOnce(call, attempt, mayHold),
    () => capacityPool(job.ns.model, job.ns.loraName),
  );
  if ('aborted' in r) {
    call.finish(null, 499, 'client_abort');
    return null;
  }
  if (!('done' in r)) {
    const why =
      'full' in r
        ? 'every instance is busy and the queue of waiting requests is full'
        : r.gaveUp.reason === 'all_busy' || r.gaveUp.reason === 'held'
          ? 'every instance is over its busy threshold'
          : 'no healthy instance is available';
    call.refuse(null, new OpenAIError(503, `${why}; retry later`, 'server_error'), 'no_capacity', {
      'retry-after': '1',
    });
    return null;
  }
  const { d, bookingId, plan } = r.done;
  if (!d.chosen || bookingId === null) {
    if (d.reason === 'unknown_target')
      call.refuse(
        null,
        new OpenAIError(400, `x-kvrouter-target names no instance of this model`, 'invalid_request_error'),
        'failed',
      );
    else
      call.refuse(
        null,
        new OpenAIError(502, `every attempt failed; last error: ${call.lastError}`, 'server_error'),
        'failed',
      );
    return null;
  }
  const inst = job.instances.find((i) => i.id === d.chosen!.instance)!;
  observer?.routed?.(d, attempt, now() - job.receivedAt);
  // The engine computed the prompt once a successful response's first byte arrived; an attempt
  // that ends before (failed, cut, refused, abandoned) withdraws the prompt's speculative insert.
  return new Attempt(call, attempt, keptOf(d), inst, bookingId, plan);
}

/** A decision of the attempt loop that ended the wait: booked (`bookingId`), or no choice for good. */
interface Decided {
  d: Decision;
  bookingId: string | null;
  plan: LegPlan | undefined;
}

/**
 * One decision of the attempt loop: done when it chose (booked here, so that the capacity queue's
 * next waiter sees the load), when the target names no instance, or when every candidate failed an
 * attempt already (no wait helps); else wait for capacity (or for the busy holder it names).
 */
function decideOnce(call: ForwardCall, attempt: number, mayHold: boolean): CapacityTry<Decided, Decision> {
  const { job, tried, deps, opts } = call;
  const t0 = deps.now();
  const routeSpan = job.trace?.child('route', { 'kvrouter.attempt': attempt });
  const candidates = candidatesOf(job.instances, t0);
  // The per-attempt fields go first: a literal that adds new keys after a spread takes V8's slow
  // path (~8 us for this one on Node 20), one that spreads last does not (~0.3 us).
  const d = deps.scheduler.decide({ ns: job.ns, candidates, exclude: tried, hold: mayHold, ...job.route }, t0);
  if (routeSpan) endRouteSpan(routeSpan, d);
  if (d.chosen) {
    const bookingId = randomUUID();
    const plan = job.plan?.(d, attempt);
    deps.scheduler.book(d, job.ns, {
      requestId: bookingId,
      now: t0,
      speculativeTtlMs: opts.speculativeTtlMs,
      prefillTokens: plan?.prefillTokens,
    });
    return { done: { d, bookingId, plan } };
  }
  if (d.reason === 'unknown_target') return { done: { d, bookingId: null, plan: undefined } };
  if (tried.size > 0 && candidates.every((c) => tried.has(c.instance)))
    return { done: { d, bookingId: null, plan: undefined } };
  return { wait: d, ...waitOn(d) };
}

/** Send an attempt upstream and stream its answer to the client. */
async function dispatch(a: Attempt): Promise<Outcome> {
  const { job, abort, deps } = a.call;
  const headers: IncomingHttpHeaders = { 'content-type': 'application/json', 'x-request-id': job.requestId };
  if (a.inst.dpSize > 1) headers['x-data-parallel-rank'] = String(a.d.chosen!.dpRank);
  const ctl = a.ctl;
  const stopClientAbort = ctl ? abort.onAbort(() => ctl.abort()) : null;
  try {
    const legs = a.plan ? await prepareLegs(a, a.plan) : { body: job.body, headers: {} };
    if (legs === 'done') return 'done';
    const sentAt = deps.now();
    // The engine continues the trace from the upstream span (W3C traceparent).
    a.upstreamSpan = job.trace?.child(
      'upstream',
      { 'kvrouter.instance': a.inst.id, 'server.address': a.inst.upstream.url, 'kvrouter.attempt': a.n },
      SpanKind.CLIENT,
    );
    if (a.upstreamSpan) job.trace!.inject(a.upstreamSpan, headers);
    else if (job.traceContext) Object.assign(headers, job.traceContext);
    const opened = await openExchange(a, headers, legs.body);
    if (typeof opened === 'string') return opened;
    try {
      return await respond(a, opened, legs.headers, sentAt);
    } finally {
      opened.stopListening();
    }
  } finally {
    stopClientAbort?.();
    if (a.upstreamSpan) RequestTrace.finish(a.upstreamSpan, a.upstreamStatus, a.upstreamError);
  }
}

/** The plan's other legs, once booked: the body to send and headers for the client ('done': the request ended). */
async function prepareLegs(
  a: Attempt,
  plan: LegPlan,
): Promise<{ body: Buffer; headers: Record<string, string> } | 'done'> {
  try {
    return await plan.prepare(a.call.abort.signal, a.cut);
  } catch (err) {
    if (a.call.abort.aborted) return a.finish(499, 'client_abort');
    const e =
      err instanceof OpenAIError
        ? err
        : new OpenAIError(502, `prefill failed: ${(err as Error).message}`, 'server_error');
    return a.refuse(e, 'upstream_error');
  }
}

interface Opened {
  ex: UpstreamExchange;
  up: ExchangeHead;
  /** Stop aborting the exchange when the client (or the attempt's other leg) aborts. */
  stopListening: () => void;
}

/** Send the request and wait for the response's head; a failure before it is retried or ends the request. */
async function openExchange(a: Attempt, headers: IncomingHttpHeaders, body: Buffer): Promise<Opened | Outcome> {
  const { job, abort } = a.call;
  let ex: UpstreamExchange | null = null;
  const onAbort = () => ex?.abort();
  let stopListening = (): void => undefined;
  try {
    if (a.cutReason !== null) throw new Error(a.cutReason);
    ex = new UpstreamExchange(a.inst.upstream.pool, {
      path: a.inst.upstream.basePath + job.path,
      method: 'POST',
      headers,
      body,
    });
    const ctl = a.ctl;
    if (ctl) {
      if (ctl.signal.aborted) ex.abort();
      else {
        ctl.signal.addEventListener('abort', onAbort, { once: true });
        stopListening = () => ctl.signal.removeEventListener('abort', onAbort);
      }
    } else stopListening = abort.onAbort(onAbort);
    const up = await ex.head;
    a.responded = true;
    a.upstreamStatus = up.statusCode;
    return { ex, up, stopListening };
  } catch (err) {
    stopListening();
    return failedBeforeHead(a, err as Error);
  }
}

/** The exchange failed before the response's head: retry while attempts are left, else a 502. */
async function failedBeforeHead(a: Attempt, err: Error): Promise<Outcome> {
  const { call, inst } = a;
  a.upstreamError = a.cutReason ?? err.message;
  if (a.cutReason !== null && !call.abort.aborted) {
    const msg = `${inst.id}: ${a.cutReason}`;
    call.lastError = msg;
    if (a.canRetry) return 'retry-leg';
    return a.refuse(new OpenAIError(502, msg, 'server_error'), 'upstream_error');
  }
  if (call.abort.aborted) return a.finish(499, 'client_abort');
  // The pool's health interceptor has recorded the failure; here only the retry is decided.
  const msg = `${inst.id}: ${err.message}`;
  if (a.canRetry) return a.retry(msg);
  call.lastError = msg;
  return a.refuse(new OpenAIError(502, `upstream ${msg}`, 'server_error'), 'upstream_error');
}

/** The response's head arrived: a 5xx is retried while attempts are left, anything else goes to the client. */
async function respond(
  a: Attempt,
  { ex, up }: Opened,
  extra: Record<string, string>,
  sentAt: number,
): Promise<Outcome> {
  const { res, job } = a.call;
  if (up.statusCode >= 500 && a.canRetry) {
    const text = await ex.text().catch(() => '');
    return a.retry(`${a.inst.id}: HTTP ${up.statusCode} ${text.slice(0, 200)}`);
  }
  const out = engineResponseHeaders(up.headers);
  Object.assign(out, explanationHeaders(a.d, job.requestId, a.n), extra);
  res.writeHead(up.statusCode, out);
  if (job.stream) sseResponses.add(res);
  return pipeToClient(a, ex, up.statusCode, sentAt);
}

/** Pipe the engine's answer to the client, with backpressure; the request ends here, whatever happens. */
async function pipeToClient(a: Attempt, ex: UpstreamExchange, status: number, sentAt: number): Promise<Outcome> {
  const { res, job, abort, deps } = a.call;
  const { scheduler, queue, now, observer } = deps;
  let first = true;
  // The engine's usage is read from the response's tail as it passes (closed-loop hit check).
  const tail = observer?.reported && status < 400 ? new UsageTail() : null;
  // One wait for 'drain' at a time: chunks that came with the head are written in one go, and
  // each may find the (corked) socket full; a listener per chunk would pile up until the drain.
  let draining = false;
  const resume = () => {
    draining = false;
    ex.resume();
  };
  try {
    await ex.pipe(
      (chunk) => {
        tail?.push(chunk);
        if (first) {
          first = false;
          if (status < 400) a.served = true;
          // A stream's first chunk is its first token; a plain response's is its last, and an error's
          // is no prefill at all: neither says anything about prefill speed.
          scheduler.prefillComplete(
            a.bookingId,
            job.stream && status < 400 && (a.plan?.teachesRate ?? true) ? now() : undefined,
          );
          queue.notify(a.inst.id);
          observer?.firstByte?.(a.inst.id, now() - sentAt, job.stream);
          a.upstreamSpan?.addEvent('first_token');
        }
        if (res.destroyed) {
          ex.abort();
          return false;
        }
        if (res.write(chunk)) return true;
        // A client that closes instead of draining aborts the exchange (forward's close handler).
        if (!draining) {
          draining = true;
          res.once('drain', resume);
        }
        return false;
      },
      () => {
        if (!abort.aborted && !res.destroyed) res.end();
      },
    );
    if (abort.aborted || (res.destroyed && !res.writableEnded)) return a.finish(499, 'client_abort');
    if (tail) {
      const usage = tail.read();
      if (usage?.cachedTokens !== null && usage !== null)
        scheduler.reportUncached(a.bookingId, usage.promptTokens - usage.cachedTokens);
      observer!.reported!(a.d, usage);
    }
    return a.finish(status, status < 400 ? 'ok' : 'failed');
  } catch (err) {
    if (abort.aborted || res.destroyed) return a.finish(499, 'client_abort');
    // The engine failed after bytes reached the client: no retry; end with a clean error.
    const msg = `${a.inst.id}: ${(err as Error).message}`;
    if (job.stream)
      endStreamWithError(res, new OpenAIError(502, `upstream engine failed mid-stream: ${msg}`, 'server_error'));
    else res.destroy(err as Error);
    return a.finish(502, 'upstream_error');
  } finally {
    if (draining) res.off('drain', resume);
  }
}
