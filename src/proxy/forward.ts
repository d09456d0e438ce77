// The proxy path for one OpenAI request: decide -> book -> dispatch -> stream -> release.
// The booking is released exactly once in a finally, whatever happens (completion, upstream error,
// client disconnect). Failures before any byte reached the client are retried on the next-best
// instance; after that the client gets a clean error instead.
import { randomUUID } from 'node:crypto';
import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import { type Attributes, type Span, SpanKind } from '@opentelemetry/api';
import { RequestTrace } from '../tracing/request-trace.js';
import { sendError } from '../api/errors.js';
import { OpenAIError } from '../api/openai.js';
import type { NamespaceId } from '../indexer/namespace.js';
import type { Candidate, Decision, RouteInput, Scheduler } from '../scheduler/scheduler.js';
import { type EngineUsage, UsageTail } from '../feedback/usage-tail.js';
import type { CapacityQueue } from './capacity.js';
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

export interface ForwardObserver {
  /** Routing decided and booked (attempt counts from 0). */
  routed?(d: Decision, attempt: number, routingMs: number): void;
  /** First upstream byte. */
  firstByte?(instance: string, ttftMs: number, stream: boolean): void;
  finished?(instance: string | null, status: number, outcome: 'ok' | 'upstream_error' | 'client_abort' | 'no_capacity' | 'failed', durationMs: number, policy: string): void;
  retried?(instance: string, reason: string): void;
  /** A successful response ended: what the engine reported about the prompt (null: no usage in it). */
  reported?(d: Decision, usage: EngineUsage | null): void;
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
  prepare(signal: AbortSignal, fail: (reason: string) => void): Promise<{ body: Buffer; headers: Record<string, string> }>;
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
  const attrs: Attributes = { 'kvrouter.policy': d.policy, 'kvrouter.candidates': d.candidates.length, 'gen_ai.usage.input_tokens': d.isl };
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

export function explanationHeaders(d: Decision, requestId: string, attempt: number): Record<string, string> {
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
  if (sseResponses.has(res) && !res.writableEnded && !res.destroyed) {
    res.end(`data: ${JSON.stringify({ error: { message: why, type: 'server_error', param: null, code: status } })}\n\n`);
  }
  res.destroy();
}

export async function forward(res: ServerResponse, job: ForwardJob, opts: ForwardOptions, deps: ForwardDeps): Promise<void> {
  const { scheduler, queue, now, observer } = deps;
  const abort = new ClientAbort();
  const onClose = () => {
    if (!res.writableFinished) abort.abort();
  };
  res.on('close', onClose);
  // The client may have gone while the body was read or tokenized ('close' already fired).
  if (res.destroyed || res.socket?.destroyed) abort.abort();
  const tried = new Set<string>();
  let attempt = 0;
  let lastError = '';
  const deadline = job.receivedAt + opts.queueTimeoutMs;
  try {
    for (;;) {
      if (abort.aborted) return observer?.finished?.(null, 499, 'client_abort', now() - job.receivedAt, job.route.policy);
      const t0 = now();
      const routeSpan = job.trace?.child('route', { 'kvrouter.attempt': attempt });
      const candidates = candidatesOf(job.instances, t0);
      // The per-attempt fields go first: a literal that adds new keys after a spread takes V8's slow
      // path (~8 us for this one on Node 20), one that spreads last does not (~0.3 us).
      const d = scheduler.decide({ ns: job.ns, candidates, exclude: tried, ...job.route }, t0);
      if (routeSpan) endRouteSpan(routeSpan, d);
      if (!d.chosen) {
        if (d.reason === 'unknown_target') {
          sendError(res, job.path, new OpenAIError(400, `x-kvrouter-target names no instance of this model`, 'invalid_request_error'));
          return observer?.finished?.(null, 400, 'failed', now() - job.receivedAt, job.route.policy);
        }
        if (tried.size > 0 && candidates.every((c) => tried.has(c.instance))) {
          sendError(res, job.path, new OpenAIError(502, `every attempt failed; last error: ${lastError}`, 'server_error'));
          return observer?.finished?.(null, 502, 'failed', now() - job.receivedAt, job.route.policy);
        }
        // All busy or all down: wait for capacity (bounded), then decide again.
        const turn = await queue.turn(deadline, now, abort.signal);
        if (turn === 'aborted') return observer?.finished?.(null, 499, 'client_abort', now() - job.receivedAt, job.route.policy);
        if (turn === 'gave_up') {
          const why = d.reason === 'all_busy' ? 'every instance is over its busy threshold' : 'no healthy instance is available';
          sendError(res, job.path, new OpenAIError(503, `${why}; retry later`, 'server_error'), { 'retry-after': '1' });
          return observer?.finished?.(null, 503, 'no_capacity', now() - job.receivedAt, job.route.policy);
        }
        continue;
      }
      const inst = job.instances.find((i) => i.id === d.chosen!.instance)!;
      const bookingId = randomUUID();
      const plan = job.plan?.(d, attempt);
      scheduler.book(d, job.ns, { requestId: bookingId, now: t0, speculativeTtlMs: opts.speculativeTtlMs, prefillTokens: plan?.prefillTokens });
      observer?.routed?.(d, attempt, now() - job.receivedAt);
      let outcome: Outcome = 'done';
      // The engine computed the prompt once a successful response's first byte arrived; an attempt
      // that ends before (failed, cut, refused, abandoned) withdraws the prompt's speculative insert.
      const attemptState = { served: false };
      try {
        outcome = await dispatch(res, job, d, inst, attempt, opts, deps, abort, bookingId, (e) => (lastError = e), attemptState, plan);
      } finally {
        scheduler.free(bookingId, { failed: !attemptState.served, now: now() });
        queue.notify(1);
      }
      if (outcome === 'done') return;
      // An attempt its other leg failed says nothing against this instance: it may serve the retry.
      if (outcome === 'retry') tried.add(inst.id);
      observer?.retried?.(inst.id, lastError);
      attempt++;
    }
  } finally {
    res.off('close', onClose);
  }
}

async function dispatch(
  res: ServerResponse,
  job: ForwardJob,
  d: Decision,
  inst: InstanceRuntime,
  attempt: number,
  opts: ForwardOptions,
  deps: ForwardDeps,
  abort: ClientAbort,
  bookingId: string,
  setError: (e: string) => void,
  state: { served: boolean },
  plan?: LegPlan,
): Promise<Outcome> {
  const { scheduler, queue, now, observer } = deps;
  const headers: IncomingHttpHeaders = { 'content-type': 'application/json', 'x-request-id': job.requestId };
  if (inst.dpSize > 1) headers['x-data-parallel-rank'] = String(d.chosen!.dpRank);
  const canRetry = attempt < opts.maxRetries;
  let body = job.body;
  let extra: Record<string, string> = {};
  // A multi-leg attempt may be cut by its other leg (a failed SGLang prefill) until its response starts.
  let upstreamStatus = 0;
  let upstreamError: string | undefined;
  let cutReason: string | null = null;
  let responded = false;
  let upstreamSpan: Span | undefined;
  // A plan's attempt can also be cut by its other leg: then the exchange listens to both.
  const ctl = plan ? new AbortController() : null;
  const stopClientAbort = ctl ? abort.onAbort(() => ctl.abort()) : null;
  const fail = (reason: string) => {
    if (responded || cutReason !== null) return;
    cutReason = reason;
    ctl?.abort();
  };
  try {
    if (plan) {
      try {
        ({ body, headers: extra } = await plan.prepare(abort.signal, fail));
      } catch (err) {
        if (abort.aborted) {
          observer?.finished?.(inst.id, 499, 'client_abort', now() - job.receivedAt, job.route.policy);
          return 'done';
        }
        const e = err instanceof OpenAIError ? err : new OpenAIError(502, `prefill failed: ${(err as Error).message}`, 'server_error');
        sendError(res, job.path, e);
        observer?.finished?.(inst.id, e.status, 'upstream_error', now() - job.receivedAt, job.route.policy);
        return 'done';
      }
    }
    const sentAt = now();
    // The engine continues the trace from the upstream span (W3C traceparent).
    upstreamSpan = job.trace?.child('upstream', { 'kvrouter.instance': inst.id, 'server.address': inst.upstream.url, 'kvrouter.attempt': attempt }, SpanKind.CLIENT);
    if (upstreamSpan) job.trace!.inject(upstreamSpan, headers);
    else if (job.traceContext) Object.assign(headers, job.traceContext);
    let ex: UpstreamExchange | null = null;
    const onAbort = () => ex?.abort();
    let stopListening = (): void => undefined;
    let up: ExchangeHead;
    try {
      if (cutReason !== null) throw new Error(cutReason);
      ex = new UpstreamExchange(inst.upstream.pool, { path: inst.upstream.basePath + job.path, method: 'POST', headers, body });
      if (ctl) {
        if (ctl.signal.aborted) ex.abort();
        else {
          ctl.signal.addEventListener('abort', onAbort, { once: true });
          stopListening = () => ctl.signal.removeEventListener('abort', onAbort);
        }
      } else stopListening = abort.onAbort(onAbort);
      up = await ex.head;
      responded = true;
      upstreamStatus = up.statusCode;
    } catch (err) {
      stopListening();
      upstreamError = cutReason ?? (err as Error).message;
      if (cutReason !== null && !abort.aborted) {
        const msg = `${inst.id}: ${cutReason}`;
        setError(msg);
        if (canRetry) return 'retry-leg';
        sendError(res, job.path, new OpenAIError(502, msg, 'server_error'));
        observer?.finished?.(inst.id, 502, 'upstream_error', now() - job.receivedAt, job.route.policy);
        return 'done';
      }
      if (abort.aborted) {
        observer?.finished?.(inst.id, 499, 'client_abort', now() - job.receivedAt, job.route.policy);
        return 'done';
      }
      // The pool's health interceptor has recorded the failure; here only the retry is decided.
      const msg = `${inst.id}: ${(err as Error).message}`;
      setError(msg);
      if (canRetry) return (await plan?.otherLegFailed?.()) ? 'retry-leg' : 'retry';
      sendError(res, job.path, new OpenAIError(502, `upstream ${msg}`, 'server_error'));
      observer?.finished?.(inst.id, 502, 'upstream_error', now() - job.receivedAt, job.route.policy);
      return 'done';
    }
    const exchange = ex;
    try {
      if (up.statusCode >= 500 && canRetry) {
        const text = await exchange.text().catch(() => '');
        const msg = `${inst.id}: HTTP ${up.statusCode} ${text.slice(0, 200)}`;
        setError(msg);
        return (await plan?.otherLegFailed?.()) ? 'retry-leg' : 'retry';
      }

      const out = engineResponseHeaders(up.headers);
      Object.assign(out, explanationHeaders(d, job.requestId, attempt), extra);
      res.writeHead(up.statusCode, out);
      if (job.stream) sseResponses.add(res);
      let first = true;
      // The engine's usage is read from the response's tail as it passes (closed-loop hit check).
      const tail = observer?.reported && up.statusCode < 400 ? new UsageTail() : null;
      // One wait for 'drain' at a time: chunks that came with the head are written in one go, and
      // each may find the (corked) socket full; a listener per chunk would pile up until the drain.
      let draining = false;
      const resume = () => {
        draining = false;
        exchange.resume();
      };
      try {
        await exchange.pipe((chunk) => {
          tail?.push(chunk);
          if (first) {
            first = false;
            if (up.statusCode < 400) state.served = true;
            // A stream's first chunk is its first token; a plain response's is its last, and an error's
            // is no prefill at all: neither says anything about prefill speed.
            scheduler.prefillComplete(bookingId, job.stream && up.statusCode < 400 && (plan?.teachesRate ?? true) ? now() : undefined);
            queue.notify(1);
            observer?.firstByte?.(inst.id, now() - sentAt, job.stream);
            upstreamSpan?.addEvent('first_token');
          }
          if (res.destroyed) {
            exchange.abort();
            return false;
          }
          if (res.write(chunk)) return true;
          // A client that closes instead of draining aborts the exchange (forward's close handler).
          if (!draining) {
            draining = true;
            res.once('drain', resume);
          }
          return false;
        }, () => {
          if (!abort.aborted && !res.destroyed) res.end();
        });
        if (abort.aborted || (res.destroyed && !res.writableEnded)) {
          observer?.finished?.(inst.id, 499, 'client_abort', now() - job.receivedAt, job.route.policy);
          return 'done';
        }
        if (tail) {
          const usage = tail.read();
          if (usage?.cachedTokens !== null && usage !== null) scheduler.reportUncached(bookingId, usage.promptTokens - usage.cachedTokens);
          observer!.reported!(d, usage);
        }
        observer?.finished?.(inst.id, up.statusCode, up.statusCode < 400 ? 'ok' : 'failed', now() - job.receivedAt, job.route.policy);
      } catch (err) {
        if (abort.aborted || res.destroyed) {
          observer?.finished?.(inst.id, 499, 'client_abort', now() - job.receivedAt, job.route.policy);
          return 'done';
        }
        // The engine failed after bytes reached the client: no retry; end with a clean error.
        const msg = `${inst.id}: ${(err as Error).message}`;
        if (job.stream) {
          res.end(`data: ${JSON.stringify({ error: { message: `upstream engine failed mid-stream: ${msg}`, type: 'server_error', param: null, code: 502 } })}\n\n`);
        } else res.destroy(err as Error);
        observer?.finished?.(inst.id, 502, 'upstream_error', now() - job.receivedAt, job.route.policy);
      } finally {
        if (draining) res.off('drain', resume);
      }
    } finally {
      stopListening();
    }
    return 'done';
  } finally {
    stopClientAbort?.();
    if (upstreamSpan) RequestTrace.finish(upstreamSpan, upstreamStatus, upstreamError);
  }
}
