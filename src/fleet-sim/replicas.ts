// The router replicas as the simulation calls them: every call names the replica, the request (by
// index) and the virtual now, so that an implementation may run the replicas elsewhere (bench
// fleet's worker threads, src/bench/fleet/router-threads.ts) as long as each replica gets its calls
// in the order the simulation makes them. `InlineReplicas` is the one that runs them: RouterNodes
// on the caller's thread, each keeping what it needs of a request between its calls (route fields,
// the last decision, the booked prediction), and each KV batch decoded once for all of them.
import { decodePayload, decodeValue, type PayloadResult } from '../events/decode/index.js';
import { reuseDecodeSlab } from '../events/decode/fast-unpack.js';
import type { EngineLoad } from '../engine-load/load-view.js';
import { judgedPrediction, type Prediction } from '../feedback/loop.js';
import type { RouteFields } from '../router/route-input.js';
import { waitOn } from '../scheduler/hold.js';
import type { Decision } from '../scheduler/scheduler.js';
import { RouterNode } from './router-node.js';
import type { RouterPlan, RouterTally } from './types.js';

/** What the simulation reads of one routing decision (the object may be reused by the next call). */
export interface Routed {
  /** The chosen engine's index, or -1: nothing chosen (the request waits or is refused). */
  engine: number;
  /** The decision's predicted TTFT (ms; the time cost's `ttftMs`) when an engine was chosen. */
  ttftMs: number;
  /** Candidates the decision scored. */
  candidates: number;
  /** Nothing chosen: some candidate was under its busy thresholds (waitOn). */
  anyFree: boolean;
  /** Nothing chosen: the busy engine (index) it is worth waiting for, or -1 (waitOn's holder). */
  holder: number;
  /** The holder's dp rank. */
  holderRank: number;
  /** Real-clock ms of the decision (the stopwatch's; 0 without one). */
  wallMs: number;
}

/** A Routed to reuse for every answer (an implementation fills it in place). */
export function blankRouted(): Routed {
  return { engine: -1, ttftMs: 0, candidates: 0, anyFree: false, holder: -1, holderRank: 0, wallMs: 0 };
}

/** The R router replicas of a simulation: the calls of the proxy path, the KV events, scrapes and sync. */
export interface RouterReplicas {
  /** Request i reached replica r: its route fields are built (as the proxy path builds them). */
  arrive(r: number, i: number, tokens: Uint32Array, sessionKey: string | null, now: number): void;
  /** Replica r decides for request i; `hold`: it may wait in the capacity queue for a busy holder. */
  decide(r: number, i: number, now: number, hold: boolean): Routed;
  /** Request i's last decision (its engine chosen) is booked as booking `bookingId(r, i)`. */
  book(r: number, i: number, now: number): void;
  /** Its first token passed through: the booking's prefill is done. */
  firstToken(r: number, i: number, now: number): void;
  /** It ended with the engine's usage: the closed-loop check, then its booking is freed. */
  finished(r: number, i: number, promptTokens: number, cachedTokens: number | null, now: number): void;
  /** It failed or was cut after its booking: the booking is freed without a report. */
  abandoned(r: number, i: number, now: number): void;
  /** It ended before a booking (refused with a 503 when `refused`, or cut): forgotten. */
  dropped(r: number, i: number, now: number, refused: boolean): void;
  /** Engine k's KV batch (msgpack bytes, read during the call only; or its decoded values) for every replica. */
  kvBatch(engine: number, payload: Uint8Array | null, value: unknown, now: number): void;
  /** Engine k's scraped loads for every replica. */
  scrape(engine: number, loads: Map<number, EngineLoad>, now: number): void;
  /** The index's expiry sweep on every replica. */
  expire(now: number): void;
  /** Replica r receives a peer's sync message (RouterNode.receiveSync). */
  receiveSync(r: number, bytes: Uint8Array, now: number): string | null | false;
  /** Final tallies, by replica. */
  close(): RouterTally[];
}

/** The booking id of request i at replica r (one per request: a request books once). */
export const bookingId = (r: number, i: number): string => `r${r}-q${i}`;

/** What a replica keeps of a request between its calls. */
interface Kept {
  fields: RouteFields & { ttlMs: number };
  prediction: Prediction | null;
}

export interface InlineReplicasOptions {
  plan: RouterPlan;
  ids: readonly string[];
  /** Replica r's id, seed and index are those of replica `first + r` of the fleet. */
  first?: number;
  count: number;
  seed: number;
  reserveRecords: number;
  /** Replica r publishes its encoded sync messages here (null: no replica sync). */
  publish: ((r: number, bytes: Uint8Array) => void) | null;
  /** A real clock (ms) read around each decision (the decision-time figure only). */
  stopwatch?: () => number;
  /** Every decision of request i (a decision log), inline only. */
  onDecision?(i: number, d: Decision, now: number): void;
}

/** RouterNodes on this thread: the replicas of a simulation, or one worker's share of them. */
export class InlineReplicas implements RouterReplicas {
  readonly nodes: RouterNode[] = [];
  private readonly kept: Map<number, Kept>[] = [];
  /** Each replica's last decision (book follows its decide). */
  private readonly last: (Decision | null)[] = [];
  private readonly engineIndex: Map<string, number>;
  private readonly routed: Routed = blankRouted();
  /** Virtual now of the call in progress (each call brings its own). */
  private t = 0;

  constructor(private readonly o: InlineReplicasOptions) {
    const now = () => this.t;
    const first = o.first ?? 0;
    for (let r = 0; r < o.count; r++) {
      const g = first + r;
      const publish = o.publish ? (bytes: Uint8Array) => o.publish!(r, bytes) : null;
      this.nodes.push(new RouterNode(g, `r${g}`, o.plan, o.ids, o.seed + g, now, publish, o.reserveRecords));
      this.kept.push(new Map());
      this.last.push(null);
    }
    this.engineIndex = new Map(o.ids.map((id, k) => [id, k] as const));
  }

  arrive(r: number, i: number, tokens: Uint32Array, sessionKey: string | null, now: number): void {
    this.t = now;
    this.kept[r].set(i, { fields: this.nodes[r].route(tokens, sessionKey), prediction: null });
  }

  decide(r: number, i: number, now: number, hold: boolean): Routed {
    this.t = now;
    const fields = this.kept[r].get(i)!.fields;
    const sw = this.o.stopwatch;
    const t0 = sw ? sw() : 0;
    // (Only a decision hook reads the other candidates' scores.)
    const d = this.nodes[r].decide(fields, now, hold, this.o.onDecision ? 'all' : 'decision');
    const out = this.routed;
    out.wallMs = sw ? sw() - t0 : 0;
    this.o.onDecision?.(i, d, now);
    out.candidates = d.scored;
    this.last[r] = d;
    if (d.chosen) {
      out.engine = this.engineIndex.get(d.chosen.instance)!;
      out.ttftMs = d.chosen.ttftMs;
      return out;
    }
    out.engine = -1;
    const w = waitOn(d);
    out.anyFree = w.anyFree;
    out.holder = w.holder ? this.engineIndex.get(w.holder.instance)! : -1;
    out.holderRank = w.holder ? w.holder.dpRank : 0;
    return out;
  }

  book(r: number, i: number, now: number): void {
    this.t = now;
    const d = this.last[r]!;
    const k = this.kept[r].get(i)!;
    k.prediction = judgedPrediction(d);
    this.nodes[r].book(d, k.fields.ns, bookingId(r + (this.o.first ?? 0), i), k.fields.ttlMs, now);
    this.last[r] = null;
  }

  firstToken(r: number, i: number, now: number): void {
    this.t = now;
    this.nodes[r].firstToken(bookingId(r + (this.o.first ?? 0), i), now);
  }

  finished(r: number, i: number, promptTokens: number, cachedTokens: number | null, now: number): void {
    this.t = now;
    const k = this.kept[r].get(i)!;
    this.kept[r].delete(i);
    this.nodes[r].finished(bookingId(r + (this.o.first ?? 0), i), k.prediction, { promptTokens, cachedTokens });
  }

  abandoned(r: number, i: number, now: number): void {
    this.t = now;
    this.kept[r].delete(i);
    this.nodes[r].abandoned(bookingId(r + (this.o.first ?? 0), i));
  }

  dropped(r: number, i: number, now: number, refused: boolean): void {
    this.t = now;
    this.kept[r].delete(i);
    if (refused) this.nodes[r].tally.refused++;
  }

  kvBatch(engine: number, payload: Uint8Array | null, value: unknown, now: number): void {
    const batch = this.decode(engine, payload, value);
    for (let r = 0; r < this.nodes.length; r++) this.applyBatch(r, engine, batch, now);
    // Every replica applied the batch and kept nothing of its decoded lists (the index copies).
    if (payload) reuseDecodeSlab();
  }

  /**
   * Engine k's KV batch decoded once for all replicas: every replica registers engine k's stream
   * from the same config, so their decoders agree (the same registration, the same batches in the
   * same order), and each applier only reads the batch. Its lists live in the decoder's slab until
   * reuseDecodeSlab(); nothing of the payload is kept.
   */
  decode(engine: number, payload: Uint8Array | null, value: unknown): PayloadResult {
    const first = this.nodes[0].ingests[engine];
    return payload ? decodePayload(payload, first.ctx) : decodeValue(value, first.ctx);
  }

  /** Replica r applies engine k's decoded batch. */
  applyBatch(r: number, engine: number, batch: PayloadResult, now: number): void {
    this.t = now;
    this.nodes[r].ingests[engine].applyDecoded(batch, false);
  }

  scrape(engine: number, loads: Map<number, EngineLoad>, now: number): void {
    for (let r = 0; r < this.nodes.length; r++) this.scrapeOne(r, engine, loads, now);
  }

  /** Replica r reads engine k's scraped loads. */
  scrapeOne(r: number, engine: number, loads: Map<number, EngineLoad>, now: number): void {
    this.t = now;
    this.nodes[r].engineLoads.set(this.o.ids[engine], loads);
  }

  expire(now: number): void {
    for (let r = 0; r < this.nodes.length; r++) this.expireOne(r, now);
  }

  /** Replica r's expiry sweep. */
  expireOne(r: number, now: number): void {
    this.t = now;
    this.nodes[r].indexer.expire(now);
  }

  receiveSync(r: number, bytes: Uint8Array, now: number): string | null | false {
    this.t = now;
    return this.nodes[r].receiveSync(bytes);
  }

  close(): RouterTally[] {
    return this.nodes.map((n) => n.close());
  }
}
