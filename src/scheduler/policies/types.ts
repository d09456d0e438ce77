// What a routing policy is: a value that says which inputs it reads, what stands in for it when an
// input is missing, and how it picks among the candidates that passed the filters. A policy that
// remembers across requests (a peer's approximate prefix tree, its own load counters) declares a
// state factory and hooks; the Scheduler keeps one state per model pool and calls the hooks when a
// decision is booked, its first token arrives and it is freed. Time comes in as `now`: no clocks here.
import type { NamespaceId } from '../../indexer/namespace.js';
import type { Candidate, CandidateScore } from '../scheduler.js';
import type { CostWeights } from '../cost.js';

/** The inputs a policy reads; the router computes only these (SMG's `needs_request_text`, Dynamo's `WorkerInputs`). */
export interface PolicyInputs {
  /** The prompt's token ids (to hash its blocks). */
  readonly tokens: boolean;
  /** The KV-event index: what each instance holds, per medium and DP rank. */
  readonly index: boolean;
  /** The router's own predictions: the blocks it routed, inserted speculatively until events confirm them. */
  readonly predictions: boolean;
  /** A session key (header or the body's `user`). */
  readonly sessionKey: boolean;
  /** An instance named by the caller (x-kvrouter-target; admin only over HTTP). */
  readonly target: boolean;
  /** The request's text (RequestText): what the peers that route on characters read. */
  readonly text: boolean;
  /**
   * The engines' own scraped gauges per candidate (CandidateScore.engine: waiting and running
   * requests, KV usage), null when stale or never scraped. Needs engine_metrics.scrape.
   */
  readonly engineMetrics: boolean;
}

/**
 * The request as symbols: Unicode code points of its text (a prompt string; a chat's message
 * contents joined by spaces, as SMG extracts them), or its token ids where the router has no text
 * (a token-id prompt, the fleet simulator): SMG over gRPC and llm-d's tokenized path see tokens too.
 */
export interface RequestText {
  readonly kind: 'chars' | 'tokens';
  readonly symbols: Uint32Array;
}

export interface PolicyContext<S = unknown> {
  temperature: number;
  rand: () => number;
  /** Monotonic counter for round-robin, owned by the caller per pool. */
  nextTurn: () => number;
  sessionKey: string | null;
  target: string | null;
  /** Sibling co-location slack (fraction of the cheapest candidate's prefill time; 0 = off). */
  prefixAffinity: number;
  affinityBlocks: number;
  /** Co-location's equals need only be within the slack, whatever cached prefix they credit. */
  affinityAny: boolean;
  /**
   * Bounded load: a candidate whose in-flight requests would exceed this factor x the mean loses to
   * the cheapest one within the bound unless its cache saves at least half of the prefill there. 0 = off.
   */
  loadBound: number;
  /** Bounded load counts only the prefix the over-bound candidate alone holds (beyond the next best one's). */
  loadBoundUnique: boolean;
  /** kv: bounded load judges a request opening a session (a session key not routed before) as loadBoundUnique does. */
  loadBoundNewSession: boolean;
  /** kv, time cost: while every candidate has prefill queued, this x each candidate's own prefill is added to its cost. */
  recomputeWeightSaturated: number;
  /** The request's seq hashes (names its prefixes). */
  seq: BigUint64Array;
  /** The prompt's token ids (null unless the router has them: `needs.tokens`, or precomputed seq hashes only). */
  tokens: ArrayLike<number> | null;
  /** Prompt length in tokens (0 when the router did not tokenize). */
  isl: number;
  /** The request's hash namespace (model, block size, adapter, salt). */
  ns: NamespaceId;
  /** Null unless the policy declares `needs.text` (and the request has any). */
  text: RequestText | null;
  now: number;
  /** The policy's state for this pool (undefined for a stateless policy). */
  state: S;
  /**
   * What the pick wants its `booked` hook to have (e.g. the prompt's block hashes, so that they are
   * computed once): set by the pick, carried by the Decision.
   */
  memo: unknown;
  /** The scorer's load columns for `eligible` (absent: a caller without them, e.g. a test). */
  loads?: PickLoads | null;
}

/**
 * What the cost picks read of each candidate of `of`, by index: its in-flight requests and queued
 * prefill tokens (its `load`'s) and its score's cost terms, as the scorer wrote them. A pick reads
 * arrays instead of each candidate's (shared, cold) Load and score objects, and the scheduler need
 * not make a score object per candidate for a pick that reads nothing else (PolicySpec.pickScores).
 * Valid for `of` and for copies of it in the same order only.
 */
export interface PickLoads {
  /** The candidates (only their names are read, for rendezvous hashing without `names`). */
  readonly of: readonly Candidate[];
  /** How many: `of.length` (the columns may be longer). */
  readonly n: number;
  readonly requests: Float64Array;
  readonly prefill: Float64Array;
  /** Each one's name hash as [lo, hi] at 2 x its index (pickers.ts nameHash), or null: read by name. */
  readonly names: Uint32Array | null;
  /** CandidateScore's cost, creditedBlocks, prefillMs, queueMs and hybridPrefix (absent: 0). */
  readonly cost: Float64Array;
  readonly credited: Float64Array;
  readonly prefillMs: Float64Array;
  readonly queueMs: Float64Array;
  readonly hybrid: Float64Array;
}

/** Index of the chosen candidate among `eligible`, or -1 for none. */
export type Picker = (eligible: readonly CandidateScore[], ctx: PolicyContext) => number;

/** A decision being booked, as the `booked` hook sees it. */
export interface BookedEvent {
  readonly requestId: string;
  readonly chosen: CandidateScore;
  readonly memo: unknown;
  readonly isl: number;
  readonly now: number;
}

/** Where a peer's algorithm was read: a reimplementation names its source and the defaults it keeps. */
export interface PeerSource {
  /** Repository and file(s) read. */
  readonly source: string;
  /** Commit or release read. */
  readonly version: string;
  /** The defaults kept, in one line (docs/benchmarks.md's table). */
  readonly defaults: string;
}

export interface PolicySpec<N extends string = string, S = unknown> {
  readonly name: N;
  /** One line for the configuration reference and the explanation. */
  readonly summary: string;
  readonly needs: PolicyInputs;
  /**
   * The policy that serves a request this one cannot (it needs tokens the router does not have:
   * content it cannot tokenize). Null: it needs nothing a request can lack.
   */
  readonly fallback: string | null;
  /** Whether the busy filter applies (an explicit target bypasses it: the operator asked for it). */
  readonly busyFilter: boolean;
  /** Only the admin may choose it over HTTP (it names instances). */
  readonly adminOnly: boolean;
  /** Which routing key bounds the speculative insert of a routed prompt's blocks. */
  readonly predictionTtlKey: 'speculative_ttl_ms' | 'approx_ttl_ms';
  /**
   * A peer's own lifetime for the speculative insert, whatever the routing keys say (0: it inserts
   * nothing, as Dynamo without predict-on-route and the peers that keep their own tables).
   */
  readonly predictionTtlMs?: number;
  /**
   * A peer's own cost weights, applied over routing's (Dynamo's block cost): the cost is then the
   * peer's alone, without the engine-load blend kv adds under engine_metrics.scrape.
   */
  readonly cost?: Partial<CostWeights>;
  /**
   * Set for a peer's algorithm reimplemented as a baseline. A peer reads the index as it stands:
   * no eviction-aware credit, no closed-loop distrust and no engine-load blend (kvrouter's own).
   */
  readonly peer?: PeerSource;
  /** The state kept per model pool across requests (made on first use). */
  createState?(): S;
  pick(eligible: readonly CandidateScore[], ctx: PolicyContext<S>): number;
  /**
   * The same pick over the scorer's columns alone, for a policy whose pick reads nothing else of
   * the candidates: the scheduler then makes a score object only for the candidate chosen
   * (RouteInput.scores). Must choose as `pick` does over the same candidates and draws.
   */
  pickScores?(scores: PickLoads, ctx: PolicyContext<S>): number;
  /** The decision was booked (the router sends the request). */
  booked?(state: S, e: BookedEvent): void;
  /** The booked request's first token arrived. */
  prefillDone?(state: S, requestId: string): void;
  /** The booked request ended (or was swept). */
  freed?(state: S, requestId: string): void;
  /** An instance left the pool. */
  dropInstance?(state: S, instance: string): void;
}

/** A policy literal with its name kept as a type (the registry derives `PolicyName` from it). */
export const definePolicy = <const N extends string, S = unknown>(p: PolicySpec<N, S>): PolicySpec<N, S> => p;
