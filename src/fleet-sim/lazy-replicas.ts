// Replicas that apply their calls when a decision needs them: a decision for replica r needs only
// r's own state to be current, so the calls the replicas share (KV batches, scrapes, the expiry
// sweep) and each replica's own calls wait in one queue, in the order they came, and a decision
// first runs replica r's share of it; the others catch up one call at a time (`step`) whenever the
// caller has nothing else to do (bench fleet's router worker: while the simulation's thread steps
// its engines). Each replica still gets exactly its calls in exactly their order at their virtual
// times, so every replica's results are the inline run's; only when they run changes.
// A KV batch is decoded once, when it comes (the decoder sees the batches in order); its lists stay
// in the decoder's slab, which is reused only once no queued batch is left.
import type { EngineLoad } from '../engine-load/load-view.js';
import { reuseDecodeSlab } from '../events/decode/fast-unpack.js';
import type { PayloadResult } from '../events/decode/index.js';
import type { InlineReplicas, RouterReplicas, Routed } from './replicas.js';
import type { RouterTally } from './types.js';

const enum Kind {
  arrive,
  book,
  firstToken,
  finished,
  abandoned,
  dropped,
  kv,
  scrape,
  expire,
}

/** One queued call: for replica `r`, or for all (r = -1). */
interface Call {
  kind: Kind;
  r: number;
  /** The request (arrive...dropped) or the engine (kv, scrape). */
  i: number;
  now: number;
  x: number;
  y: number;
  /** arrive: tokens; kv: the decoded batch; scrape: the loads. */
  obj: Uint32Array | PayloadResult | Map<number, EngineLoad> | null;
  key: string | null;
}

/** A share of the replicas (an InlineReplicas) whose calls run when a decision (or `step`) needs them. */
export class LazyReplicas implements RouterReplicas {
  /** Queued calls; `q[at]` is call number `base`. */
  private q: (Call | undefined)[] = [];
  private at = 0;
  private base = 0;
  /** Replica r's next call (a call number): every call before it has run on r. */
  private readonly pos: number[];
  /** The replica expected to decide next (caught up first), or -1. */
  private next = -1;
  /** Queued KV batches (their lists pin the decoder's slab). */
  private batches = 0;

  constructor(private readonly inner: InlineReplicas) {
    this.pos = inner.nodes.map(() => 0);
  }

  /** Calls queued for some replica. */
  get pending(): number {
    return this.q.length - this.at;
  }

  private push(kind: Kind, r: number, i: number, now: number, x: number, y: number, obj: Call['obj']): void {
    this.q.push({ kind, r, i, now, x, y, obj, key: null });
  }

  arrive(r: number, i: number, tokens: Uint32Array, sessionKey: string | null, now: number): void {
    this.push(Kind.arrive, r, i, now, 0, 0, tokens);
    this.q[this.q.length - 1]!.key = sessionKey;
  }

  decide(r: number, i: number, now: number, hold: boolean): Routed {
    this.current(r);
    // The simulation's client sends request i to replica i mod R: after this share's replica r,
    // its next decision is most likely the next replica's (the share is contiguous).
    this.next = (r + 1) % this.pos.length;
    return this.inner.decide(r, i, now, hold);
  }

  book(r: number, i: number, now: number): void {
    this.push(Kind.book, r, i, now, 0, 0, null);
  }

  firstToken(r: number, i: number, now: number): void {
    this.push(Kind.firstToken, r, i, now, 0, 0, null);
  }

  finished(r: number, i: number, promptTokens: number, cachedTokens: number | null, now: number): void {
    this.push(Kind.finished, r, i, now, promptTokens, cachedTokens === null ? -1 : cachedTokens, null);
  }

  abandoned(r: number, i: number, now: number): void {
    this.push(Kind.abandoned, r, i, now, 0, 0, null);
  }

  dropped(r: number, i: number, now: number, refused: boolean): void {
    this.push(Kind.dropped, r, i, now, refused ? 1 : 0, 0, null);
  }

  kvBatch(engine: number, payload: Uint8Array | null, value: unknown, now: number): void {
    // No batch queued: nothing holds a list of the slab.
    if (this.batches === 0) reuseDecodeSlab();
    this.batches++;
    this.push(Kind.kv, -1, engine, now, 0, 0, this.inner.decode(engine, payload, value));
  }

  scrape(engine: number, loads: Map<number, EngineLoad>, now: number): void {
    this.push(Kind.scrape, -1, engine, now, 0, 0, loads);
  }

  expire(now: number): void {
    this.push(Kind.expire, -1, 0, now, 0, 0, null);
  }

  receiveSync(): string | null | false {
    throw new Error('replica sync runs only with the inline replicas');
  }

  close(): RouterTally[] {
    for (let r = 0; r < this.pos.length; r++) this.current(r);
    return this.inner.close();
  }

  /**
   * Runs one queued call: the next of the replica expected to decide next when it is behind,
   * else the oldest on every replica still before it (in the order of the replicas); false:
   * nothing queued.
   */
  step(): boolean {
    if (this.at === this.q.length) return false;
    const h = this.next;
    const end = this.base + this.q.length - this.at;
    if (h >= 0 && this.pos[h] < end) {
      const n = this.pos[h];
      const c = this.q[this.at + n - this.base]!;
      if (c.r < 0 || c.r === h) this.run(h, c);
      this.pos[h] = n + 1;
    } else {
      const n = this.base;
      const c = this.q[this.at]!;
      for (let r = 0; r < this.pos.length; r++) {
        if (this.pos[r] !== n) continue;
        if (c.r < 0 || c.r === r) this.run(r, c);
        this.pos[r] = n + 1;
      }
    }
    this.release();
    return true;
  }

  /** Replica r runs every call queued before now. */
  private current(r: number): void {
    const end = this.base + this.q.length - this.at;
    for (let n = this.pos[r]; n < end; n++) {
      const c = this.q[this.at + n - this.base]!;
      if (c.r < 0 || c.r === r) {
        this.run(r, c);
      }
    }
    this.pos[r] = end;
    this.release();
  }

  /** Drops the calls every replica has run. */
  private release(): void {
    let min = this.pos[0];
    for (let r = 1; r < this.pos.length; r++) if (this.pos[r] < min) min = this.pos[r];
    while (this.base < min) {
      if (this.q[this.at]!.kind === Kind.kv) this.batches--;
      this.q[this.at++] = undefined;
      this.base++;
    }
    if (this.at === this.q.length) {
      this.q.length = 0;
      this.at = 0;
    } else if (this.at > 4096 && this.at * 2 > this.q.length) {
      this.q = this.q.slice(this.at);
      this.at = 0;
    }
  }

  private run(r: number, c: Call): void {
    const inner = this.inner;
    switch (c.kind) {
      case Kind.arrive:
        inner.arrive(r, c.i, c.obj as Uint32Array, c.key, c.now);
        break;
      case Kind.book:
        inner.book(r, c.i, c.now);
        break;
      case Kind.firstToken:
        inner.firstToken(r, c.i, c.now);
        break;
      case Kind.finished:
        inner.finished(r, c.i, c.x, c.y < 0 ? null : c.y, c.now);
        break;
      case Kind.abandoned:
        inner.abandoned(r, c.i, c.now);
        break;
      case Kind.dropped:
        inner.dropped(r, c.i, c.now, c.x === 1);
        break;
      case Kind.kv:
        inner.applyBatch(r, c.i, c.obj as PayloadResult, c.now);
        break;
      case Kind.scrape:
        inner.scrapeOne(r, c.i, c.obj as Map<number, EngineLoad>, c.now);
        break;
      case Kind.expire:
        inner.expireOne(r, c.now);
        break;
    }
  }
}
