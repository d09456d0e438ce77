// Records of one namespace: the seq-hash table (U64Table rows [lo, hi, sig, head]), the record
// rows (a block's holders as a singly linked list from the row's head; a holder's blocks as a
// doubly linked list in eviction order, oldest first), the free list, runs (the chains a holder
// stored), the engine-hash maps (dual key), and the LRU estimate built on the holders' allocation
// clocks (touch, survivingPrefix). Every record is made by newRecord() and freed by freeRecord():
// they keep the row signature, the holder's list and count, the run and the engine map in step.
// See README.md (module map).
import { HolderSets } from './holder-sets.js';
import { HolderTable } from './holders.js';
import { HB, HotBlocks } from './hot-blocks.js';
import { grow, type Holder, hashView, join, keyOut, recordMix, splitScratch, splitView } from './layout.js';

import { EngineMap } from './engine-map.js';
import { U64Table } from './u64-table.js';

// Row layouts. V8 folds a module's own unexported constants into the code, not imported or exported
// bindings (surviving() ran 20 % slower with imports), so each module with hot loops over the rows
// keeps its own copy of the offsets it reads; RECORD_LAYOUT is the reference they are tested against
// (test/unit/hot-blocks.test.ts).
/** No record / holder / slot (the same value as layout.ts NONE). */
const NONE = -1;
// record row fields
const R = 8;
const R_LO = 0;
const R_HI = 1;
const R_HOLDER = 2;
const R_NEXT_E = 3;
const R_PREV_H = 4;
const R_NEXT_H = 5;
const R_RUN = 6;
const R_POS = 7;
// table row: [lo, hi, sig, head]. sig doubles as the U64Table `used` word: an odd XOR of the
// entry's holder mixes, so two blocks with the same holder set (the long runs a shared prefix
// makes) compare equal and the query skips their record scan.
const T = 4;
const T_SIG = 2;
const T_HEAD = 3;

/** The seq-hash table doubles at 0.7 full, and past 2^22 rows (64 MB) grows by 1.14-1.25x, at 0.7 too. */
const BLOCK_TABLE_LOAD = 0.7;
const BLOCK_TABLE_FINE = { fromRows: 1 << 22, maxLoad: 0.7 };

/**
 * Record rows grow by 1.5x, and by 1/8 past 2^16 rows (3 MB): a grown array is empty by the
 * growth's share right after it grows, and the fleet's routers hold millions of records (48 bytes
 * each). The copies this costs are linear: 8 rows copied per row added, in memcpy.
 */
export function nextRecordCapacity(rows: number): number {
  return rows < 1 << 16 ? Math.ceil((rows * 3) / 2) : Math.ceil((rows * 9) / 8);
}

/** Record rows are compacted at a sweep under this fill (to nextRecordCapacity(live): >= 1/8 room). */
const RECORD_FIT_FILL = 0.5;

/** Bytes of one record row: rec (R int32s), recTouch (8) and recEng (8). */
export const RECORD_ROW_BYTES = R * 4 + 8 + 8;

/** The row layouts, for the check that every module's copy agrees (not for hot code). */
export const RECORD_LAYOUT = {
  R,
  R_LO,
  R_HI,
  R_HOLDER,
  R_NEXT_E,
  R_PREV_H,
  R_NEXT_H,
  R_RUN,
  R_POS,
  T,
  T_SIG,
  T_HEAD,
};

export abstract class RecordTable extends HolderTable {
  protected table: U64Table;
  protected rec: Int32Array;
  // A record is confirmed (an event's) or speculative (a booking's), by its holder (hSpec), and each
  // kind leaves two of these fields unused, so they share memory (8 + 8 bytes per record, not 28):
  /** Confirmed records: the engine's hash [lo, hi] (the router's own for standard publishers). */
  protected recEng: Int32Array;
  /** Speculative records: the expiry (a view of recEng's memory; a confirmed record's is 0, never read). */
  protected recExp: Float64Array;
  /** Confirmed records: the allocation clock of the last store or routed-to touch (LRU estimate). */
  protected recTouch: Float64Array;
  /** Speculative records: the inserts that claim the record and have not been withdrawn (recTouch's memory). */
  protected recClaims: Float64Array;
  protected runLen = new Int32Array(64);
  protected runRefs = new Int32Array(64);
  // The LRU keys of a run in O(1) (surviving()): a run one store wrote has key A - pos at position
  // pos (runKey = A; NaN once a second store extends it or touches leave a staircase), except that
  // positions [0, runTouchEnd) were touched since, at epoch runTouchEpoch (the ceiling of the key:
  // all the judgement reads). runTail is its record at runLen - 1 (NONE: unknown).
  protected runKey = new Float64Array(64);
  protected runTouchEnd = new Int32Array(64);
  protected runTouchEpoch = new Float64Array(64);
  protected runTail = new Int32Array(64);
  /** After judgeRun(): whether the position it returned is the run's first block that goes. */
  private runDoomed = false;
  protected runFree: number[] = [];
  protected runTop = 0;
  protected recFree = NONE;
  protected recTop = 0;
  protected liveRecords = 0;
  /** Contiguous copies of the records of blocks with many holders (the walk's seeds read them). */
  protected hot = new HotBlocks();
  /** Holder bitsets of crowded blocks (the store's membership test; kept by newRecord/freeRecord). */
  protected crowd = new HolderSets();
  /**
   * Whether the record rows were reserved up front (`reserveRecords`) and not compacted since: rows
   * are taken in order from 0 (recTop) before any is reused, so rows past the high-water mark were
   * never written, and the OS commits none of their pages (a large zero-filled ArrayBuffer is mapped
   * on demand). recordRows() counts what a growing table would hold there, not the reservation.
   */
  private reserved: boolean;
  private readonly initialRows: number;

  constructor(
    initialBlocks: number,
    protected readonly onHoldersPurged?: () => void,
    /**
     * Record rows to allocate at once (0: grow from initialBlocks): the records the namespace is
     * expected to hold at most (a fleet: its engines' blocks). A table growing by 1/8 allocates
     * ~9x its final size over its life, each step a whole new array, and V8 starts a full mark-compact
     * at every 64 MiB of ArrayBuffers allocated: growing to millions of records started most of a
     * 1,024-engine fleet run's mark-compacts.
     */
    reserveRecords = 0,
    /** Engine hashes a group's engine map holds before it grows, and never shrinks below (0: grow from 64 rows). */
    private readonly reserveEngineHashes = 0,
  ) {
    super();
    const cap = Math.max(16, initialBlocks);
    this.initialRows = cap;
    this.reserved = reserveRecords > cap;
    const rows = Math.max(cap, reserveRecords);
    // Filled to 0.7 before it doubles (not 0.5): a probe finds a present key in ~2 rows. Past 2^22
    // rows (the fleet's routers hold millions of blocks) a table that doubles is 35-70 % full, up to
    // ~40 bytes per block of empty rows; there it grows in steps of 1.14-1.25x (56-70 % full), never
    // fuller than a doubling table gets. Not fuller (0.8 from 2^20 rows: `bench indexer`'s block-64
    // queries 1.2-4x slower), and not below 2^22 rows (every `bench indexer` case keeps its layout).
    try {
      this.rec = new Int32Array(rows * R);
      this.recTouch = new Float64Array(rows);
      this.recEng = new Int32Array(rows * 2);
    } catch (e) {
      // A reservation the runtime refuses (too large): grow as usual instead.
      if (!(e instanceof RangeError) || rows === cap) throw e;
      this.reserved = false;
      this.rec = new Int32Array(cap * R);
      this.recTouch = new Float64Array(cap);
      this.recEng = new Int32Array(cap * 2);
    }
    // A reservation sizes the table too, for as many blocks as reserved records (a block has >= 1),
    // up to 2^22 rows, where the fine steps start: the doublings to there rehashed ~3 M rows per
    // fleet router (~half of the table's growth copies at 1,024 x 10,000, 5.6 % of its CPU behind 8
    // replicas). Not beyond: its rows are all written soon (hashes spread), so a larger table would
    // cost its memory from the start (104 bytes per record at 1,024 x 10,000 instead of 90).
    this.table = new U64Table(
      T,
      this.reserved ? Math.min(rows, BLOCK_TABLE_FINE.fromRows * BLOCK_TABLE_FINE.maxLoad) : cap,
      BLOCK_TABLE_LOAD,
      BLOCK_TABLE_FINE,
    );
    this.recClaims = this.recTouch;
    this.recExp = new Float64Array(this.recEng.buffer);
  }

  // ---------------------------------------------------------------- runs

  /** The run a store continues: its parent's, if the parent is the last block of its run; else a new one. */
  protected openRun(holder: number, parent: bigint | null): number {
    if (parent !== null) {
      splitScratch[0] = parent;
      const lo = splitView[0];
      const hi = splitView[1];
      // The parent is mostly the holder's newest record (the previous chunk of the same prefill):
      // its list's tail, without a walk of the block's holders (a shared prefix has a thousand).
      const t = this.holders[holder].tail;
      let p = NONE;
      const q = this.resolvedRecord;
      if (t !== NONE && this.rec[t * R + R_LO] === lo && this.rec[t * R + R_HI] === hi) p = t;
      else if (
        q !== NONE &&
        this.rec[q * R + R_HOLDER] === holder &&
        this.rec[q * R + R_LO] === lo &&
        this.rec[q * R + R_HI] === hi
      )
        p = q;
      else {
        const slot = this.table.find(lo, hi);
        if (slot !== NONE) p = this.findRecordOf(lo, hi, this.table.data[slot * T + T_HEAD], holder);
      }
      if (p !== NONE && this.rec[p * R + R_POS] === this.runLen[this.rec[p * R + R_RUN]] - 1)
        return this.rec[p * R + R_RUN];
    }
    let id = this.runFree.pop();
    if (id === undefined) {
      id = this.runTop++;
      if (id >= this.runLen.length) {
        const n = this.runLen.length * 2;
        this.runLen = grow(this.runLen, n);
        this.runRefs = grow(this.runRefs, n);
        this.runKey = grow(this.runKey, n);
        this.runTouchEnd = grow(this.runTouchEnd, n);
        this.runTouchEpoch = grow(this.runTouchEpoch, n);
        this.runTail = grow(this.runTail, n);
      }
    }
    this.runLen[id] = 0;
    this.runRefs[id] = 0;
    this.runKey[id] = Number.NaN;
    this.runTouchEnd[id] = 0;
    this.runTouchEpoch[id] = 0;
    this.runTail[id] = NONE;
    return id;
  }

  /**
   * A confirmed store wrote positions [base, base + n) of `run` at clock0 (keys clock0 + n - i), its
   * last record `last`: a new run's keys are runKey - pos; an extended run's are judged block by block.
   */
  protected storedRun(run: number, base: number, n: number, clock0: number, last: number): void {
    this.runKey[run] = base === 0 ? clock0 + n : Number.NaN;
    this.runTail[run] = last;
  }

  /** A touch at epoch e reached positions [0, end) of `run` (a prompt through a run passes its start). */
  private touchRun(run: number, end: number, e: number): void {
    if (e === this.runTouchEpoch[run]) {
      if (end > this.runTouchEnd[run]) this.runTouchEnd[run] = end;
    } else if (end >= this.runTouchEnd[run]) {
      this.runTouchEnd[run] = end;
      this.runTouchEpoch[run] = e;
    } else this.runKey[run] = Number.NaN; // a newer, shorter touch: two steps
  }

  /** A stored-again record joins the run of its latest store (which holds it newest-first, too). */
  protected moveToRun(r: number, run: number, pos: number): void {
    const rec = this.rec;
    if (rec[r * R + R_RUN] !== run || rec[r * R + R_POS] !== pos)
      this.hot.moved(rec[r * R + R_LO], rec[r * R + R_HI], r, run, pos);
    if (rec[r * R + R_RUN] !== run) {
      this.runRefs[run]++;
      this.leaveRun(r);
      rec[r * R + R_RUN] = run;
    }
    rec[r * R + R_POS] = pos;
  }

  /** Speculative record r (of `holder`, on the block at table `slot`) expires at `expiresAt` now: the row's signature follows. */
  protected reExpire(r: number, slot: number, holder: number, expiresAt: number): void {
    const rec = this.rec;
    this.table.data[slot * T + T_SIG] ^= recordMix(holder, this.recExp[r]) ^ recordMix(holder, expiresAt);
    this.recExp[r] = expiresAt;
    this.hot.expires(rec[r * R + R_LO], rec[r * R + R_HI], r, expiresAt);
  }

  protected leaveRun(r: number): void {
    const rec = this.rec;
    const run = rec[r * R + R_RUN];
    // A run's last block gone (engines evict the deepest first): the run ends before it, and its
    // record before it in the holder's list is mostly the new last (stored together).
    if (rec[r * R + R_POS] === this.runLen[run] - 1) {
      const len = --this.runLen[run];
      const p = rec[r * R + R_PREV_H];
      this.runTail[run] = p !== NONE && rec[p * R + R_RUN] === run && rec[p * R + R_POS] === len - 1 ? p : NONE;
    }
    if (--this.runRefs[run] === 0) this.runFree.push(run);
  }

  // ---------------------------------------------------------------- eviction awareness (LRU estimate)

  /**
   * The engine is about to use this prefix (a request was routed to it): it becomes the most recently
   * used in the instance's LRU, the shallowest block newest, without counting as an allocation.
   */
  touch(instance: string, dpRank: number, seq: BigUint64Array, depth: number): void {
    const id = this.gpuHolder(instance, dpRank);
    if (id === NONE) return;
    const h = this.holders[id];
    const sv = hashView(seq);
    const d = Math.min(depth, seq.length);
    // Every key this touch writes has the ceiling h.clock + 1 (its epoch); each run it passes gets
    // the positions it reached (a prefix of the run: a chain's blocks name their ancestors).
    const e = h.clock + 1;
    let run = NONE;
    let end = 0;
    let next = NONE;
    for (let i = 0; i < d; i++) {
      const r = this.recordOn(id, sv, i, next);
      if (r === NONE) continue;
      this.recTouch[r] = h.clock + 0.5 - i / (2 * (d + 1));
      next = this.rec[r * R + R_NEXT_H];
      const x = this.rec[r * R + R_RUN];
      const at = this.rec[r * R + R_POS] + 1;
      if (x !== run) {
        if (run !== NONE) this.touchRun(run, end, e);
        run = x;
        end = at;
      } else if (at > end) end = at;
    }
    if (run !== NONE) this.touchRun(run, end, e);
  }

  /**
   * The holder's record of prompt block i, or NONE. `guess` is the record after the holder's
   * previous block on the prompt in its list: blocks stored together are neighbours there, so the
   * guess is mostly right, and a prefix costs O(1) per block instead of a scan of each block's holders.
   */
  protected recordOn(id: number, sv: Int32Array, i: number, guess: number): number {
    const rec = this.rec;
    if (guess !== NONE && rec[guess * R + R_LO] === sv[2 * i] && rec[guess * R + R_HI] === sv[2 * i + 1]) return guess;
    const slot = this.table.find(sv[2 * i], sv[2 * i + 1]);
    return slot === NONE ? NONE : this.findRecordOf(sv[2 * i], sv[2 * i + 1], this.table.data[slot * T + T_HEAD], id);
  }

  /**
   * How much of an instance's GPU prefix [0, depth) is still there after `allocations` more blocks
   * are allocated on it (the prefill queued ahead of a request), under LRU: free room first, then
   * the least recently used blocks go. A block is judged by the blocks allocated since it was last
   * stored or routed to (blocks re-used since are not counted as newer: the estimate errs toward
   * keeping). A holder that never evicted is not full, and without a confirmed GPU holder there is
   * nothing to judge: both keep the whole depth. The prefix ends at its first block that goes
   * (deeper blocks can be newer than shallower ones: events append to chains).
   */
  survivingPrefix(instance: string, dpRank: number, seq: BigUint64Array, depth: number, allocations: number): number {
    return this.surviving(this.gpuHolder(instance, dpRank), hashView(seq), depth, allocations, NONE, seq.length);
  }

  /**
   * survivingPrefix for GPU holder `id`; `first` is its record of block 0 when known (NONE: look it
   * up), and the holder holds none of the blocks from `end` on.
   */
  protected surviving(
    id: number,
    sv: Int32Array,
    depth: number,
    allocations: number,
    first: number,
    end: number,
  ): number {
    const h = id === NONE ? null : this.holders[id];
    if (!h || h.evicted === 0 || depth <= 0) return depth;
    const need = allocations - (h.peak - h.count);
    if (need <= 0) return depth;
    // A block goes when fewer than `need` blocks are strictly older: max(0, floor(clock - touch))
    // blocks are newer, so it goes when count - 1 - that < need, i.e. touch <= clock - count + need
    // (or always, when need exceeds every other block).
    const all = h.count - 1 < need;
    const limit = h.clock - h.count + need;
    // Keys are judged by their ceiling against an integral limit (runs in O(1) rely on it).
    const byRun = !all && Math.floor(limit) === limit;
    const { rec, recTouch } = this;
    const d = Math.min(depth, end, sv.length >> 1);
    let next = first;
    // The run judgeRun() last declined (the same answer at every later position of it).
    let declined = NONE;
    for (let i = 0; i < d; i++) {
      // The next record in the holder's list is mostly this block's (stored together); else look it up.
      let r = next;
      if (r === NONE || rec[r * R + R_LO] !== sv[2 * i] || rec[r * R + R_HI] !== sv[2 * i + 1]) {
        r = this.recordOn(id, sv, i, NONE);
        if (r === NONE) continue; // held through another holder of the instance: no judgement
      }
      if (all || recTouch[r] <= limit) return i;
      if (byRun && rec[r * R + R_RUN] !== declined) {
        // The rest of r's run at once, where its keys are known (judgeRun).
        const at = this.judgeRun(r, sv, i, limit);
        if (at !== NONE) {
          if (this.runDoomed) return at < d ? at : depth;
          if (at >= d) return depth;
          next = rec[this.runTail[rec[r * R + R_RUN]] * R + R_NEXT_H];
          i = at - 1;
          continue;
        }
        declined = rec[r * R + R_RUN];
      }
      next = rec[r * R + R_NEXT_H];
    }
    return depth;
  }

  /**
   * Record r, the holder's of prompt block i, is in a run whose keys are known (one store wrote it,
   * touches reached a prefix of it) and that has every position [0, runLen) (none left but from its
   * end): if the prompt follows the run to its last block (that block's hash is the prompt's there;
   * a chain's block names its ancestors), the run's first block with key <= limit is found from the
   * keys' formula. Returns its prompt position (runDoomed), or the position after the run's last
   * block (none goes); NONE where the run's keys are not known or the prompt leaves the run.
   */
  private judgeRun(r: number, sv: Int32Array, i: number, limit: number): number {
    const rec = this.rec;
    const x = rec[r * R + R_RUN];
    const a = this.runKey[x];
    const len = this.runLen[x];
    if (Number.isNaN(a) || this.runRefs[x] !== len) return NONE;
    const tail = this.runTail[x];
    const p = rec[r * R + R_POS];
    const at = i + len - 1 - p;
    if (
      tail === NONE ||
      rec[tail * R + R_RUN] !== x ||
      rec[tail * R + R_POS] !== len - 1 ||
      at >= sv.length >> 1 ||
      rec[tail * R + R_LO] !== sv[2 * at] ||
      rec[tail * R + R_HI] !== sv[2 * at + 1]
    )
      return NONE;
    // Touched positions [0, touchEnd) all have the touch's epoch; the others the store's key A - pos.
    const touchEnd = this.runTouchEnd[x];
    const q = p < touchEnd && this.runTouchEpoch[x] <= limit ? p : Math.max(p, touchEnd, a - limit);
    this.runDoomed = q < len;
    return this.runDoomed ? i + q - p : at + 1;
  }

  // ---------------------------------------------------------------- engine hashes (dual key)

  /** Router seq hash for an engine hash known in the holder's (backend, dp rank) group, or null. */
  resolve(holder: number, engineHash: bigint): bigint | null {
    const h = this.holders[holder];
    return h ? this.resolveInGroup(h.group, engineHash) : null;
  }

  /** Like resolve(), by backend and dp rank; never creates anything. */
  resolveBackend(backend: string, dpRank: number, engineHash: bigint): bigint | null {
    const g = this.groupKeys.get(`${backend}\u0000${dpRank}`);
    return g === undefined ? null : this.resolveInGroup(g, engineHash);
  }

  /** The router hash (into keyOut) for an engine hash of a group: mapped, or the hash itself. */
  protected routerKey(g: { engineMap: EngineMap | null }, lo: number, hi: number): void {
    if (g.engineMap) {
      const s = g.engineMap.find(lo, hi, this.recEng);
      if (s !== NONE) {
        const r = g.engineMap.record(s);
        keyOut[0] = this.rec[r * R + R_LO];
        keyOut[1] = this.rec[r * R + R_HI];
        return;
      }
    }
    keyOut[0] = lo;
    keyOut[1] = hi;
  }

  /**
   * Confirmed record r (of the block at table `slot`) now carries engine hash (elo, ehi): the latest
   * store's. Its group's engine map points that hash at r. A row points at a live record of its group
   * that carries its hash, so it never outlives its record: a hash r carried before loses r
   * (unmapRecord), and a freed record loses its row the same way.
   */
  protected setEngineHash(r: number, slot: number, group: number, elo: number, ehi: number): void {
    if (this.recEng[2 * r] !== elo || this.recEng[2 * r + 1] !== ehi) {
      this.unmapRecord(r, this.table.data[slot * T + T_HEAD], group);
      this.recEng[2 * r] = elo;
      this.recEng[2 * r + 1] = ehi;
    }
    if (elo === this.rec[r * R + R_LO] && ehi === this.rec[r * R + R_HI]) return;
    const g = this.groups[group];
    if (!g.engineMap) g.engineMap = EngineMap.holding(this.reserveEngineHashes);
    g.engineMap.set(r, this.recEng);
  }

  /**
   * Record r (confirmed, of `group`) stops carrying its engine hash: the row that points at it moves to
   * another record of the group on the block (list from `head`) that carries the same hash, or goes.
   */
  protected unmapRecord(r: number, head: number, group: number): void {
    const em = this.groups[group].engineMap;
    if (!em) return;
    const rec = this.rec;
    const eng = this.recEng;
    const elo = eng[2 * r];
    const ehi = eng[2 * r + 1];
    if (elo === rec[r * R + R_LO] && ehi === rec[r * R + R_HI]) return;
    const s = em.find(elo, ehi, eng);
    if (s === NONE || em.record(s) !== r) return;
    // The group's only confirmed holder (one medium: a fleet's engines) has no other record here; a
    // walk of a shared block's list would read a thousand records to learn that.
    if (this.groups[group].confirmed <= 1) {
      em.removeSlot(s);
      return;
    }
    for (let x = head; x !== NONE; x = rec[x * R + R_NEXT_E]) {
      const hx = rec[x * R + R_HOLDER];
      if (
        x !== r &&
        this.hGroup[hx] === group &&
        this.hSpec[hx] === 0 &&
        eng[2 * x] === elo &&
        eng[2 * x + 1] === ehi
      ) {
        em.setRecord(s, x);
        return;
      }
    }
    em.removeSlot(s);
  }

  protected resolveInGroup(group: number, engineHash: bigint): bigint | null {
    splitScratch[0] = engineHash;
    const lo = splitView[0];
    const hi = splitView[1];
    const em = this.groups[group].engineMap;
    this.resolvedRecord = NONE;
    if (em) {
      const s = em.find(lo, hi, this.recEng);
      if (s !== NONE) {
        // A row points at a live record of its group (setEngineHash, unmapRecord): the group holds
        // the block, with no walk of the block's holders (a shared prefix has a thousand).
        const r = em.record(s);
        this.resolvedRecord = r;
        return join(this.rec[r * R + R_LO], this.rec[r * R + R_HI]);
      }
    }
    const slot = this.table.find(lo, hi);
    if (slot === NONE || !this.groupHolds(this.table.data[slot * T + T_HEAD], group)) return null;
    return join(lo, hi);
  }

  // ---------------------------------------------------------------- record rows

  /**
   * The record the last resolve() found through an engine map (NONE: none, or it was freed since):
   * a KV event resolves its parent and then stores, so openRun() finds the parent's record here
   * when it is the holder's (a group's holders are its media).
   */
  private resolvedRecord = NONE;

  protected findRecord(head: number, holder: number): number {
    const rec = this.rec;
    for (let r = head; r !== NONE; r = rec[r * R + R_NEXT_E]) if (rec[r * R + R_HOLDER] === holder) return r;
    return NONE;
  }

  /**
   * findRecord for block (lo, hi): from the block's hot copy when it has a valid one (a contiguous
   * scan; the list of a block with a thousand holders is a cache miss per record), else its list.
   * A query's walk made the copies of its prompt's first blocks, which the booking then touches.
   */
  protected findRecordOf(lo: number, hi: number, head: number, holder: number): number {
    const e = this.hot.find(lo, hi);
    if (e < 0) return this.findRecord(head, holder);
    const rows = this.hot.data(e);
    for (let k = 0, n = this.hot.size(e); k < n; k++) if (rows[k * HB + 1] === holder) return rows[k * HB];
    return NONE;
  }

  /** Free the holder's record of the block at table `slot`, in one walk of its list; whether it had one. */
  protected freeHolderRecord(slot: number, holder: number): boolean {
    const rec = this.rec;
    let prev = NONE;
    for (let r = this.table.data[slot * T + T_HEAD]; r !== NONE; r = rec[r * R + R_NEXT_E]) {
      if (rec[r * R + R_HOLDER] === holder) {
        this.freeRecordAt(r, slot, prev);
        return true;
      }
      prev = r;
    }
    return false;
  }

  protected groupHolds(head: number, group: number): boolean {
    const rec = this.rec;
    for (let r = head; r !== NONE; r = rec[r * R + R_NEXT_E])
      if (this.hGroup[rec[r * R + R_HOLDER]] === group) return true;
    return false;
  }

  /** The record before `r` in its block's list (NONE: r is the head). */
  protected prevInBlock(head: number, r: number): number {
    const rec = this.rec;
    let p = NONE;
    for (let x = head; x !== r; x = rec[x * R + R_NEXT_E]) p = x;
    return p;
  }

  protected dropSpeculative(slot: number, cand: number): void {
    const rec = this.rec;
    let prev = NONE;
    for (let r = this.table.data[slot * T + T_HEAD]; r !== NONE; ) {
      const next = rec[r * R + R_NEXT_E];
      const h = rec[r * R + R_HOLDER];
      if (this.hSpec[h] === 1 && this.hCand[h] === cand) this.freeRecordAt(r, slot, prev);
      else prev = r;
      r = next;
    }
  }

  protected newRecord(
    slot: number,
    lo: number,
    hi: number,
    holder: number,
    elo: number,
    ehi: number,
    expiresAt: number,
    run: number,
    pos: number,
    /** The block's holder set (HolderSets), NONE where it has none: the caller looked it up. */
    set: number,
  ): number {
    let r = this.recFree;
    if (r !== NONE) this.recFree = this.rec[r * R + R_NEXT_E];
    else {
      r = this.recTop++;
      if (r * R >= this.rec.length) {
        const cap = nextRecordCapacity(this.recTouch.length);
        this.rec = grow(this.rec, cap * R);
        this.recTouch = grow(this.recTouch, cap);
        this.recClaims = this.recTouch;
        this.recEng = grow(this.recEng, cap * 2);
        this.recExp = new Float64Array(this.recEng.buffer);
      }
    }
    this.runRefs[run]++;
    const rec = this.rec;
    const o = r * R;
    const tbl = this.table.data;
    this.hot.added(lo, hi, r, holder, run, pos, this.hSpec[holder] === 1 ? expiresAt : 0);
    if (set !== NONE) this.crowd.add(set, holder);
    rec[o + R_LO] = lo;
    rec[o + R_HI] = hi;
    rec[o + R_HOLDER] = holder;
    rec[o + R_NEXT_E] = tbl[slot * T + T_HEAD];
    tbl[slot * T + T_HEAD] = r;
    tbl[slot * T + T_SIG] ^= recordMix(holder, expiresAt);
    rec[o + R_RUN] = run;
    rec[o + R_POS] = pos;
    if (this.hSpec[holder] === 1) this.recExp[r] = expiresAt;
    else {
      this.recEng[2 * r] = elo;
      this.recEng[2 * r + 1] = ehi;
    }
    const h = this.holders[holder];
    rec[o + R_PREV_H] = h.tail;
    rec[o + R_NEXT_H] = NONE;
    if (h.tail !== NONE) rec[h.tail * R + R_NEXT_H] = r;
    else h.head = r;
    h.tail = r;
    h.count++;
    if (h.count > h.peak) h.peak = h.count;
    this.liveRecords++;
    return r;
  }

  // ---------------------------------------------------------------- table sizes (the sweep)

  /**
   * Record rows the index counts as its memory: the capacity, or for reserved rows the capacity a
   * table growing from initialBlocks would have reached at the high-water mark (the same figure; never
   * less than the rows written, which are all the OS has committed).
   */
  protected recordRows(): number {
    const cap = this.recTouch.length;
    if (!this.reserved) return cap;
    let rows = this.initialRows;
    while (rows < this.recTop) rows = nextRecordCapacity(rows);
    return Math.min(cap, rows);
  }

  /**
   * Give back the room a sweep emptied: the seq-hash table, the record rows and the engine maps keep
   * the size their peak gave them (the expired bookings of a busy minute) until this. Each shrinks only
   * well below its capacity and keeps room for a growth step (hysteresis), so a sweep every second does
   * not thrash. Whether anything shrank.
   */
  protected fitTables(): boolean {
    // A reserved table keeps its size (a sweep of the first bookings would undo the reservation).
    let shrank = !this.reserved && this.table.shrink();
    for (const g of this.groups) if (g.engineMap?.shrink()) shrank = true;
    const cap = this.recordRows();
    if (cap > 16 && this.liveRecords < cap * RECORD_FIT_FILL) {
      this.compactRecords();
      shrank = true;
    }
    return shrank;
  }

  /**
   * Renumber the live records 0..live-1 in their order (no free rows left) and cut the rows to
   * nextRecordCapacity(live). Every list keeps its order (a block's holders, a holder's blocks), so
   * every answer stays the same; what holds record ids is renumbered with them: the rows' links, the
   * table's heads, the holders' ends, the runs' last records, the engine maps and the hot-block copies.
   */
  protected compactRecords(): void {
    const top = this.recTop;
    const live = this.liveRecords;
    let rec = this.rec;
    const map = new Int32Array(top);
    for (let r = this.recFree; r !== NONE; r = rec[r * R + R_NEXT_E]) map[r] = NONE;
    let n = 0;
    for (let r = 0; r < top; r++) {
      if (map[r] === NONE) continue;
      map[r] = n;
      if (n !== r) {
        rec.copyWithin(n * R, r * R, r * R + R);
        this.recTouch[n] = this.recTouch[r];
        this.recEng[2 * n] = this.recEng[2 * r];
        this.recEng[2 * n + 1] = this.recEng[2 * r + 1];
      }
      n++;
    }
    if (n !== live) throw new Error(`record compaction found ${n} live records, not ${live}`);
    const cap = Math.max(16, nextRecordCapacity(live));
    // Written rows past `live` would stay committed in a reserved table: a compacted one is a copy.
    this.reserved = false;
    rec = this.rec = rec.slice(0, cap * R);
    this.recTouch = this.recTouch.slice(0, cap);
    this.recClaims = this.recTouch;
    this.recEng = this.recEng.slice(0, cap * 2);
    this.recExp = new Float64Array(this.recEng.buffer);
    const relink = (x: number) => (x === NONE ? NONE : map[x]);
    for (let o = 0; o < live * R; o += R) {
      rec[o + R_NEXT_E] = relink(rec[o + R_NEXT_E]);
      rec[o + R_PREV_H] = relink(rec[o + R_PREV_H]);
      rec[o + R_NEXT_H] = relink(rec[o + R_NEXT_H]);
    }
    const tbl = this.table.data;
    for (let o = 0; o < tbl.length; o += T) if (tbl[o + T_SIG] !== 0) tbl[o + T_HEAD] = relink(tbl[o + T_HEAD]);
    for (const i of this.liveHolders) {
      const h = this.holders[i];
      h.head = relink(h.head);
      h.tail = relink(h.tail);
    }
    for (const g of this.groups) g.engineMap?.renumber(map);
    this.hot.renumber(map);
    // judgeRun reads a run's last record by id (a stale one only costs the O(1) path, but costs it).
    const tails = this.runTail;
    for (let x = 0; x < this.runTop; x++) if (tails[x] !== NONE) tails[x] = relink(tails[x]);
    this.recTop = live;
    this.recFree = NONE;
    this.resolvedRecord = NONE;
  }

  protected unlinkFromHolder(h: Holder, r: number): void {
    const rec = this.rec;
    const prev = rec[r * R + R_PREV_H];
    const next = rec[r * R + R_NEXT_H];
    if (prev !== NONE) rec[prev * R + R_NEXT_H] = next;
    else h.head = next;
    if (next !== NONE) rec[next * R + R_PREV_H] = prev;
    else h.tail = prev;
  }

  protected moveToTail(h: Holder, r: number): void {
    if (h.tail === r) return;
    this.unlinkFromHolder(h, r);
    const rec = this.rec;
    rec[r * R + R_PREV_H] = h.tail;
    rec[r * R + R_NEXT_H] = NONE;
    if (h.tail !== NONE) rec[h.tail * R + R_NEXT_H] = r;
    else h.head = r;
    h.tail = r;
  }

  protected freeRecord(r: number): void {
    const slot = this.table.find(this.rec[r * R + R_LO], this.rec[r * R + R_HI]);
    this.freeRecordAt(r, slot, this.prevInBlock(this.table.data[slot * T + T_HEAD], r));
  }

  /**
   * Free record r of the block at table `slot`, `prev` its predecessor in the block's list (NONE: the
   * head), for callers that walked the list to find r. The block's row goes with its last record.
   */
  protected freeRecordAt(r: number, slot: number, prev: number): void {
    const rec = this.rec;
    const o = r * R;
    const lo = rec[o + R_LO];
    const hi = rec[o + R_HI];
    const holder = rec[o + R_HOLDER];
    const h = this.holders[holder];
    if (r === this.resolvedRecord) this.resolvedRecord = NONE;
    this.hot.removed(lo, hi, r);
    const tbl = this.table.data;
    const headAt = slot * T + T_HEAD;
    // unlink from the entry's singly linked list
    if (prev === NONE) tbl[headAt] = rec[o + R_NEXT_E];
    else rec[prev * R + R_NEXT_E] = rec[o + R_NEXT_E];
    const spec = this.hSpec[holder] === 1;
    tbl[slot * T + T_SIG] ^= recordMix(holder, spec ? this.recExp[r] : 0);
    this.unlinkFromHolder(h, r);
    this.leaveRun(r);
    h.count--;
    this.liveRecords--;
    // The engine hash stays mapped while another record of this group carries it on the block.
    const emptied = tbl[headAt] === NONE;
    if (!spec) this.unmapRecord(r, tbl[headAt], h.group);
    if (this.crowd.size > 0) {
      if (emptied) this.crowd.drop(lo, hi);
      else {
        const set = this.crowd.find(lo, hi);
        if (set !== NONE) this.crowd.remove(set, holder);
      }
    }
    rec[o + R_NEXT_E] = this.recFree;
    this.recFree = r;
    if (emptied) this.table.removeSlot(slot);
  }
}
