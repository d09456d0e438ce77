// What a routing policy is: a value that says which inputs it reads, what stands in for it when an
// input is missing, and how it picks among the candidates that passed the filters.
import type { CandidateScore } from '../scheduler.js';

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
}

export interface PolicyContext {
  temperature: number;
  rand: () => number;
  /** Monotonic counter for round-robin, owned by the caller per pool. */
  nextTurn: () => number;
  sessionKey: string | null;
  target: string | null;
  /** Sibling co-location slack (fraction of the cheapest candidate's prefill time; 0 = off). */
  prefixAffinity: number;
  affinityBlocks: number;
  /**
   * Bounded load: a candidate whose in-flight requests would exceed this factor x the mean loses to
   * the cheapest one within the bound unless its cache saves at least half of the prefill there. 0 = off.
   */
  loadBound: number;
  /** The request's seq hashes (names its prefixes). */
  seq: BigUint64Array;
}

/** Index of the chosen candidate among `eligible`, or -1 for none. */
export type Picker = (eligible: readonly CandidateScore[], ctx: PolicyContext) => number;

export interface PolicySpec<N extends string = string> {
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
  readonly pick: Picker;
}

/** A policy literal with its name kept as a type (the registry derives `PolicyName` from it). */
export const definePolicy = <const N extends string>(p: PolicySpec<N>): PolicySpec<N> => p;
