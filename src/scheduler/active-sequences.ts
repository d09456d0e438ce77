// In-flight load per (instance, dp rank): prefill tokens not yet computed (and their attention
// work over their context, cost.ts), the requests decoding and their context, and KV blocks held by
// running requests, and the un-prefilled bookings in booking order (the oldest, the queue head, is
// the prefill the engine is computing: the time cost credits its progress). A prompt block shared
// by several in-flight requests on the same worker counts once (refcounted). Every booking is released exactly once: prefill at the first token, blocks at
// completion, error or abort; a stale sweep frees bookings a caller never released.
import { WorkerMap } from '../common/worker-map.js';
import type { SpeculativeInsert } from '../indexer/block-index.js';
import type { NamespaceId } from '../indexer/namespace.js';
import { grow, hashView } from '../indexer/layout.js';
import { U64Table } from '../indexer/u64-table.js';
import { BookedBlocks } from './booked-blocks.js';
import { attentionWork } from './cost.js';

const RC = 4; // table row: [lo, hi, used, refcount]
/** Blocks whose rows in the workers' shared table (BookedBlocks) are loaded at once, ahead of their writes. */
const PREFETCH_WINDOW = 64;
/**
 * Idle workers' emptied tables kept for the next worker that books (at most this many): a worker
 * whose last request ends is deleted, and a fleet's workers mostly run one request at a time, so
 * each booking made a table and grew it to its prompt (new arrays, garbage, rehashes).
 */
const SPARE_TABLES = 1024;

export interface Load {
  activePrefillTokens: number;
  /** attentionWork of those prefill tokens (token pairs: each new token with its context). */
  activeAttention: number;
  activeBlocks: number;
  activeRequests: number;
  /** In-flight requests past their first token. */
  decodingRequests: number;
  /** Their prompt tokens (the context each decode step reads). */
  decodingContext: number;
}

export interface Booking {
  readonly id: string;
  readonly instance: string;
  readonly dpRank: number;
  readonly blocks: BigUint64Array;
  readonly prefillTokens: number;
  /** Prompt tokens before its prefill (cached, as predicted): the context its prefill attends to. */
  readonly contextTokens: number;
  /** Un-prefilled tokens booked on the worker before this one (what it queues behind), less the queue head's share predicted computed. */
  readonly aheadTokens: number;
  /** Their attention work. */
  readonly aheadAttention: number;
  /** Requests decoding on the worker when this one was booked. */
  readonly decodingAhead: number;
  /** Their context tokens. */
  readonly decodingContextAhead: number;
  /** The pool (model) whose rate its first token teaches. */
  readonly pool: string;
  readonly createdAt: number;
  prefillDone: boolean;
  /** When its first token was seen by the proxy (streamed responses only): the rate sample's time. */
  firstTokenAt?: number;
  /** Prompt tokens the engine reported it computed (prompt - cached), once the response ended. */
  reportedUncached?: number;
  /** Its speculative insert in the index (null: none), withdrawn if its attempt fails (speculation.ts). */
  speculative: { ns: NamespaceId; insert: SpeculativeInsert } | null;
}

class WorkerLoad {
  /** Bookings before their first token, in booking order (the engine's queue as the router sees it). */
  readonly queued = new Set<Booking>();
  prefillTokens = 0;
  attention = 0;
  requests = 0;
  decoding = 0;
  decodingContext = 0;

  /** Its id in `booked` (the workers holding each block). */
  readonly id: number;

  constructor(
    private readonly booked: BookedBlocks,
    instance: string,
    dpRank: number,
    /** Its in-flight blocks (empty): a new table, or an idle worker's (ActiveSequences.spare). */
    readonly blocks: U64Table,
  ) {
    this.id = booked.idOf(instance, dpRank, blocks);
  }

  /** The oldest booking still before its first token (undefined: none queued). */
  head(): Booking | undefined {
    return this.queued.size > 0 ? this.queued.values().next().value : undefined;
  }

  hold(blocks: BigUint64Array): void {
    const v = new Int32Array(blocks.buffer, blocks.byteOffset, blocks.length * 2);
    for (let i = 0; i < blocks.length; i++) {
      if ((i & (PREFETCH_WINDOW - 1)) === 0) this.booked.prefetch(v, i, Math.min(blocks.length, i + PREFETCH_WINDOW));
      const s = this.blocks.insert(v[2 * i], v[2 * i + 1]);
      const d = this.blocks.data;
      if (this.blocks.created) this.booked.add(this.id, v[2 * i], v[2 * i + 1], i === 0);
      d[s * RC + 3]++;
    }
  }

  release(blocks: BigUint64Array): void {
    const v = new Int32Array(blocks.buffer, blocks.byteOffset, blocks.length * 2);
    for (let i = 0; i < blocks.length; i++) {
      if ((i & (PREFETCH_WINDOW - 1)) === 0) this.booked.prefetch(v, i, Math.min(blocks.length, i + PREFETCH_WINDOW));
      const s = this.blocks.find(v[2 * i], v[2 * i + 1]);
      if (s < 0) continue;
      const d = this.blocks.data;
      if (--d[s * RC + 3] <= 0) {
        this.booked.remove(this.id, v[2 * i], v[2 * i + 1]);
        this.blocks.removeSlot(s);
      }
    }
  }
}

/** The held prefixes of the prompt of one ActiveSequences.heldPrefixes() call (valid until the next call or booking change). */
export class HeldPrefixes {
  constructor(private readonly booked: BookedBlocks) {}

  /** Blocks of the prompt's prefix the worker's in-flight requests hold. */
  of(instance: string, dpRank: number): number {
    return this.booked.heldPrefixOf(instance, dpRank);
  }

  /** The same for a candidate list, in its order: no per-candidate lookup when the list is the one passed last time. */
  inOrder(candidates: ReadonlyArray<{ instance: string; dpRank: number }>): Int32Array {
    return this.booked.heldPrefixesOf(candidates);
  }

  /** Worker `id`'s (ActiveSequences.idsOf; 0 for -1): a scorer asks only for the workers with requests in flight. */
  ofId(id: number): number {
    return this.booked.heldPrefix(id);
  }

  /** The same for workers by id (ActiveSequences.idsOf), in order. */
  ofIds(ids: Int32Array, into?: Int32Array): Int32Array {
    return this.booked.heldPrefixesOfIds(ids, into);
  }
}

/** LoadColumns.head's row: the queue head's creation time, tokens and attention ahead of it, its own prefill tokens and their attention work, and whether there is one. */
export const HEAD_STRIDE = 8;
export const HEAD_CREATED_AT = 0;
export const HEAD_AHEAD_TOKENS = 1;
export const HEAD_AHEAD_ATTENTION = 2;
export const HEAD_PREFILL_TOKENS = 3;
export const HEAD_ATTENTION = 4;
export const HEAD_QUEUED = 5;

/**
 * Every worker's load and queue head by worker id (BookedBlocks' ids, kept while the instance is in
 * the pool), as columns written on every booking change: a decision resolves its candidate list to
 * ids once (cached while the list and the ids are unchanged) and reads contiguous arrays, not a
 * string-keyed lookup and a cold worker object per candidate. A worker with nothing in flight reads
 * zeros. `loadOf(id)` is the same load as an object, shared until the worker's load changes (then a
 * new one: a decision's scores keep the one they saw).
 */
export class LoadColumns {
  prefillTokens = new Float64Array(64);
  /** Never below 0 (sums of floats that went up and down), as load() gives it. */
  attention = new Float64Array(64);
  blocks = new Float64Array(64);
  requests = new Float64Array(64);
  decoding = new Float64Array(64);
  decodingContext = new Float64Array(64);
  /**
   * The queue head's (the oldest un-prefilled booking's) fields, a row of HEAD_STRIDE per worker id
   * (HEAD_*): a scorer reads them together for each candidate with prefill queued, 48 bytes of one
   * 64-byte row (one or two cache lines, by the array's alignment), not a line in each of five
   * columns. HEAD_QUEUED is 1 while heads[id] is a booking, else 0.
   */
  head = new Float64Array(64 * HEAD_STRIDE);
  readonly heads: Array<Booking | undefined> = [];
  private readonly loads: Array<Load | undefined> = [];

  /** The worker's load (IDLE_LOAD for none: id < 0, or nothing in flight). */
  loadOf(id: number): Load {
    if (id < 0 || !(this.requests[id] > 0)) return IDLE_LOAD;
    let l = this.loads[id];
    if (l === undefined)
      this.loads[id] = l = {
        activePrefillTokens: this.prefillTokens[id],
        activeAttention: this.attention[id],
        activeBlocks: this.blocks[id],
        activeRequests: this.requests[id],
        decodingRequests: this.decoding[id],
        decodingContext: this.decodingContext[id],
      };
    return l;
  }

  /** Write worker w's columns (w null: it has nothing in flight). */
  write(id: number, w: WorkerLoad | null): void {
    if (id >= this.prefillTokens.length) this.grow(Math.max(id + 1, this.prefillTokens.length * 2));
    this.loads[id] = undefined;
    const h = w?.head();
    this.heads[id] = h;
    const o = id * HEAD_STRIDE;
    this.head[o + HEAD_QUEUED] = h === undefined ? 0 : 1;
    if (w === null) {
      this.prefillTokens[id] = 0;
      this.attention[id] = 0;
      this.blocks[id] = 0;
      this.requests[id] = 0;
      this.decoding[id] = 0;
      this.decodingContext[id] = 0;
      return;
    }
    this.prefillTokens[id] = w.prefillTokens;
    this.attention[id] = Math.max(0, w.attention);
    this.blocks[id] = w.blocks.size;
    this.requests[id] = w.requests;
    this.decoding[id] = w.decoding;
    this.decodingContext[id] = Math.max(0, w.decodingContext);
    if (h === undefined) return;
    this.head[o + HEAD_CREATED_AT] = h.createdAt;
    this.head[o + HEAD_AHEAD_TOKENS] = h.aheadTokens;
    this.head[o + HEAD_AHEAD_ATTENTION] = h.aheadAttention;
    this.head[o + HEAD_PREFILL_TOKENS] = h.prefillTokens;
    this.head[o + HEAD_ATTENTION] = attentionWork(h.prefillTokens, h.contextTokens);
  }

  private grow(n: number): void {
    this.prefillTokens = grow(this.prefillTokens, n);
    this.attention = grow(this.attention, n);
    this.blocks = grow(this.blocks, n);
    this.requests = grow(this.requests, n);
    this.decoding = grow(this.decoding, n);
    this.decodingContext = grow(this.decodingContext, n);
    this.head = grow(this.head, n * HEAD_STRIDE);
  }
}

/** The load of a worker with nothing in flight: one frozen object for every idle candidate of every decision. */
export const IDLE_LOAD: Load = Object.freeze({
  activePrefillTokens: 0,
  activeAttention: 0,
  activeBlocks: 0,
  activeRequests: 0,
  decodingRequests: 0,
  decodingContext: 0,
});

export class ActiveSequences {
  private readonly workers = new WorkerMap<WorkerLoad>();
  /** Emptied tables of workers that went idle (most recently emptied last: warm in cache). */
  private readonly spare: U64Table[] = [];
  private readonly bookings = new Map<string, Booking>();
  /** Every worker's in-flight blocks by block: the held prefixes of a prompt in one pass. */
  private readonly booked = new BookedBlocks();
  /** Every worker's load by id, as a decision reads it (kept by book, prefillComplete and free). */
  readonly columns = new LoadColumns();

  /** The worker's load, made on first use with room for `blocks` (its first booking's) in its table. */
  private worker(instance: string, dpRank: number, blocks = 0): WorkerLoad {
    let w = this.workers.get(instance, dpRank);
    if (!w) {
      let table = this.spare.pop();
      if (table === undefined || table.capacity < blocks * 2) table = new U64Table(RC, Math.max(256, blocks));
      this.workers.set(instance, dpRank, (w = new WorkerLoad(this.booked, instance, dpRank, table)));
    }
    return w;
  }

  /**
   * The candidates' worker ids (-1: never booked), in order, for `columns`: resolved once per list
   * (BookedBlocks' CandidateIds), not looked up per candidate.
   */
  idsOf(candidates: ReadonlyArray<{ instance: string; dpRank: number }>): Int32Array {
    return this.booked.idsOf(candidates);
  }

  /** Changes when idsOf is given another list than the one before: the same epoch, the same list. */
  get listEpoch(): number {
    return this.booked.listEpoch;
  }

  load(instance: string, dpRank: number): Load {
    const w = this.workers.get(instance, dpRank);
    if (!w) return IDLE_LOAD;
    // (Sums of floats that went up and down: never below 0 from rounding.)
    return {
      activePrefillTokens: w.prefillTokens,
      activeAttention: Math.max(0, w.attention),
      activeBlocks: w.blocks.size,
      activeRequests: w.requests,
      decodingRequests: w.decoding,
      decodingContext: Math.max(0, w.decodingContext),
    };
  }

  /**
   * Blocks of this request that would be new on the worker (not already held by in-flight requests).
   * One worker's answer from heldPrefixes(); a decision asks for every candidate through that.
   */
  newBlocks(instance: string, dpRank: number, blocks: BigUint64Array): number {
    return blocks.length - this.heldPrefixes(blocks).of(instance, dpRank);
  }

  /**
   * Every worker's held prefix of a prompt (blocks already held by its in-flight requests), from one
   * pass over the prompt (O(blocks walked)), then O(1) a worker, or O(log) probes of its own blocks
   * where several stopped at once (booked-blocks.ts). Valid until the next booking change or call.
   * `view`: the blocks' [lo, hi] halves, when the caller has them.
   */
  heldPrefixes(blocks: BigUint64Array, view = hashView(blocks)): HeldPrefixes {
    this.booked.walk(view, blocks.length);
    return new HeldPrefixes(this.booked);
  }

  /**
   * Book a request. Throws if the id is already booked (ids must be unique per router). The booking
   * keeps `blocks` itself (a decision's seq hashes, a decoded sync message's): nobody changes them after.
   * `contextTokens`: the prompt tokens before its `prefillTokens` (cached). `headDone`: the share of
   * the queue head's prefill its prediction took as computed (cost.ts): not counted in what it queues behind.
   */
  book(
    id: string,
    instance: string,
    dpRank: number,
    blocks: BigUint64Array,
    prefillTokens: number,
    now: number,
    pool = '',
    contextTokens = 0,
    headDone = 0,
  ): Booking {
    if (this.bookings.has(id)) throw new Error(`booking ${id} already exists`);
    const w = this.worker(instance, dpRank, blocks.length);
    // What it queues behind: the un-prefilled work here, less the share of the head's prefill done.
    const head = headDone > 0 ? w.head() : undefined;
    const done = head ? Math.min(1, headDone) : 0;
    const b: Booking = {
      id,
      instance,
      dpRank,
      blocks,
      prefillTokens: Math.max(0, prefillTokens),
      contextTokens: Number.isFinite(contextTokens) ? Math.max(0, contextTokens) : 0,
      aheadTokens: head ? Math.max(0, w.prefillTokens - done * head.prefillTokens) : w.prefillTokens,
      aheadAttention: Math.max(
        0,
        w.attention - (head ? done * attentionWork(head.prefillTokens, head.contextTokens) : 0),
      ),
      decodingAhead: w.decoding,
      decodingContextAhead: Math.max(0, w.decodingContext),
      pool,
      createdAt: now,
      prefillDone: false,
      speculative: null,
    };
    w.hold(b.blocks);
    w.prefillTokens += b.prefillTokens;
    w.attention += attentionWork(b.prefillTokens, b.contextTokens);
    w.queued.add(b);
    w.requests++;
    this.columns.write(w.id, w);
    this.bookings.set(id, b);
    return b;
  }

  /** The first token arrived: the prompt is computed. Idempotent; false for unknown ids. */
  prefillComplete(id: string): boolean {
    const b = this.bookings.get(id);
    if (!b) return false;
    if (!b.prefillDone) {
      b.prefillDone = true;
      const w = this.worker(b.instance, b.dpRank);
      w.prefillTokens -= b.prefillTokens;
      w.attention -= attentionWork(b.prefillTokens, b.contextTokens);
      w.queued.delete(b);
      w.decoding++;
      w.decodingContext += b.contextTokens + b.prefillTokens;
      this.columns.write(w.id, w);
    }
    return true;
  }

  /** Release everything the booking holds. Idempotent; false for unknown ids. */
  free(id: string): boolean {
    const b = this.bookings.get(id);
    if (!b) return false;
    this.bookings.delete(id);
    const w = this.worker(b.instance, b.dpRank);
    if (!b.prefillDone) {
      w.prefillTokens -= b.prefillTokens;
      w.attention -= attentionWork(b.prefillTokens, b.contextTokens);
      w.queued.delete(b);
    } else {
      w.decoding--;
      w.decodingContext -= b.contextTokens + b.prefillTokens;
    }
    w.release(b.blocks);
    w.requests--;
    if (w.requests === 0) {
      this.workers.delete(b.instance, b.dpRank);
      this.booked.idle(w.id);
      if (w.blocks.size === 0 && this.spare.length < SPARE_TABLES) this.spare.push(w.blocks);
      this.columns.write(w.id, null);
    } else this.columns.write(w.id, w);
    return true;
  }

  /**
   * The oldest booking on the worker still before its first token: the prefill the engine is
   * computing now, if the bookings ahead of it are done (undefined: none queued).
   */
  queueHead(instance: string, dpRank: number): Booking | undefined {
    return this.workers.get(instance, dpRank)?.head();
  }

  get(id: string): Booking | undefined {
    return this.bookings.get(id);
  }

  /** Ids of bookings older than maxAgeMs. */
  staleIds(now: number, maxAgeMs: number): string[] {
    const stale: string[] = [];
    for (const b of this.bookings.values()) if (now - b.createdAt > maxAgeMs) stale.push(b.id);
    return stale;
  }

  /** Free bookings older than maxAgeMs; returns their ids. */
  sweep(now: number, maxAgeMs: number): string[] {
    const stale = this.staleIds(now, maxAgeMs);
    for (const id of stale) this.free(id);
    return stale;
  }

  /** Free every booking on an instance (removed from the pool). */
  dropInstance(instance: string): number {
    const ids = [...this.bookings.values()].filter((b) => b.instance === instance).map((b) => b.id);
    for (const id of ids) this.free(id);
    this.booked.dropInstance(instance);
    return ids.length;
  }

  get size(): number {
    return this.bookings.size;
  }

  /** Totals across workers (for metrics and the zero-leak invariant). */
  totals(): Load {
    let activePrefillTokens = 0;
    let activeAttention = 0;
    let activeBlocks = 0;
    let activeRequests = 0;
    let decodingRequests = 0;
    let decodingContext = 0;
    for (const w of this.workers.values()) {
      activePrefillTokens += w.prefillTokens;
      activeAttention += Math.max(0, w.attention);
      activeBlocks += w.blocks.size;
      activeRequests += w.requests;
      decodingRequests += w.decoding;
      decodingContext += Math.max(0, w.decodingContext);
    }
    return { activePrefillTokens, activeAttention, activeBlocks, activeRequests, decodingRequests, decodingContext };
  }
}
