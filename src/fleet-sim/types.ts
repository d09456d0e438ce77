// What a fleet simulation takes and what it returns. Inputs are plain data and the real parts
// (engine cores, the router's parsed config); outputs are per-request records and per-engine and
// per-router tallies, every one a function of the inputs except the fields named `wall*`.
import type { RouterConfig } from '../config/schema.js';
import type { EngineCore } from '../engine-sim/core/engine-core.js';
import type { FeedbackOptions } from '../feedback/loop.js';
import type { RequestRouting } from '../router/overrides.js';
import type { Decision } from '../scheduler/scheduler.js';
import type { RouterReplicas } from './replicas.js';

/** One client request, times already in virtual ms (arrival scaling is the caller's). */
export interface FleetRequest {
  /** Open-loop send time; ignored when `after` is set. */
  atMs: number;
  /** A follow-up turn: sent `thinkMs` after request `index` completed. */
  after: { index: number; thinkMs: number } | null;
  maxTokens: number;
  /** The router's session header (the `session` policy reads it). */
  sessionKey: string | null;
}

/** How KV events travel from an engine to the routers. */
export type EventWire =
  /** msgpack bytes from the engine-sim vLLM encoder, decoded by each router's StreamIngest (the ZMQ payload path). */
  | 'bytes'
  /** The encoder's values handed to each router's decoder without the msgpack round trip. */
  | 'values';

/** One router replica's configuration, as the server derives it from its YAML. */
export interface RouterPlan {
  cfg: RouterConfig;
  /** The model's routing with no override headers (`applyOverrides({}, effectiveRouting(cfg, model))`). */
  routing: RequestRouting;
  feedback: FeedbackOptions;
  /** Whether the routers subscribe to the engines' KV events (cache-blind variants do not). */
  kvEvents: boolean;
}

export interface FleetInput {
  requests: readonly FleetRequest[];
  /** Prompt token ids of request i exactly as the engine sees them (called once per send). */
  prompt(i: number): Uint32Array;
  /** The engines, in order; engine i is instance `ids[i]`. */
  engines: readonly EngineCore[];
  ids: readonly string[];
  model: string;
  blockSize: number;
  /** Router replicas; request i goes to replica i mod routers (a plain L4 balancer). */
  routers: number;
  router: RouterPlan;
  /** Seed of each replica's random choices when the config sets none (replica r: seed + r). */
  seed: number;
  /**
   * A routed request reaches its engine this long after the client sent it (ms): the client ->
   * router -> engine hops and the router's own time, which otherwise take no virtual time.
   */
  requestLatencyMs: number;
  /** Engine -> router delivery of a KV event batch (ms after the pass that made it starts). */
  kvEventDelayMs: number;
  eventWire: EventWire;
  /** Replica sync delay (ms), or null: the replicas do not sync. */
  syncDelayMs: number | null;
  /**
   * Every this many virtual ms each engine's load gauges are scraped into every replica's
   * EngineLoadView (engine k at phase k/N of the interval), until the last request ends; null: no
   * scrapes (the routers' config has engine_metrics.scrape off). A scrape reads the core's state
   * as its last pass left it (the core computes a pass at its start).
   */
  scrapeIntervalMs: number | null;
  /** Requests still unfinished this long after the last open-loop send fail as timed out. */
  drainTimeoutMs: number;
  /**
   * Run the engines' quiet passes as windows (EngineCore.planQuiet; default true). False steps and
   * delivers every pass on its own: the same results, slower; tests compare the two.
   */
  quietWindows?: boolean;
  /**
   * A real clock (ms) read around each routing decision, for the decision-time figure only: its
   * readings never reach the simulation. Absent: decision times are not measured.
   */
  stopwatch?: () => number;
  /**
   * The replicas, when the caller runs them elsewhere (bench fleet's worker threads): built for this
   * input (its plan, ids, seed, routers; no replica sync) and closed by the simulation. Absent: the
   * simulation runs them inline (InlineReplicas).
   */
  replicas?: RouterReplicas;
  /** Called after every routing decision of request i (a decision log; the decision is not to be changed; inline replicas only). */
  onDecision?(i: number, d: Decision, now: number): void;
  /** Called after every finished request (ok, failed or refused) with the count so far. */
  onDone?(done: number): void;
}

export interface FleetRecord {
  index: number;
  router: number;
  /** Virtual send time (ms). */
  sentAt: number;
  ttftMs: number | null;
  e2eMs: number;
  /** 200, or 503 (refused: no capacity in time), or 0 (failed). */
  status: number;
  instance: string | null;
  /** The routing decision's predicted TTFT (ms; the time cost's `ttftMs`), for the prediction-error figures. */
  predictedTtftMs?: number;
  promptTokens: number;
  cachedTokens: number;
  completionTokens: number;
  error: string | null;
}

export interface EngineTally {
  id: string;
  /** Prompt tokens looked up in the prefix cache (every admission). */
  queries: number;
  gpuHits: number;
  hostHits: number;
  promptTokens: number;
  generationTokens: number;
  preemptions: number;
  requests: number;
  passes: number;
  /** Virtual ms with a pass running. */
  busyMs: number;
  /** KV event batches published. */
  batches: number;
}

export interface RouterTally {
  id: string;
  decisions: number;
  refused: number;
  /** KV events applied, by outcome (the router's kv_events_applied_total). */
  applied: Record<string, number>;
  /** The closed-loop hit check (kvrouter_hit_predictions_total and open alarms). */
  hitCheck: { agree: number; over: number; under: number; unverified: number; alarms: number };
  sync: { sent: number; received: number };
  /** Bookings still held at the end, local and remote (0: every booking was released). */
  openBookings: number;
  index: { namespaces: number; blocks: number; records: number; bytes: number };
}

export interface FleetOutput {
  records: FleetRecord[];
  engines: EngineTally[];
  routers: RouterTally[];
  /** Virtual ms from the first send to the last completion. */
  spanMs: number;
  /** Discrete events processed. */
  events: number;
  /** Engine scrapes taken (each delivered to every replica). */
  scrapes: number;
  /**
   * Real-clock decision times (µs) in decision order, with each decision's prompt length and
   * candidate count (empty without a stopwatch). Not deterministic: kept apart from the rest.
   */
  wallDecisions: { us: Float64Array; isl: Uint32Array; candidates: Uint32Array };
}
