// The index's write operations, on the record rows (records.ts): store (runs, the dual key),
// speculative inserts and their withdrawal, removals, clears, purges and expiry. Writes from outside
// src/indexer go through an IndexWriter (writer.ts). See README.md (module map).
import { CROWDED_MIN_RECORDS } from './holder-sets.js';
import { grow, type Holder, hashView, keyOut, recordMix, specKey } from './layout.js';
import type { EngineMap } from './engine-map.js';
import { RecordTable } from './records.js';

// Row offsets read here (a module-local copy: see records.ts RECORD_LAYOUT), and NONE (= layout.ts NONE).
const NONE = -1;
const R = 8;
const R_LO = 0;
const R_HI = 1;
const R_HOLDER = 2;
const R_NEXT_E = 3;
const R_NEXT_H = 5;
const T = 4;
const T_HEAD = 3;
const T_SIG = 2;
/** store()'s prefetch: tables past this size (a typical L2 cache), a window of this many blocks ahead. */
const PREFETCH_MIN_BYTES = 1 << 20;
const TOUCH_WINDOW = 64;
/** remove()'s prefetch window (blocks). */
const REMOVE_WINDOW = 32;
/** expire()'s marks on the records of crowded blocks it frees. */
const GONE_PENDING = 1;
const GONE_FREED = 2;
/** This module's copy of the row offsets (checked against RECORD_LAYOUT). */
export const WRITES_LAYOUT = { R, R_LO, R_HI, R_HOLDER, R_NEXT_E, R_NEXT_H, T, T_HEAD, T_SIG };

/** One speculative insert (a booking's), so that a failed attempt can take it back (`withdrawSpeculative`). */
export interface SpeculativeInsert {
  ttlMs: number;
  expiresAt: number;
}

export abstract class IndexWrites extends RecordTable {
  /** Where store()'s prefetch loads go (see U64Table.touch). */
  private storeSink = 0;

  /**
   * Store consecutive blocks for a holder. `seq` are router seq hashes; `engine` the engine's own
   * hashes for the same blocks (dual key) or null when the engine uses the router's hashes.
   * `expiresAt` > 0 marks speculative entries (a speculative holder's; event-confirmed blocks never
   * expire); each store of one counts as a claim on its records (`withdrawSpeculative`). `parent`:
   * the router hash of the block before seq[0], when known; the blocks then continue the holder's
   * run through it. Returns the number of newly added (block, holder) pairs.
   */
  store(
    holder: number,
    seq: BigUint64Array,
    engine: BigUint64Array | null = null,
    expiresAt = 0,
    parent: bigint | null = null,
  ): number {
    const h = this.holders[holder];
    if (!h || !h.alive) throw new RangeError(`unknown holder ${holder}`);
    if (engine && engine.length !== seq.length) throw new RangeError('engine hashes and seq hashes differ in length');
    if (seq.length === 0) return 0;
    if (!h.speculative) expiresAt = 0;
    else if (engine) throw new RangeError('speculative entries carry no engine hashes');
    const run = this.openRun(holder, parent);
    const base = this.runLen[run];
    const sv = hashView(seq);
    const ev = engine ? hashView(engine) : sv;
    const cand = this.hCand[holder];
    const confirmed = !h.speculative && cand !== NONE;
    const clock0 = h.clock;
    const n = seq.length;
    let added = 0;
    // The holder's record after its record of the previous block, in its own list: a re-stored chain
    // (a booking renewed by the next request with the same prefix) has its records there in order.
    let guess = NONE;
    let last = NONE;
    // A table past a cache's size misses on every block: load a window of rows ahead at once (the
    // misses overlap), as the query walk does.
    const prefetch = n > 1 && this.table.byteLength > PREFETCH_MIN_BYTES;
    // The engine map each confirmed record's engine hash goes to (setEngineHash): its rows too.
    const em = engine !== null && !h.speculative ? this.groups[h.group].engineMap : null;
    for (let i = 0; i < seq.length; i++) {
      if (prefetch && (i & (TOUCH_WINDOW - 1)) === 0) {
        this.storeSink ^= this.table.touch(sv, i, Math.min(n, i + TOUCH_WINDOW));
        if (em !== null) this.storeSink ^= em.touch(ev, i, Math.min(n, i + TOUCH_WINDOW));
      }
      const lo = sv[2 * i];
      const hi = sv[2 * i + 1];
      const elo = ev[2 * i];
      const ehi = ev[2 * i + 1];
      const slot = this.table.insert(lo, hi);
      const tbl = this.table.data;
      let r = NONE;
      let specSeen = false;
      // The block's holder set (NONE: not crowded; a row just made has none).
      let set = NONE;
      if (this.table.created) tbl[slot * T + T_HEAD] = NONE;
      else {
        set = this.crowd.find(lo, hi);
        if (set !== NONE) {
          // A crowded block: its holder set answers both questions without the walk.
          if (this.crowd.has(set, holder)) {
            const rec = this.rec;
            const g = guess * R;
            r =
              guess !== NONE && rec[g + R_LO] === lo && rec[g + R_HI] === hi && rec[g + R_HOLDER] === holder
                ? guess
                : this.findRecordOf(lo, hi, tbl[slot * T + T_HEAD], holder);
          }
          if (confirmed) specSeen = this.bookedIn(set, cand);
        } else {
          // One walk finds this holder's record and notices speculative records to replace.
          const rec = this.rec;
          let n = 0;
          for (let x = tbl[slot * T + T_HEAD]; x !== NONE; x = rec[x * R + R_NEXT_E]) {
            const hx = rec[x * R + R_HOLDER];
            if (hx === holder) r = x;
            else if (this.hSpec[hx] === 1) specSeen = true;
            n++;
          }
          if (n >= CROWDED_MIN_RECORDS) set = this.makeCrowded(lo, hi, tbl[slot * T + T_HEAD]);
        }
      }
      if (r === NONE) {
        r = this.newRecord(slot, lo, hi, holder, elo, ehi, expiresAt, run, base + i, set);
        guess = NONE;
        added++;
        if (h.speculative) this.recClaims[r] = 1;
      } else {
        if (h.speculative) this.recClaims[r]++;
        guess = this.rec[r * R + R_NEXT_H];
        this.moveToRun(r, run, base + i);
        if (h.speculative && this.recExp[r] !== expiresAt) {
          this.reExpire(r, slot, holder, expiresAt);
          if (h.speculative) this.moveToTail(h, r); // keep expiry order within the holder
        }
      }
      // An engine frees a sequence's deepest blocks first into its LRU: the shallowest is the newest.
      if (!h.speculative) this.recTouch[r] = clock0 + n - i;
      if (confirmed && specSeen) this.dropSpeculative(slot, cand);
      if (!h.speculative) this.setEngineHash(r, slot, h.group, elo, ehi);
      last = r;
    }
    h.clock = clock0 + n;
    this.runLen[run] = base + n;
    this.storedRun(run, base, n, clock0, last);
    return added;
  }

  /** Whether a speculative holder of candidate `cand` has a record in crowded block set `set`. */
  private bookedIn(set: number, cand: number): boolean {
    const ids = this.candSpec[cand];
    if (ids === undefined) return false;
    for (let k = 0; k < ids.length; k++) {
      const s = ids[k];
      if (this.hSpec[s] === 1 && this.hCand[s] === cand && this.crowd.has(set, s)) return true;
    }
    return false;
  }

  /** Give a block whose list is long a holder set, from its records. */
  private makeCrowded(lo: number, hi: number, head: number): number {
    const set = this.crowd.create(lo, hi);
    const rec = this.rec;
    for (let x = head; x !== NONE; x = rec[x * R + R_NEXT_E]) this.crowd.add(set, rec[x * R + R_HOLDER]);
    return set;
  }

  /**
   * Speculative insert of a routed prompt's blocks on an instance (device tier, until now + ttlMs):
   * the engine is about to compute them. Each block's record counts the inserts that claim it.
   */
  speculate(instance: string, dpRank: number, seq: BigUint64Array, ttlMs: number, now: number): SpeculativeInsert {
    const ins: SpeculativeInsert = { ttlMs, expiresAt: now + ttlMs };
    this.store(this.speculativeHolder(instance, dpRank, ttlMs), seq, null, ins.expiresAt);
    return ins;
  }

  /**
   * Take back a speculative insert whose attempt failed (the engine did not compute the prompt): its
   * claim on each record goes, and a record no other insert claims goes with it. Claims of inserts
   * still in flight or served stay, and so do their records (until their TTL or a confirmation);
   * event-confirmed records are never touched. At or past its own expiry the insert has lapsed and
   * withdraws nothing: a record alive now is a later insert's (renewed, or made anew).
   */
  withdrawSpeculative(
    instance: string,
    dpRank: number,
    seq: BigUint64Array,
    ins: SpeculativeInsert,
    now: number,
  ): number {
    if (now >= ins.expiresAt) return 0;
    const holder = this.holderKeys.get(specKey(instance, dpRank, ins.ttlMs));
    if (holder === undefined) return 0;
    const sv = hashView(seq);
    let n = 0;
    for (let i = 0; i < seq.length; i++) {
      const slot = this.table.find(sv[2 * i], sv[2 * i + 1]);
      if (slot === NONE) continue;
      const r = this.findRecordOf(sv[2 * i], sv[2 * i + 1], this.table.data[slot * T + T_HEAD], holder);
      if (r === NONE || --this.recClaims[r] > 0) continue;
      this.freeRecord(r);
      n++;
    }
    return n;
  }

  /** Remove blocks named by engine hashes (or router hashes for standard publishers). */
  remove(holder: number, engine: BigUint64Array): number {
    const h = this.holders[holder];
    if (!h || !h.alive) return 0;
    const g = this.groups[h.group];
    const n = engine.length;
    if (n === 1) {
      // One block (vLLM's BlockRemoved: most removals): its halves read through the cached view of
      // its buffer (a decoder's slab), not a new view per event.
      const v = this.pairsOf(engine);
      const at = engine.byteOffset >> 2;
      this.routerKey(g, v[at], v[at + 1]);
      const slot = this.table.find(keyOut[0], keyOut[1]);
      const removed = slot !== NONE && this.freeHolderRecord(slot, holder) ? 1 : 0;
      h.evicted += removed;
      return removed;
    }
    const ev = hashView(engine);
    // A block table past a cache's size misses on every block, and so do the engine map and the
    // records the hashes name: load a window of each ahead, one kind after the other (the misses of a
    // kind overlap; each needs the one before it), as store() and the walk do for the table.
    const prefetch = n > 1 && this.table.byteLength > PREFETCH_MIN_BYTES;
    let removed = 0;
    for (let i = 0; i < n; i++) {
      if (prefetch && (i & (REMOVE_WINDOW - 1)) === 0)
        this.prefetchRemoval(g.engineMap, ev, i, Math.min(n, i + REMOVE_WINDOW));
      this.routerKey(g, ev[2 * i], ev[2 * i + 1]);
      const slot = this.table.find(keyOut[0], keyOut[1]);
      if (slot !== NONE && this.freeHolderRecord(slot, holder)) removed++;
    }
    h.evicted += removed;
    return removed;
  }

  /**
   * Load what removing these engine hashes of a holder will read (`remove`'s prefetch, for removals
   * that come one event each: vLLM publishes a BlockRemoved per block): `ev` holds n lo/hi pairs,
   * n <= 32. Changes nothing; a table that fits in cache skips it.
   */
  prefetchRemovals(holder: number, ev: Int32Array, n: number): void {
    const h = this.holders[holder];
    if (h === undefined || !h.alive || n > REMOVE_WINDOW || this.table.byteLength <= PREFETCH_MIN_BYTES) return;
    this.prefetchRemoval(this.groups[h.group].engineMap, ev, 0, n);
  }

  /** Where remove()'s prefetch puts the router keys of a window, and its loads. */
  private removeKeys = new Int32Array(2 * REMOVE_WINDOW);
  private removeSink = 0;

  /**
   * Load what removing engine hashes [from, to) of `ev` reads: their engine-map rows, then the records
   * the rows name (guessed by the low half: the record's high half is what the check reads), then the
   * block-table rows of the records' router hashes (unmapped hashes: the router's own).
   */
  private prefetchRemoval(em: EngineMap | null, ev: Int32Array, from: number, to: number): void {
    let acc = 0;
    const keys = this.removeKeys;
    if (em !== null) {
      acc ^= em.touch(ev, from, to);
      const rec = this.rec;
      const eng = this.recEng;
      for (let i = from; i < to; i++) {
        const r = em.guess(ev[2 * i]);
        if (r === NONE) continue;
        acc ^= eng[2 * r + 1] ^ rec[r * R + R_HOLDER];
      }
      for (let i = from, k = 0; i < to; i++, k += 2) {
        const r = em.guess(ev[2 * i]);
        keys[k] = r === NONE ? ev[2 * i] : rec[r * R + R_LO];
        keys[k + 1] = r === NONE ? ev[2 * i + 1] : rec[r * R + R_HI];
      }
      acc ^= this.table.touch(keys, 0, to - from);
    } else acc ^= this.table.touch(ev, from, to);
    this.removeSink ^= acc;
  }

  /** The buffer pairsOf() last viewed, and the view (whole int32 words). */
  private pairBuf: ArrayBufferLike | null = null;
  private pairView: Int32Array = new Int32Array(0);

  /** An Int32Array over a hash list's whole buffer (its lo/hi pairs from byteOffset / 4), kept while lists share it. */
  private pairsOf(a: BigUint64Array): Int32Array {
    if (a.buffer !== this.pairBuf) {
      this.pairBuf = a.buffer;
      this.pairView = new Int32Array(a.buffer, 0, a.buffer.byteLength >> 2);
    }
    return this.pairView;
  }

  /** Drop every block of one holder (a `cleared` event, a purge). */
  clearHolder(holder: number): number {
    const h = this.holders[holder];
    if (!h || !h.alive) return 0;
    let n = 0;
    while (h.head !== NONE) {
      this.freeRecord(h.head);
      n++;
    }
    return n;
  }

  /**
   * Empty the event-confirmed holders of one backend's dp rank on every medium (a device-wide
   * AllBlocksCleared). Holders are emptied, not removed: engines clear often enough (RL weight
   * updates) that re-creating holders each time would grow the holder tables.
   */
  clearBackend(backend: string, dpRank: number): number {
    let n = 0;
    for (const i of this.liveHolders) {
      const h = this.holders[i];
      if (!h.speculative && h.backend === backend && h.dpRank === dpRank) n += this.clearHolder(i);
    }
    return n;
  }

  /** Empty every event-confirmed holder; speculative entries (bookings) stay. */
  clearConfirmed(): number {
    let n = 0;
    for (const i of this.liveHolders) if (!this.holders[i].speculative) n += this.clearHolder(i);
    return n;
  }

  /** Purge and forget every holder matching the predicate. */
  protected purgeHolders(pred: (h: Holder, id: number) => boolean): number {
    let n = 0;
    for (const i of [...this.liveHolders]) {
      const h = this.holders[i];
      if (!pred(h, i)) continue;
      n += this.clearHolder(i);
      this.holderPurged(i);
      this.holderKeys.delete(h.key);
      this.liveHolders.delete(i);
      this.freeHolderIds.push(i);
      this.onHoldersPurged?.();
    }
    return n;
  }

  /** Purge one backend's blocks (all ranks and media, or one dp rank). */
  removeBackend(backend: string, dpRank?: number): number {
    return this.purgeHolders(
      (h) => !h.speculative && h.backend === backend && (dpRank === undefined || h.dpRank === dpRank),
    );
  }

  /** Purge everything readable through an instance (its own backends and its speculative entries). */
  removeInstance(instance: string, dpRank?: number): number {
    return this.purgeHolders((_h, i) => {
      const c = this.hCand[i];
      if (c === NONE) return false;
      const cand = this.cands[c];
      return cand.instance === instance && (dpRank === undefined || cand.dpRank === dpRank);
    });
  }

  /** Remove speculative entries whose expiry is at or before `now`. */
  expire(now: number): number {
    // The records that go, in the order they always went: holder by holder, each one's oldest first.
    const rec = this.rec;
    let gone = this.expireGone;
    let m = 0;
    for (const i of this.liveHolders) {
      const h = this.holders[i];
      if (!h.speculative) continue;
      for (let r = h.head; r !== NONE && this.recExp[r] <= now; r = rec[r * R + R_NEXT_H]) {
        if (m === gone.length) this.expireGone = gone = grow(gone, m * 2);
        gone[m++] = r;
      }
    }
    // Freeing a record walks its block's list from the head to its predecessor. A crowded block (a
    // shared prefix's first blocks: ~1,000 records) loses many bookings' records at one sweep, ~500
    // records deep each (almost every step of the sweeps at 1,024 x 1,500): one walk of such a block
    // names the predecessors of all of them. The order of the frees is unchanged.
    const crowded = this.crowd.size > 0 ? this.markCrowdedGone(gone, m) : null;
    const mark = this.expireMark;
    const prevOf = new Map<number, number>();
    for (let k = 0; k < m; k++) {
      const r = gone[k];
      const slot = this.table.find(rec[r * R + R_LO], rec[r * R + R_HI]);
      const head = this.table.data[slot * T + T_HEAD];
      let prev: number;
      if (crowded === null || mark[r] === 0) prev = this.prevInBlock(head, r);
      else {
        let p = prevOf.get(r);
        if (p === undefined) {
          // The first of them in this block: one walk, to the last of them.
          let left = crowded.get(this.crowd.find(rec[r * R + R_LO], rec[r * R + R_HI])) ?? 0;
          for (let x = head, q = NONE; x !== NONE && left > 0; q = x, x = rec[x * R + R_NEXT_E])
            if (mark[x] === GONE_PENDING) {
              prevOf.set(x, q);
              left--;
            }
          p = prevOf.get(r) ?? this.prevInBlock(head, r);
        }
        // A predecessor freed since the walk: its own predecessor then.
        while (p !== NONE && mark[p] === GONE_FREED) p = prevOf.get(p) ?? NONE;
        prev = p;
        mark[r] = GONE_FREED;
      }
      this.freeRecordAt(r, slot, prev);
    }
    if (crowded !== null) for (let k = 0; k < m; k++) mark[gone[k]] = 0;
    this.fitTables();
    return m;
  }

  /** The records to free, listed for one sweep (expire). */
  private expireGone = new Int32Array(1024);
  /** Per record during a sweep: GONE_PENDING / GONE_FREED for the records of crowded blocks it frees, else 0. */
  private expireMark = new Uint8Array(0);

  /** Mark the sweep's records of crowded blocks pending; their count per holder set (null: none). */
  private markCrowdedGone(gone: Int32Array, m: number): Map<number, number> | null {
    const rec = this.rec;
    let counts: Map<number, number> | null = null;
    for (let k = 0; k < m; k++) {
      const r = gone[k];
      const set = this.crowd.find(rec[r * R + R_LO], rec[r * R + R_HI]);
      if (set === NONE) continue;
      if (counts === null) {
        counts = new Map();
        if (this.expireMark.length < this.recTop) this.expireMark = new Uint8Array(this.recTouch.length);
      }
      counts.set(set, (counts.get(set) ?? 0) + 1);
      this.expireMark[r] = GONE_PENDING;
    }
    return counts;
  }
}
