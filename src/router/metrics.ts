// Router metrics: a ForwardObserver plus gauges read at scrape time. Core code stays metrics-free.
import { Counter, Gauge, type Registry } from 'prom-client';
import { LeanCounter, LeanHistogram } from '../common/lean-metrics.js';
import type { ForwardObserver } from '../proxy/forward.js';
import type { DisaggObserver } from '../proxy/disagg.js';
import type { Scheduler } from '../scheduler/scheduler.js';
import type { Alarm, Verdict } from '../feedback/verifier.js';

export interface RouterMetricsSources {
  scheduler: Scheduler;
  instances: () => Array<{ id: string; model: string; healthy: boolean; dpSize: number; role: string }>;
  queueDepth: () => number;
  tokenizerStats: () => { hits: number; misses: number; encodedChars: number };
  /** Open hit-prediction alarms (closed-loop check). */
  alarms: () => Alarm[];
}

export interface RouterMetrics extends ForwardObserver, DisaggObserver {
  tokenized(model: string, seconds: number, tokens: number): void;
  staleFreed(n: number): void;
  rejected(model: string, status: number): void;
  denied(routeClass: string, status: number): void;
  /** A client connection closed at once because server.max_connections were open. */
  connectionRefused(): void;
  /** The closed-loop check judged one response (error = reported - predicted cached tokens). */
  hitJudged(instance: string, verdict: Verdict | 'unverified', errorTokens: number | null): void;
}

/**
 * A labelled metric's child for these label values, made once per key: the request path observes
 * several times per request (lean children: no label hashing per call, src/common/lean-metrics.ts).
 */
function byLabels<T>(make: (key: string) => T): (key: string) => T {
  const children = new Map<string, T>();
  return (key) => {
    let c = children.get(key);
    if (c === undefined) children.set(key, (c = make(key)));
    return c;
  };
}

type RequestPathMetrics = Pick<RouterMetrics, 'routed' | 'firstByte' | 'finished' | 'tokenized'>;

/** The request path's histograms and counter: observed several times per request, through lean children. */
function requestPathMetrics(reg: Registry, modelOf: (instance: string) => string): RequestPathMetrics {
  const requests = new LeanCounter({
    name: 'kvrouter_requests_total',
    help: 'Proxied requests by model, policy, instance and status',
    labelNames: ['model', 'policy', 'instance', 'status'],
    registers: [reg],
  });
  const overhead = new LeanHistogram({
    name: 'kvrouter_routing_seconds',
    help: 'Time from request receipt to a booked routing decision (body read, tokenization, index walk, selection)',
    labelNames: ['model'],
    buckets: [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1],
    registers: [reg],
  });
  const tokenize = new LeanHistogram({
    name: 'kvrouter_tokenize_seconds',
    help: 'Chat template rendering and tokenization time',
    labelNames: ['model'],
    buckets: [0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5],
    registers: [reg],
  });
  const ttft = new LeanHistogram({
    name: 'kvrouter_upstream_ttft_seconds',
    help: 'Time from dispatch to the first upstream byte',
    labelNames: ['instance'],
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [reg],
  });
  const duration = new LeanHistogram({
    name: 'kvrouter_request_duration_seconds',
    help: 'Whole request time through the router',
    labelNames: ['model', 'outcome'],
    buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
    registers: [reg],
  });
  const overlap = new LeanHistogram({
    name: 'kvrouter_overlap_tokens',
    help: 'Cached prefix tokens on the chosen instance (any own tier)',
    labelNames: ['model'],
    buckets: [0, 16, 64, 256, 1024, 4096, 16384, 65536, 262144],
    registers: [reg],
  });
  const promptTokens = new LeanHistogram({
    name: 'kvrouter_prompt_tokens',
    help: 'Prompt length in tokens',
    labelNames: ['model'],
    buckets: [16, 64, 256, 1024, 4096, 16384, 65536, 262144],
    registers: [reg],
  });
  const overheadOf = byLabels((model) => overhead.child({ model }));
  const overlapOf = byLabels((model) => overlap.child({ model }));
  const promptTokensOf = byLabels((model) => promptTokens.child({ model }));
  const ttftOf = byLabels((instance) => ttft.child({ instance }));
  const tokenizeOf = byLabels((model) => tokenize.child({ model }));
  const durationOf = byLabels((key) => {
    const [model, outcome] = key.split('\u0000');
    return duration.child({ model, outcome });
  });
  const requestsOf = byLabels((key) => {
    const [model, policy, instance, status] = key.split('\u0000');
    return requests.child({ model, policy, instance, status });
  });
  return {
    routed(d, attempt, routingMs) {
      if (attempt > 0) return; // a retry is the same request: count it once
      const model = modelOf(d.chosen!.instance);
      overheadOf(model).observe(routingMs / 1000);
      overlapOf(model).observe(Math.min(d.isl, Math.max(d.chosen!.disk, d.chosen!.shared) * d.blockSize));
      promptTokensOf(model).observe(d.isl);
    },
    firstByte(instance, ms, stream) {
      if (stream) ttftOf(instance).observe(ms / 1000); // non-streaming bodies arrive at the end
    },
    finished(instance, status, outcome, ms, policy) {
      const model = instance ? modelOf(instance) : 'unknown';
      requestsOf(`${model}\u0000${policy}\u0000${instance ?? 'none'}\u0000${status}`).inc();
      durationOf(`${model}\u0000${outcome}`).observe(ms / 1000);
    },
    tokenized(model, seconds) {
      tokenizeOf(model).observe(seconds);
    },
  };
}

type EventMetrics = Pick<
  RouterMetrics,
  | 'retried'
  | 'healthChanged'
  | 'staleFreed'
  | 'rejected'
  | 'denied'
  | 'connectionRefused'
  | 'disaggPath'
  | 'prefillFailed'
>;

/** Counters of events off the happy path: retries, health changes, refusals, disaggregation paths. */
function eventMetrics(reg: Registry): EventMetrics {
  const retries = new Counter({
    name: 'kvrouter_retries_total',
    help: 'Attempts retried on another instance, by the instance that failed',
    labelNames: ['instance'],
    registers: [reg],
  });
  const health = new Counter({
    name: 'kvrouter_instance_health_events_total',
    help: 'Ejections and readmissions',
    labelNames: ['instance', 'event'],
    registers: [reg],
  });
  const stale = new Counter({
    name: 'kvrouter_stale_bookings_freed_total',
    help: 'Bookings released by the stale sweep (a caller never freed them)',
    registers: [reg],
  });
  const rejected = new Counter({
    name: 'kvrouter_rejected_requests_total',
    help: 'Requests answered by the router itself with an error status',
    labelNames: ['model', 'status'],
    registers: [reg],
  });
  const refusedConnections = new Counter({
    name: 'kvrouter_connections_refused_total',
    help: 'Client connections closed at once because server.max_connections were open',
    registers: [reg],
  });
  const denied = new Counter({
    name: 'kvrouter_auth_denied_total',
    help: 'Requests refused by access control, by route class (api, admin) and status (401, 403, 429)',
    labelNames: ['route_class', 'status'],
    registers: [reg],
  });
  const disaggPaths = new Counter({
    name: 'kvrouter_disagg_requests_total',
    help: 'Disaggregated models: attempts by prefill path (remote, local) and reason (remote, header, cached_tail, short_prompt, no_prefill_instance, prefill_busy, prefill_failed, untokenized)',
    labelNames: ['model', 'path', 'reason'],
    registers: [reg],
  });
  const prefillFailures = new Counter({
    name: 'kvrouter_disagg_prefill_failures_total',
    help: 'Prefill legs that failed (transport error, non-2xx, timeout), by prefill instance',
    labelNames: ['model', 'instance'],
    registers: [reg],
  });
  return {
    retried(instance) {
      retries.inc({ instance });
    },
    healthChanged(instance, event) {
      health.inc({ instance, event });
    },
    staleFreed(n) {
      stale.inc(n);
    },
    rejected(model, status) {
      rejected.inc({ model, status: String(status) });
    },
    denied(routeClass, status) {
      denied.inc({ route_class: routeClass, status: String(status) });
    },
    connectionRefused() {
      refusedConnections.inc();
    },
    disaggPath(model, remote, reason) {
      disaggPaths.inc({ model, path: remote ? 'remote' : 'local', reason });
    },
    prefillFailed(model, instance) {
      prefillFailures.inc({ model, instance });
    },
  };
}

/** Per-instance gauges read at scrape time: role, health, booked load. */
function instanceGauges(reg: Registry, src: RouterMetricsSources): void {
  new Gauge({
    name: 'kvrouter_instance_role',
    help: "Always 1: each instance's serving role (both, prefill, decode) as a label",
    labelNames: ['instance', 'model', 'role'],
    registers: [reg],
    collect() {
      this.reset();
      for (const i of src.instances()) this.set({ instance: i.id, model: i.model, role: i.role }, 1);
    },
  });
  new Gauge({
    name: 'kvrouter_instance_healthy',
    help: '1 when the instance receives traffic (healthy or on probation), 0 when ejected',
    labelNames: ['instance', 'model'],
    registers: [reg],
    collect() {
      this.reset();
      for (const i of src.instances()) this.set({ instance: i.id, model: i.model }, i.healthy ? 1 : 0);
    },
  });
  const perInstance = (name: string, help: string, pick: (l: ReturnType<Scheduler['active']['load']>) => number) =>
    new Gauge({
      name,
      help,
      labelNames: ['instance'],
      registers: [reg],
      collect() {
        this.reset();
        for (const i of src.instances()) {
          let v = 0;
          for (let r = 0; r < i.dpSize; r++) v += pick(src.scheduler.active.load(i.id, r));
          this.set({ instance: i.id }, v);
        }
      },
    });
  perInstance('kvrouter_active_prefill_tokens', 'Booked prompt tokens not yet prefilled', (l) => l.activePrefillTokens);
  perInstance(
    'kvrouter_active_blocks',
    'KV blocks held by in-flight requests (shared prefixes once)',
    (l) => l.activeBlocks,
  );
  perInstance('kvrouter_active_requests', 'In-flight requests', (l) => l.activeRequests);
}

/** The closed-loop hit check: per-response verdicts and errors, and the open alarms. */
function hitPredictionMetrics(reg: Registry, src: RouterMetricsSources): Pick<RouterMetrics, 'hitJudged'> {
  const ERR = [16, 64, 256, 1024, 4096, 16384];
  const predictionError = new LeanHistogram({
    name: 'kvrouter_hit_prediction_error_tokens',
    help: "Engine-reported cached tokens minus the router's prediction, per response with usage (negative: the router over-predicted)",
    labelNames: ['instance'],
    buckets: [...ERR.map((x) => -x).reverse(), 0, ...ERR],
    registers: [reg],
  });
  const predictions = new LeanCounter({
    name: 'kvrouter_hit_predictions_total',
    help: 'Responses judged by the closed-loop hit check: agree, over (predicted more than reported), under, unverified (no cached count in the usage)',
    labelNames: ['instance', 'verdict'],
    registers: [reg],
  });
  new Gauge({
    name: 'kvrouter_hit_prediction_alarm',
    help: "1 while the instance's cache predictions are persistently wrong in this direction (see the log line and /health)",
    labelNames: ['instance', 'direction'],
    registers: [reg],
    collect() {
      this.reset();
      for (const a of src.alarms()) this.set({ instance: a.instance, direction: a.direction }, 1);
    },
  });
  const predictionsOf = byLabels((key) => {
    const [instance, verdict] = key.split('\u0000');
    return predictions.child({ instance, verdict });
  });
  const predictionErrorOf = byLabels((instance) => predictionError.child({ instance }));
  return {
    hitJudged(instance, verdict, errorTokens) {
      predictionsOf(`${instance}\u0000${verdict}`).inc();
      if (errorTokens !== null) predictionErrorOf(instance).observe(errorTokens);
    },
  };
}

/** Router-wide state read at scrape time: learned prefill speeds, bookings, queue, tokenizer cache. */
function stateGauges(reg: Registry, src: RouterMetricsSources): void {
  new Gauge({
    name: 'kvrouter_instance_prefill_tokens_per_second',
    help: 'Prefill speed the time cost model uses per instance and DP rank, learned from streamed first-token times (absent until learned)',
    labelNames: ['instance', 'dp_rank'],
    registers: [reg],
    collect() {
      this.reset();
      for (const r of src.scheduler.rates.snapshot())
        this.set({ instance: r.instance, dp_rank: String(r.dpRank) }, r.tokensPerS);
    },
  });
  new Gauge({
    name: 'kvrouter_bookings',
    help: 'Open bookings (returns to 0 when idle)',
    registers: [reg],
    collect() {
      this.set(src.scheduler.active.size);
    },
  });
  new Gauge({
    name: 'kvrouter_queue_depth',
    help: 'Requests waiting for a non-busy, healthy instance, or for a busy holder of their prefix',
    registers: [reg],
    collect() {
      this.set(src.queueDepth());
    },
  });
  new Counter({
    name: 'kvrouter_tokenizer_segment_cache_lookups_total',
    help: 'Tokenizer segment cache lookups by result',
    labelNames: ['result'],
    registers: [reg],
    collect() {
      const s = src.tokenizerStats();
      this.reset();
      this.inc({ result: 'hit' }, s.hits);
      this.inc({ result: 'miss' }, s.misses);
    },
  });
  new Counter({
    name: 'kvrouter_tokenizer_encoded_chars_total',
    help: 'Characters the native tokenizer was given (segment-cache misses; a prompt over max_prompt_tokens only up to where counting stopped)',
    registers: [reg],
    collect() {
      this.reset();
      this.inc(src.tokenizerStats().encodedChars);
    },
  });
}

/** All router metrics, registered family by family (the order /metrics lists them in). */
export function createRouterMetrics(
  reg: Registry,
  src: RouterMetricsSources,
  modelOf: (instance: string) => string,
): RouterMetrics {
  const requestPath = requestPathMetrics(reg, modelOf);
  const events = eventMetrics(reg);
  instanceGauges(reg, src);
  const hits = hitPredictionMetrics(reg, src);
  stateGauges(reg, src);
  return { ...requestPath, ...events, ...hits };
}
