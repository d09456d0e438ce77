// bench fleet's router replicas on worker threads (--router-threads): without replica sync the
// replicas never talk to each other, so each worker runs a contiguous share of them (LazyReplicas
// over RouterNodes, router-worker.ts) while the main thread keeps the engines, the event queue and
// the simulation's bookkeeping. Every call the simulation makes on a replica is written, in the
// simulation's order, to its worker's ring (replica-ring.ts): KV batches, scrapes, arrivals,
// bookings and ends are not waited for, so the workers apply KV events while the main thread steps
// engines; a decision (and the final tallies) waits for the worker's answer, which needs only the
// deciding replica's calls to have run (the worker catches the others up afterwards). Each replica thus gets
// exactly the calls, in exactly the order and at exactly the virtual times, the inline run gives it.
import { receiveMessageOnPort, MessageChannel, type MessagePort, Worker } from 'node:worker_threads';
import { builtFile } from '../../common/built-file.js';
import type { EngineLoad } from '../../engine-load/load-view.js';
import { blankRouted, type RouterReplicas, type Routed } from '../../fleet-sim/replicas.js';
import type { RouterTally } from '../../fleet-sim/types.js';
import { Ctl, HEADER, Op, RING_OFFSET, RingViews, recordBytes, STATUS_FAILED } from './replica-ring.js';
import type { RouterWorkerData } from './router-worker.js';

/** A worker that runs no record for this long while the main thread waits on it has failed (ms). */
const STALL_MS = 120_000;
/**
 * The workers' nice above the simulation's thread: 3 threads (and V8's helpers) share 2 cores, and
 * the simulation's thread is the critical path (it waits at each decision, the workers only catch
 * up between them), so a worker's catch-up must not keep it from a core when it wakes. At equal
 * priority a woken thread often waited for a time slice (measured: 1,024 x 10,000, 8 replicas, 2
 * workers: 73 -> 58 s wall, the same CPU; docs/fleet-sim.md).
 */
const WORKER_NICE = 5;
/** Ring bytes per worker: the largest record (a prompt's tokens) must fit in half. */
const RING_BYTES = 64 << 20;

export interface RouterThreadsOptions {
  /** The policy variant's name (its plan is rebuilt from it: routerPlan(variant(name), ids, blockSize)). */
  policy: string;
  ids: readonly string[];
  blockSize: number;
  routers: number;
  seed: number;
  reserveRecords: number;
  /** Worker threads (at most one per replica). */
  threads: number;
  /** Time each decision on the worker's real clock. */
  timed: boolean;
  /** Each worker's old space and young generation (MiB). */
  oldSpaceMiB: number;
  youngMiB: number;
  /** Ring bytes per worker (default 64 MiB; a multiple of 8): a test's small ring wraps often. */
  ringBytes?: number;
  /**
   * Workers run queued calls while their ring is empty (default true); false: only when a decision
   * or the tallies need them (a test's way to make every decision catch its replica up).
   */
  catchUp?: boolean;
  /** The workers' nice above the simulation's thread (default WORKER_NICE; 0: the same priority). */
  nice?: number;
}

/** One worker and its ring. */
class Link {
  readonly v: RingViews;
  readonly worker: Worker;
  readonly port: MessagePort;
  /** The ring's tail as this side wrote it. */
  private tail = 0;
  /** Answers asked for so far. */
  private asked = 0;
  /** Times this side went back to the ring's start. */
  wraps = 0;

  constructor(
    readonly k: number,
    readonly first: number,
    readonly count: number,
    o: RouterThreadsOptions,
    script: string,
  ) {
    this.v = new RingViews(new SharedArrayBuffer(RING_OFFSET + (o.ringBytes ?? RING_BYTES)));
    const ch = new MessageChannel();
    this.port = ch.port1;
    const data: RouterWorkerData = {
      sab: this.v.sab,
      port: ch.port2,
      first,
      count,
      policy: o.policy,
      ids: [...o.ids],
      blockSize: o.blockSize,
      seed: o.seed,
      reserveRecords: o.reserveRecords,
      timed: o.timed,
      catchUp: o.catchUp ?? true,
      nice: o.nice ?? WORKER_NICE,
    };
    this.worker = new Worker(script, {
      workerData: data,
      transferList: [ch.port2],
      resourceLimits: { maxOldGenerationSizeMb: o.oldSpaceMiB, maxYoungGenerationSizeMb: o.youngMiB },
    });
    // (Read only through the ring's status and the port: the main thread does not turn its event loop during a run.)
    this.worker.on('error', () => {});
  }

  /** Room for a record of n bytes at the tail (waiting for the worker when the ring is full): its offset. */
  begin(op: number, n: number): number {
    const v = this.v;
    if (n > v.size / 2) throw new Error(`a ${n}-byte call does not fit router worker ${this.k}'s ring`);
    for (;;) {
      const head = Atomics.load(v.ctl, Ctl.head);
      const tail = this.tail;
      if (head > tail ? tail + n < head : tail + n <= v.size - HEADER) break;
      if (head <= tail && head > 0) {
        // The end is too short: the worker goes back to the start.
        v.i32[tail >> 2] = Op.wrap;
        v.i32[(tail >> 2) + 1] = HEADER;
        this.wraps++;
        this.publish(0);
        continue;
      }
      this.wait(Ctl.head, head);
    }
    const p = this.tail;
    this.v.i32[p >> 2] = op;
    this.v.i32[(p >> 2) + 1] = n;
    return p;
  }

  /** The record begun at p, n bytes long, is written: the worker may read it. */
  end(p: number, n: number): void {
    this.publish(p + n);
  }

  private publish(tail: number): void {
    this.tail = tail;
    Atomics.store(this.v.ctl, Ctl.tail, tail);
    Atomics.notify(this.v.ctl, Ctl.tail);
  }

  /** The answer to the call just written. */
  answer(): Float64Array {
    const want = ++this.asked;
    for (let got = Atomics.load(this.v.ctl, Ctl.answers); got < want; got = Atomics.load(this.v.ctl, Ctl.answers))
      this.wait(Ctl.answers, got);
    return this.v.answer;
  }

  /** The final tallies of this worker's replicas. */
  tallies(): RouterTally[] {
    const p = this.begin(Op.close, HEADER);
    this.end(p, HEADER);
    this.answer();
    const m = receiveMessageOnPort(this.port);
    if (!m) throw new Error(`router worker ${this.k} answered without its tallies`);
    return m.message as RouterTally[];
  }

  /** Wait while control slot `slot` holds `seen`: bounded by the worker's failure and its progress. */
  private wait(slot: number, seen: number): void {
    const ctl = this.v.ctl;
    let beat = Atomics.load(ctl, Ctl.beat);
    let since = performance.now();
    for (;;) {
      if (Atomics.load(ctl, Ctl.status) === STATUS_FAILED) {
        const m = receiveMessageOnPort(this.port);
        throw new Error(`router worker ${this.k} failed: ${m ? String(m.message) : 'no message'}`);
      }
      if (Atomics.wait(ctl, slot, seen, 1000) !== 'timed-out') return;
      const b = Atomics.load(ctl, Ctl.beat);
      if (b !== beat) {
        beat = b;
        since = performance.now();
      } else if (performance.now() - since > STALL_MS)
        throw new Error(`router worker ${this.k} ran nothing for ${STALL_MS / 1000} s (exited or stuck)`);
    }
  }
}

/** The replicas on `threads` worker threads; `terminate` ends them (after close, or on a failure). */
export class ThreadedReplicas implements RouterReplicas {
  private readonly links: Link[] = [];
  /** Replica r's worker. */
  private readonly linkOf: Link[] = [];
  private readonly routed: Routed = blankRouted();

  constructor(o: RouterThreadsOptions) {
    const script = builtFile(import.meta.url, 'router-worker.js');
    if (!script) throw new Error('fleet/router-worker.js is not built: run `npm run build`');
    const W = Math.max(1, Math.min(o.threads, o.routers));
    try {
      for (let k = 0, first = 0; k < W; k++) {
        // Contiguous shares, as even as they go (8 over 3: 3, 3, 2).
        const count = Math.floor(o.routers / W) + (k < o.routers % W ? 1 : 0);
        const link = new Link(k, first, count, o, script);
        this.links.push(link);
        for (let r = 0; r < count; r++) this.linkOf.push(link);
        first += count;
      }
    } catch (e) {
      this.terminate();
      throw e;
    }
  }

  /** Times the rings went back to their start (all workers). */
  get wraps(): number {
    let n = 0;
    for (const l of this.links) n += l.wraps;
    return n;
  }

  /** Ends every worker (idempotent). */
  terminate(): void {
    for (const l of this.links) void l.worker.terminate();
  }

  /** A call on replica r about request i: its share's replica, i, now and two figures of the call. */
  private small(op: number, r: number, i: number, now: number, x = 0, y = 0): void {
    const l = this.linkOf[r];
    const n = recordBytes(5, 0);
    const p = l.begin(op, n);
    const f = (p + HEADER) >> 3;
    const f64 = l.v.f64;
    f64[f] = r - l.first;
    f64[f + 1] = i;
    f64[f + 2] = now;
    f64[f + 3] = x;
    f64[f + 4] = y;
    l.end(p, n);
  }

  arrive(r: number, i: number, tokens: Uint32Array, sessionKey: string | null, now: number): void {
    const l = this.linkOf[r];
    const keyLen = sessionKey === null ? 0 : sessionKey.length;
    const n = recordBytes(5, tokens.length * 4 + keyLen * 2);
    const p = l.begin(Op.arrive, n);
    const v = l.v;
    const f = (p + HEADER) >> 3;
    v.f64[f] = r - l.first;
    v.f64[f + 1] = i;
    v.f64[f + 2] = now;
    v.f64[f + 3] = tokens.length;
    v.f64[f + 4] = sessionKey === null ? -1 : keyLen;
    const at = p + HEADER + 40;
    v.u32.set(tokens, at >> 2);
    if (sessionKey !== null) {
      const k0 = (at + tokens.length * 4) >> 1;
      for (let c = 0; c < keyLen; c++) v.u16[k0 + c] = sessionKey.charCodeAt(c);
    }
    l.end(p, n);
  }

  decide(r: number, i: number, now: number, hold: boolean): Routed {
    const l = this.linkOf[r];
    this.small(Op.decide, r, i, now, hold ? 1 : 0);
    const a = l.answer();
    const out = this.routed;
    out.engine = a[0];
    out.ttftMs = a[1];
    out.candidates = a[2];
    out.anyFree = a[3] === 1;
    out.holder = a[4];
    out.holderRank = a[5];
    out.wallMs = a[6];
    return out;
  }

  book(r: number, i: number, now: number): void {
    this.small(Op.book, r, i, now);
  }

  firstToken(r: number, i: number, now: number): void {
    this.small(Op.firstToken, r, i, now);
  }

  finished(r: number, i: number, promptTokens: number, cachedTokens: number | null, now: number): void {
    this.small(Op.finished, r, i, now, promptTokens, cachedTokens === null ? -1 : cachedTokens);
  }

  abandoned(r: number, i: number, now: number): void {
    this.small(Op.abandoned, r, i, now);
  }

  dropped(r: number, i: number, now: number, refused: boolean): void {
    this.small(Op.dropped, r, i, now, refused ? 1 : 0);
  }

  kvBatch(engine: number, payload: Uint8Array | null, _value: unknown, now: number): void {
    if (!payload) throw new Error('router threads take KV events as msgpack bytes (--event-wire bytes)');
    const n = recordBytes(3, payload.length);
    for (const l of this.links) {
      const p = l.begin(Op.kv, n);
      const f = (p + HEADER) >> 3;
      l.v.f64[f] = engine;
      l.v.f64[f + 1] = now;
      l.v.f64[f + 2] = payload.length;
      l.v.u8.set(payload, p + HEADER + 24);
      l.end(p, n);
    }
  }

  scrape(engine: number, loads: Map<number, EngineLoad>, now: number): void {
    const n = recordBytes(3 + 5 * loads.size, 0);
    for (const l of this.links) {
      const p = l.begin(Op.scrape, n);
      const f64 = l.v.f64;
      let f = (p + HEADER) >> 3;
      f64[f++] = engine;
      f64[f++] = now;
      f64[f++] = loads.size;
      for (const [rank, e] of loads) {
        f64[f++] = rank;
        f64[f++] = e.running;
        f64[f++] = e.waiting;
        f64[f++] = e.kvUsage === null ? Number.NaN : e.kvUsage;
        f64[f++] = e.at;
      }
      l.end(p, n);
    }
  }

  expire(now: number): void {
    const n = recordBytes(1, 0);
    for (const l of this.links) {
      const p = l.begin(Op.expire, n);
      l.v.f64[(p + HEADER) >> 3] = now;
      l.end(p, n);
    }
  }

  receiveSync(): string | null | false {
    throw new Error('replica sync runs only with the inline replicas');
  }

  close(): RouterTally[] {
    const out: RouterTally[] = [];
    for (const l of this.links) out.push(...l.tallies());
    this.terminate();
    return out;
  }
}
