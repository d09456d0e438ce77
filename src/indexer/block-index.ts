// One namespace of the tiered index: seq hash -> holders (backend, dp rank, medium), with a
// cumulative per-(instance, dp rank) tier walk for queries. Pure data structure: no timers, no I/O;
// callers pass `now` (ms) for speculative entries.
//
// Layout, chosen so a query touches about one cache line per block plus its records:
//   table   U64Table rows [hashLo, hashHi, used, headRecord]: seq hash -> first record
//   records Int32Array rows of 8: [hashLo, hashHi, holder, nextInEntry, prevInHolder, nextInHolder,
//           run, position in run] + Int32Array engine hash [lo, hi] + Float64Array expiry
//           (speculative records only) + Float64Array touch (the holder's allocation clock when the
//           block was last stored or routed to) + Int32Array claims (speculative records only: the
//           bookings' inserts that claim it)
//   holders (backend, dp rank, medium, owner) with a doubly linked list of their records, so a
//           `cleared` event or an unregister purges in O(records of that holder)
//   groups  (backend, dp rank): scope of engine-native hashes (dual key): engine hash -> seq hash
//   runs    chains a holder stored, block after block (one store, or stores that continue their
//           parent): each record knows its run and position in it, each run its length, so a record
//           tells how far its holder's chain goes past it. The query walk uses that as a prediction,
//           checked block by block against the rows' signatures (see walk()).
import { WorkerMap } from '../common/worker-map.js';
import { U64Table } from './u64-table.js';
import { type Medium, TIER_BIT } from './tiers.js';

const NONE = -1;
/** Query ids wrap here; the stamps are cleared then, so an old stamp never passes for a new query. */
const QUERY_ID_LIMIT = 0x3fffffff;
/** A predicted stop of a shared-pool holder (other nodes name a tracked candidate, or NONE). */
const SHARED = -2;
// predicted-stop node: [record mix, who (candidate, SHARED or NONE), tier bit, next in its depth's list]
const Q = 4;
const GPU = TIER_BIT.GPU;
const GPU_CPU = TIER_BIT.GPU | TIER_BIT.CPU;
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
const TOUCH_WINDOW = 64;
/** A level still extending (its depth is fixed when it stops). */
const EXT = -1;
const T_SIG = 2;
const T_HEAD = 3;

/**
 * Even 32-bit mix of a record's (holder, expiry): XOR-ing it keeps the signature odd, hence never
 * 0 = empty. Expiry takes part so that speculative blocks with different expiries never compare equal.
 */
function recordMix(h: number, expiresAt: number): number {
  let x = Math.imul(h + 1, 0x9e3779b1) ^ Math.imul((expiresAt >>> 0) ^ ((expiresAt / 4294967296) | 0), 0xc2b2ae35);
  x ^= x >>> 16;
  x = Math.imul(x, 0x85ebca6b);
  x ^= x >>> 13;
  return (x << 1) | 0;
}
// engine map row: [engLo, engHi, used, seqLo, seqHi, pad]
const EM = 6;

export interface CandidateOverlap {
  instance: string;
  dpRank: number;
  /** Longest prefix (blocks) on the device tier. */
  device: number;
  /** Longest prefix on device + host. */
  host: number;
  /** Longest prefix on any of the instance's own tiers (device + host + disk + external). */
  disk: number;
}

export interface OverlapResult {
  /** Complete blocks in the query. */
  queriedBlocks: number;
  /** Candidates with at least one matched block. */
  candidates: CandidateOverlap[];
  /** Longest contiguous prefix held by shared-pool backends (readable by every instance). */
  sharedBlocks: number;
}

/** Overlaps of a list of candidates, in the list's order (0 for a candidate holding none of the prompt). */
export interface CandidateOverlaps {
  device: Int32Array;
  host: Int32Array;
  disk: Int32Array;
  /** The device prefix left after the prefill queued there (survivingPrefix); `device` without allocations. */
  surviving: Int32Array;
  /** Longest contiguous prefix held by shared-pool backends. */
  shared: number;
}

export interface HolderInfo {
  backend: string;
  dpRank: number;
  medium: Medium;
  /** Routable instance, or null for a shared-pool backend. */
  instance: string | null;
  speculative: boolean;
  blocks: number;
}

export interface DumpedBlock {
  hash: bigint;
  /** Engine-native hash when it differs from the router hash. */
  engineHash: bigint | null;
  expiresAt: number;
}

/** One speculative insert (a booking's), so that a failed attempt can take it back (`withdrawSpeculative`). */
export interface SpeculativeInsert {
  ttlMs: number;
  expiresAt: number;
}

export interface IndexStats {
  blocks: number;
  records: number;
  holders: number;
  bytes: number;
}

interface Holder {
  key: string;
  backend: string;
  dpRank: number;
  medium: Medium;
  group: number;
  speculative: boolean;
  ttlMs: number;
  head: number;
  tail: number;
  count: number;
  alive: boolean;
  /** Allocation clock: advances by one per block stored (a touch does not). */
  clock: number;
  /** Most blocks held at once: the cache's size once it has evicted. */
  peak: number;
  /** Blocks removed by events (evictions): a holder that never evicted is not full. */
  evicted: number;
}

interface Candidate {
  instance: string;
  dpRank: number;
}

/** A speculative holder's key: one per (instance, dp rank, TTL class). */
const specKey = (instance: string, dpRank: number, ttlMs: number): string =>
  `s\u0000${instance}\u0000${dpRank}\u0000${ttlMs}`;
const hashView = (a: BigUint64Array): Int32Array => new Int32Array(a.buffer, a.byteOffset, a.length * 2);
const splitScratch = new BigUint64Array(1);
const keyOut = new Int32Array(2);
const splitView = new Int32Array(splitScratch.buffer);
function join(lo: number, hi: number): bigint {
  splitView[0] = lo;
  splitView[1] = hi;
  return splitScratch[0];
}

export class BlockIndex {
  private table: U64Table;
  private rec: Int32Array;
  private recExp: Float64Array;
  private recTouch: Float64Array;
  /** Speculative records only: the inserts that claim the record and have not been withdrawn. */
  private recClaims: Int32Array;
  /** Per record: the engine's hash [lo, hi] (the router's own for standard publishers). */
  private recEng: Int32Array;
  private runLen = new Int32Array(64);
  private runRefs = new Int32Array(64);
  private runFree: number[] = [];
  private runTop = 0;
  private recFree = NONE;
  private recTop = 0;
  private liveRecords = 0;
  // holders: objects for metadata, typed arrays for the query loop
  private holders: Holder[] = [];
  private holderKeys = new Map<string, number>();
  // Purged holder ids are reused, so a flapping publisher cannot grow the holder table.
  private liveHolders = new Set<number>();
  private freeHolderIds: number[] = [];
  private hCand = new Int32Array(16);
  private hBit = new Int32Array(16);
  private hSpec = new Uint8Array(16);
  private hGroup = new Int32Array(16);
  /** The holder's record mix for an unexpiring record (what a confirmed record adds to a signature). */
  private hMix0 = new Int32Array(16);
  private groups: Array<{ engineMap: U64Table | null }> = [];
  private groupKeys = new Map<string, number>();
  private cands: Candidate[] = [];
  /** Candidate ids by (instance, dp rank); ids are never taken back. */
  private candIds = new WorkerMap<number>();
  /**
   * The last candidate list overlapsFor() resolved, and its ids: a router passes the same list
   * (the same instance strings, in the same order) request after request, and comparing it costs
   * less than looking each up. Valid while no candidate id was added (a miss may have become a hit).
   */
  private lastList: Array<{ instance: string; dpRank: number }> = [];
  private lastIds = new Int32Array(0);
  private lastListCands = -1;
  private backendOwner = new Map<string, string | null>();
  // query scratch, indexed by candidate id: stamps, levels, and the live holders per level
  private qStamp = new Int32Array(64);
  private qWant = new Int32Array(64);
  private qDev = new Int32Array(64);
  private qHost = new Int32Array(64);
  private qDisk = new Int32Array(64);
  /** Per candidate, its live holders at the current block: [any level, device, device+host, -] (rows of 4). */
  private qCount = new Int32Array(64 * 4);
  /** Candidates still walking (those whose disk level has ended are skipped, and dropped on the next settle). */
  private qAlive = new Int32Array(64);
  private qTracked = new Int32Array(64);
  private qAliveN = 0;
  private qLive = 0;
  private qTrackedN = 0;
  /**
   * Kept when qKeepFirst, for eviction judgements: the holder's record of block 0 in query qhFirstQ;
   * the last seed (qhSeedK-th of query qhSeedQ) that found it and where that seed predicted it stops.
   * Between seeds every prediction held, so a holder holds nothing from that stop, or from the next
   * seed that did not find it, to the end of the walk.
   */
  private qhFirst = new Int32Array(16);
  private qhFirstQ = new Int32Array(16);
  private qhSeedQ = new Int32Array(16);
  private qhSeedK = new Int32Array(16);
  private qhSeedEnd = new Int32Array(16);
  private qSeedDepth = new Int32Array(16);
  private qKeepFirst = false;
  private qSeeds = 0;
  private qSharedN = 0;
  // predicted stops: per depth a list of nodes (rows of Q); those before qNodeFloor are from
  // seeds a later seed replaced
  private qBucket = new Int32Array(256);
  private qBucketStamp = new Int32Array(256);
  private qNodes = new Int32Array(256 * Q);
  private qNodeN = 0;
  private qNodeFloor = 0;
  /** Candidate -> its confirmed GPU holder (validated on use, rebuilt by a scan when stale). */
  private gpuHolders = new Map<number, number>();
  private queryId = 0;
  /** Where prefetch loads go (see U64Table.touch). */
  private sink = 0;

  constructor(
    initialBlocks = 1024,
    private readonly onHoldersPurged?: () => void,
  ) {
    const cap = Math.max(16, initialBlocks);
    this.table = new U64Table(T, cap);
    this.rec = new Int32Array(cap * R);
    this.recExp = new Float64Array(cap);
    this.recTouch = new Float64Array(cap);
    this.recClaims = new Int32Array(cap);
    this.recEng = new Int32Array(cap * 2);
  }

  // ---------------------------------------------------------------- holders and ownership

  /**
   * Declare who can read a backend's blocks: an instance id, or null for a shared pool that every
   * instance in the namespace can read. Unbound backends default to the instance of the same id.
   */
  bindBackend(backend: string, instance: string | null): void {
    this.backendOwner.set(backend, instance);
    for (const i of this.liveHolders) {
      const h = this.holders[i];
      if (!h.speculative && h.backend === backend)
        this.hCand[i] = instance === null ? NONE : this.candidate(instance, h.dpRank);
    }
  }

  /** Holder id for a backend's (dp rank, medium) stream, created on first use. */
  holder(backend: string, dpRank: number, medium: Medium): number {
    const key = `b\u0000${backend}\u0000${dpRank}\u0000${medium}`;
    const found = this.holderKeys.get(key);
    if (found !== undefined) return found;
    const owner = this.backendOwner.has(backend) ? this.backendOwner.get(backend)! : backend;
    const cand = owner === null ? NONE : this.candidate(owner, dpRank);
    return this.addHolder(key, backend, dpRank, medium, cand, this.group(`${backend}\u0000${dpRank}`), false, 0);
  }

  /** Holder for router-predicted blocks of an instance (device tier, expiring). One per TTL class. */
  speculativeHolder(instance: string, dpRank: number, ttlMs: number): number {
    const key = specKey(instance, dpRank, ttlMs);
    const found = this.holderKeys.get(key);
    if (found !== undefined) return found;
    const g = this.group(`s\u0000${instance}\u0000${dpRank}`);
    return this.addHolder(
      key,
      `speculative:${instance}`,
      dpRank,
      'GPU',
      this.candidate(instance, dpRank),
      g,
      true,
      ttlMs,
    );
  }

  private addHolder(
    key: string,
    backend: string,
    dpRank: number,
    medium: Medium,
    cand: number,
    group: number,
    speculative: boolean,
    ttlMs: number,
  ): number {
    const reused = this.freeHolderIds.pop();
    const id = reused ?? this.holders.length;
    this.holders[id] = {
      key,
      backend,
      dpRank,
      medium,
      group,
      speculative,
      ttlMs,
      head: NONE,
      tail: NONE,
      count: 0,
      alive: true,
      clock: 0,
      peak: 0,
      evicted: 0,
    };
    this.holderKeys.set(key, id);
    this.liveHolders.add(id);
    if (id >= this.hCand.length) {
      const n = this.hCand.length * 2;
      this.hCand = grow(this.hCand, n);
      this.hBit = grow(this.hBit, n);
      this.hSpec = grow(this.hSpec, n);
      this.hGroup = grow(this.hGroup, n);
      this.hMix0 = grow(this.hMix0, n);
      this.qhFirst = grow(this.qhFirst, n);
      this.qhFirstQ = grow(this.qhFirstQ, n);
      this.qhSeedQ = grow(this.qhSeedQ, n);
      this.qhSeedK = grow(this.qhSeedK, n);
      this.qhSeedEnd = grow(this.qhSeedEnd, n);
    }
    this.hCand[id] = cand;
    this.hBit[id] = TIER_BIT[medium];
    this.hSpec[id] = speculative ? 1 : 0;
    this.hGroup[id] = group;
    this.hMix0[id] = recordMix(id, 0);
    return id;
  }

  private group(key: string): number {
    const found = this.groupKeys.get(key);
    if (found !== undefined) return found;
    const id = this.groups.length;
    this.groups.push({ engineMap: null });
    this.groupKeys.set(key, id);
    return id;
  }

  private candidate(instance: string, dpRank: number): number {
    const found = this.candIds.get(instance, dpRank);
    if (found !== undefined) return found;
    const id = this.cands.length;
    this.cands.push({ instance, dpRank });
    this.candIds.set(instance, dpRank, id);
    if (id >= this.qStamp.length) {
      const n = this.qStamp.length * 2;
      this.qStamp = grow(this.qStamp, n);
      this.qWant = grow(this.qWant, n);
      this.qDev = grow(this.qDev, n);
      this.qHost = grow(this.qHost, n);
      this.qDisk = grow(this.qDisk, n);
      this.qCount = grow(this.qCount, n * 4);
      this.qAlive = grow(this.qAlive, n);
      this.qTracked = grow(this.qTracked, n);
    }
    return id;
  }

  holderInfo(holder: number): HolderInfo {
    const h = this.holders[holder];
    const c = this.hCand[holder];
    return {
      backend: h.backend,
      dpRank: h.dpRank,
      medium: h.medium,
      instance: c === NONE ? null : this.cands[c].instance,
      speculative: h.speculative,
      blocks: h.count,
    };
  }

  /** TTL class of a speculative holder (0 for event-confirmed holders). */
  speculativeTtl(holder: number): number {
    return this.holders[holder]?.ttlMs ?? 0;
  }

  /** Live holder ids (those with at least one block). Holder ids never leave src/indexer. */
  holderIds(): number[] {
    const out: number[] = [];
    for (const i of this.liveHolders) if (this.holders[i].count > 0) out.push(i);
    return out;
  }

  /** Every holder with at least one block, described (for views and checks outside the index). */
  holderInfos(): HolderInfo[] {
    return this.holderIds().map((h) => this.holderInfo(h));
  }

  // ---------------------------------------------------------------- writes

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
    const run = this.openRun(holder, parent);
    const base = this.runLen[run];
    const sv = hashView(seq);
    const ev = engine ? hashView(engine) : sv;
    const cand = this.hCand[holder];
    const confirmed = !h.speculative && cand !== NONE;
    const clock0 = h.clock;
    const n = seq.length;
    let added = 0;
    for (let i = 0; i < seq.length; i++) {
      const lo = sv[2 * i];
      const hi = sv[2 * i + 1];
      const elo = ev[2 * i];
      const ehi = ev[2 * i + 1];
      const slot = this.table.insert(lo, hi);
      const tbl = this.table.data;
      let r = NONE;
      let specSeen = false;
      if (this.table.created) tbl[slot * T + T_HEAD] = NONE;
      else {
        // One walk finds this holder's record and notices speculative records to replace.
        const rec = this.rec;
        for (let x = tbl[slot * T + T_HEAD]; x !== NONE; x = rec[x * R + R_NEXT_E]) {
          const hx = rec[x * R + R_HOLDER];
          if (hx === holder) r = x;
          else if (this.hSpec[hx] === 1) specSeen = true;
        }
      }
      if (r === NONE) {
        r = this.newRecord(slot, lo, hi, holder, elo, ehi, expiresAt, run, base + i);
        added++;
        if (h.speculative) this.recClaims[r] = 1;
      } else {
        if (h.speculative) this.recClaims[r]++;
        this.moveToRun(r, run, base + i);
        if (this.recExp[r] !== expiresAt) {
          tbl[slot * T + T_SIG] ^= recordMix(holder, this.recExp[r]) ^ recordMix(holder, expiresAt);
          this.recExp[r] = expiresAt;
          if (h.speculative) this.moveToTail(h, r); // keep expiry order within the holder
        }
      }
      // An engine frees a sequence's deepest blocks first into its LRU: the shallowest is the newest.
      this.recTouch[r] = clock0 + n - i;
      if (confirmed && specSeen) this.dropSpeculative(slot, cand);
      if (elo !== lo || ehi !== hi) {
        const g = this.groups[h.group];
        if (!g.engineMap) g.engineMap = new U64Table(EM, 1024);
        const s = g.engineMap.insert(elo, ehi);
        g.engineMap.data[s * EM + 3] = lo;
        g.engineMap.data[s * EM + 4] = hi;
      }
    }
    h.clock = clock0 + n;
    this.runLen[run] = base + n;
    return added;
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
      const r = this.findRecord(this.table.data[slot * T + T_HEAD], holder);
      if (r === NONE || --this.recClaims[r] > 0) continue;
      this.freeRecord(r);
      n++;
    }
    return n;
  }

  /** The run a store continues: its parent's, if the parent is the last block of its run; else a new one. */
  private openRun(holder: number, parent: bigint | null): number {
    if (parent !== null) {
      splitScratch[0] = parent;
      const slot = this.table.find(splitView[0], splitView[1]);
      const p = slot === NONE ? NONE : this.findRecord(this.table.data[slot * T + T_HEAD], holder);
      if (p !== NONE && this.rec[p * R + R_POS] === this.runLen[this.rec[p * R + R_RUN]] - 1)
        return this.rec[p * R + R_RUN];
    }
    let id = this.runFree.pop();
    if (id === undefined) {
      id = this.runTop++;
      if (id >= this.runLen.length) {
        this.runLen = grow(this.runLen, this.runLen.length * 2);
        this.runRefs = grow(this.runRefs, this.runRefs.length * 2);
      }
    }
    this.runLen[id] = 0;
    this.runRefs[id] = 0;
    return id;
  }

  /** A stored-again record joins the run of its latest store (which holds it newest-first, too). */
  private moveToRun(r: number, run: number, pos: number): void {
    const rec = this.rec;
    if (rec[r * R + R_RUN] !== run) {
      this.runRefs[run]++;
      this.leaveRun(r);
      rec[r * R + R_RUN] = run;
    }
    rec[r * R + R_POS] = pos;
  }

  private leaveRun(r: number): void {
    const run = this.rec[r * R + R_RUN];
    // A run's last block gone (engines evict the deepest first): the run ends before it.
    if (this.rec[r * R + R_POS] === this.runLen[run] - 1) this.runLen[run]--;
    if (--this.runRefs[run] === 0) this.runFree.push(run);
  }

  /** Remove blocks named by engine hashes (or router hashes for standard publishers). */
  remove(holder: number, engine: BigUint64Array): number {
    const h = this.holders[holder];
    if (!h || !h.alive) return 0;
    const ev = hashView(engine);
    const g = this.groups[h.group];
    let removed = 0;
    for (let i = 0; i < engine.length; i++) {
      this.routerKey(g, ev[2 * i], ev[2 * i + 1]);
      const slot = this.table.find(keyOut[0], keyOut[1]);
      if (slot === NONE) continue;
      const r = this.findRecord(this.table.data[slot * T + T_HEAD], holder);
      if (r === NONE) continue;
      this.freeRecord(r);
      removed++;
    }
    h.evicted += removed;
    return removed;
  }

  // ---------------------------------------------------------------- eviction awareness

  /** The instance's event-confirmed GPU holder (through its backend binding), or NONE. */
  private gpuHolder(instance: string, dpRank: number): number {
    const cand = this.candIds.get(instance, dpRank);
    return cand === undefined ? NONE : this.gpuHolderOf(cand);
  }

  private gpuHolderOf(cand: number): number {
    const known = this.gpuHolders.get(cand);
    if (known !== undefined && this.isGpuHolderOf(known, cand)) return known;
    for (const i of this.liveHolders) {
      if (this.isGpuHolderOf(i, cand)) {
        this.gpuHolders.set(cand, i);
        return i;
      }
    }
    return NONE;
  }

  private isGpuHolderOf(h: number, cand: number): boolean {
    const x = this.holders[h];
    return x !== undefined && x.alive && !x.speculative && x.medium === 'GPU' && this.hCand[h] === cand;
  }

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
    let next = NONE;
    for (let i = 0; i < d; i++) {
      const r = this.recordOn(id, sv, i, next);
      if (r === NONE) continue;
      this.recTouch[r] = h.clock + 0.5 - i / (2 * (d + 1));
      next = this.rec[r * R + R_NEXT_H];
    }
  }

  /**
   * The holder's record of prompt block i, or NONE. `guess` is the record after the holder's
   * previous block on the prompt in its list: blocks stored together are neighbours there, so the
   * guess is mostly right, and a prefix costs O(1) per block instead of a scan of each block's holders.
   */
  private recordOn(id: number, sv: Int32Array, i: number, guess: number): number {
    const rec = this.rec;
    if (guess !== NONE && rec[guess * R + R_LO] === sv[2 * i] && rec[guess * R + R_HI] === sv[2 * i + 1]) return guess;
    const slot = this.table.find(sv[2 * i], sv[2 * i + 1]);
    return slot === NONE ? NONE : this.findRecord(this.table.data[slot * T + T_HEAD], id);
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
  private surviving(
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
    const { rec, recTouch } = this;
    const d = Math.min(depth, end, sv.length >> 1);
    let next = first;
    for (let i = 0; i < d; i++) {
      // The next record in the holder's list is mostly this block's (stored together); else look it up.
      let r = next;
      if (r === NONE || rec[r * R + R_LO] !== sv[2 * i] || rec[r * R + R_HI] !== sv[2 * i + 1]) {
        r = this.recordOn(id, sv, i, NONE);
        if (r === NONE) continue; // held through another holder of the instance: no judgement
      }
      if (all || recTouch[r] <= limit) return i;
      next = rec[r * R + R_NEXT_H];
    }
    return depth;
  }

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
  private routerKey(g: { engineMap: U64Table | null }, lo: number, hi: number): void {
    if (g.engineMap) {
      const s = g.engineMap.find(lo, hi);
      if (s !== NONE) {
        keyOut[0] = g.engineMap.data[s * EM + 3];
        keyOut[1] = g.engineMap.data[s * EM + 4];
        return;
      }
    }
    keyOut[0] = lo;
    keyOut[1] = hi;
  }

  private resolveInGroup(group: number, engineHash: bigint): bigint | null {
    splitScratch[0] = engineHash;
    this.routerKey(this.groups[group], splitView[0], splitView[1]);
    const slot = this.table.find(keyOut[0], keyOut[1]);
    if (slot === NONE || !this.groupHolds(this.table.data[slot * T + T_HEAD], group)) return null;
    return join(keyOut[0], keyOut[1]);
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
  private purgeHolders(pred: (h: Holder, id: number) => boolean): number {
    let n = 0;
    for (const i of [...this.liveHolders]) {
      const h = this.holders[i];
      if (!pred(h, i)) continue;
      n += this.clearHolder(i);
      h.alive = false;
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
    let n = 0;
    for (const i of this.liveHolders) {
      const h = this.holders[i];
      if (!h.speculative) continue;
      while (h.head !== NONE && this.recExp[h.head] <= now) {
        this.freeRecord(h.head);
        n++;
      }
    }
    return n;
  }

  // ---------------------------------------------------------------- reads

  /**
   * Walk the prompt's seq hashes and report, per (instance, dp rank), the longest contiguous prefix
   * on the device tier, on device+host, and on any own tier; plus the shared pool's prefix.
   * Speculative records count as device blocks until they expire.
   */
  query(seq: BigUint64Array, now: number, limitInstances?: ReadonlySet<string>): OverlapResult {
    this.qKeepFirst = false;
    const shared = this.walk(seq, now, this.nextQueryId(), limitInstances, false);
    return { queriedBlocks: seq.length, candidates: this.collect(), sharedBlocks: shared };
  }

  /**
   * The same walk for a list of candidates (the scheduler's): their prefixes in the list's order,
   * 0 for a candidate that holds none of the prompt, and no result object per candidate. With
   * `allocations` (blocks the prefill queued on each candidate will allocate; 0 for none),
   * `surviving` is survivingPrefix() of each device prefix, starting from the records the walk read.
   */
  overlapsFor(
    seq: BigUint64Array,
    now: number,
    candidates: ReadonlyArray<{ instance: string; dpRank: number }>,
    allocations?: ArrayLike<number>,
  ): CandidateOverlaps {
    const qid = this.nextQueryId();
    const k = candidates.length;
    const ids = this.candidateIds(candidates);
    for (let j = 0; j < k; j++) if (ids[j] !== NONE) this.qWant[ids[j]] = qid;
    this.qKeepFirst = allocations !== undefined;
    const shared = this.walk(seq, now, qid, undefined, true);
    const device = new Int32Array(k);
    const host = new Int32Array(k);
    const disk = new Int32Array(k);
    const { qStamp, qDev, qHost, qDisk } = this;
    for (let j = 0; j < k; j++) {
      const id = ids[j];
      if (id === NONE || qStamp[id] !== qid) continue;
      device[j] = qDev[id];
      host[j] = qHost[id];
      disk[j] = qDisk[id];
    }
    let surviving = device;
    if (allocations) {
      surviving = device.slice();
      const sv = hashView(seq);
      for (let j = 0; j < k; j++) {
        if (device[j] === 0 || !(allocations[j] > 0)) continue;
        const h = this.gpuHolderOf(ids[j]);
        if (h === NONE) continue;
        surviving[j] = this.surviving(
          h,
          sv,
          device[j],
          allocations[j],
          this.qhFirstQ[h] === qid ? this.qhFirst[h] : NONE,
          this.heldUntil(h, qid, seq.length),
        );
      }
    }
    return { device, host, disk, surviving, shared };
  }

  /** After a walk that kept seeds (qKeepFirst): the holder holds no block of the prompt from here to the walk's end. */
  private heldUntil(h: number, qid: number, n: number): number {
    if (this.qhSeedQ[h] !== qid) return n;
    const k = this.qhSeedK[h];
    const end = this.qhSeedEnd[h];
    return k === this.qSeeds - 1 ? end : Math.min(end, this.qSeedDepth[k + 1]);
  }

  private candidateIds(candidates: ReadonlyArray<{ instance: string; dpRank: number }>): Int32Array {
    const k = candidates.length;
    const last = this.lastList;
    let same = k === last.length && this.lastListCands === this.cands.length;
    for (let j = 0; same && j < k; j++)
      same = candidates[j].instance === last[j].instance && candidates[j].dpRank === last[j].dpRank;
    if (same) return this.lastIds;
    const ids = new Int32Array(k);
    for (let j = 0; j < k; j++) ids[j] = this.candIds.get(candidates[j].instance, candidates[j].dpRank) ?? NONE;
    this.lastList = candidates.map((c) => ({ instance: c.instance, dpRank: c.dpRank }));
    this.lastIds = ids;
    this.lastListCands = this.cands.length;
    return ids;
  }

  private nextQueryId(): number {
    if (++this.queryId > QUERY_ID_LIMIT) {
      this.queryId = 1;
      this.qStamp.fill(0);
      this.qWant.fill(0);
      this.qBucketStamp.fill(0);
      this.qhFirstQ.fill(0);
      this.qhSeedQ.fill(0);
    }
    return this.queryId;
  }

  /**
   * The tier walk. Cost: one probe per block walked, plus the records of the blocks where the holder
   * set is not the one predicted, plus O(1) per holder that stops.
   *
   * A holder's blocks are mostly the chains it stored, so each record read predicts the depth at
   * which its holder stops: the end of its run (see `runs` above). Holders are bucketed by that
   * depth; at each block those due leave the prediction, and the XOR of the predicted holders' record
   * mixes must equal the row's signature (an XOR over the block's records, expiries included). If
   * it does, the holder set is the predicted one: the same trust the signature already had when the
   * walk skipped a block whose signature equalled the previous block's (false agreement ~2^-31).
   * If it does not (a chain stored in pieces, a branch, a newcomer), the block's records are read
   * and predict afresh. Per candidate, counts of live holders per level say when a level ends.
   */
  private walk(
    seq: BigUint64Array,
    now: number,
    qid: number,
    limit: ReadonlySet<string> | undefined,
    stamped: boolean,
  ): number {
    const sv = hashView(seq);
    const n = seq.length;
    this.qTrackedN = 0;
    this.qAliveN = 0;
    this.qLive = 0;
    this.qSeeds = 0;
    this.qNodeN = 0;
    if (n === 0) return 0;
    if (this.qBucket.length <= n) {
      let m = this.qBucket.length;
      while (m <= n) m *= 2;
      this.qBucket = new Int32Array(m);
      this.qBucketStamp = new Int32Array(m);
    }
    const { table, qBucket, qBucketStamp, qDev, qHost, qDisk, qCount } = this;
    const tbl = table.data;
    this.sink ^= table.touch(sv, 0, Math.min(n, TOUCH_WINDOW));
    let slot = table.find(sv[0], sv[1]);
    if (slot === NONE) return 0;
    this.seedBlock(slot, 0, n, now, qid, limit, stamped);
    this.settleAll(0);
    // Nodes grow while seeding: read them again after each seedBlock.
    let nodes = this.qNodes;
    let predicted = tbl[slot * T + T_SIG];
    let sharedAlive = this.qSharedN > 0;
    let shared = 0;
    if (this.qLive === 0 && !sharedAlive) return 0;
    let i = 1;
    for (; i < n; i++) {
      // Window by window, pull the next blocks' rows into cache ahead of the walk (one cache miss
      // per block otherwise bounds a long query); a walk that stops early wastes at most a window.
      if ((i & (TOUCH_WINDOW - 1)) === 0) this.sink ^= table.touch(sv, i, Math.min(n, i + TOUCH_WINDOW));
      slot = table.find(sv[2 * i], sv[2 * i + 1]);
      if (slot === NONE) break;
      const sig = tbl[slot * T + T_SIG];
      if (qBucketStamp[i] !== qid) {
        // Nobody due to stop and the holder set as predicted: every live level extends.
        if (sig === predicted) continue;
      } else {
        // Holders due to stop here (a node of an earlier seed is void): without them, is the
        // holder set the predicted one?
        const floor = this.qNodeFloor;
        let gone = 0;
        for (let k = qBucket[i]; k !== NONE; k = nodes[k * Q + 3]) if (k >= floor) gone ^= nodes[k * Q];
        predicted ^= gone;
        if (sig === predicted) {
          // It is: they stop here, and so do the levels left without a holder.
          for (let k = qBucket[i]; k !== NONE; k = nodes[k * Q + 3]) {
            if (k < floor) continue;
            const c = nodes[k * Q + 1];
            if (c === SHARED) this.qSharedN--;
            if (c < 0 || qDisk[c] !== EXT) continue;
            const b = nodes[k * Q + 2];
            if (--qCount[4 * c] === 0) {
              if (qDev[c] === EXT) qDev[c] = i;
              if (qHost[c] === EXT) qHost[c] = i;
              qDisk[c] = i;
              this.qLive--;
              continue;
            }
            if (b & GPU && --qCount[4 * c + 1] === 0 && qDev[c] === EXT) qDev[c] = i;
            if (b & GPU_CPU && --qCount[4 * c + 2] === 0 && qHost[c] === EXT) qHost[c] = i;
          }
          if (sharedAlive && this.qSharedN === 0) {
            shared = i;
            sharedAlive = false;
          }
          if (this.qLive === 0 && !sharedAlive) return shared;
          continue;
        }
      }
      // Not the holder set predicted (a chain stored in pieces, a branch, a newcomer): read this
      // block's records and predict afresh from them.
      this.seedBlock(slot, i, n, now, qid, undefined, false);
      nodes = this.qNodes;
      predicted = sig;
      this.settleAll(i);
      if (sharedAlive && this.qSharedN === 0) {
        shared = i;
        sharedAlive = false;
      }
      if (this.qLive === 0 && !sharedAlive) return shared;
    }
    // Every level still open reaches the last block walked.
    const qAlive = this.qAlive;
    for (let k = 0; k < this.qAliveN; k++) {
      const c = qAlive[k];
      if (qDisk[c] !== EXT) continue;
      if (qDev[c] === EXT) qDev[c] = i;
      if (qHost[c] === EXT) qHost[c] = i;
      qDisk[c] = i;
    }
    return sharedAlive ? i : shared;
  }

  /**
   * Read block i's records: every holder on it is predicted from here (its record's mix, the end of
   * its run, what it means for the answer); counts restart from these holders. At block 0 this is
   * where candidates start being tracked (those `limit` or the stamps admit).
   */
  private seedBlock(
    slot: number,
    i: number,
    n: number,
    now: number,
    qid: number,
    limit: ReadonlySet<string> | undefined,
    stamped: boolean,
  ): void {
    const { rec, qCount, qAlive } = this;
    for (let k = 0; k < this.qAliveN; k++) {
      const o = 4 * qAlive[k];
      qCount[o] = 0;
      qCount[o + 1] = 0;
      qCount[o + 2] = 0;
    }
    // Seeds from before this block no longer stand: their nodes are ignored.
    this.qNodeFloor = this.qNodeN;
    const seedK = this.qSeeds++;
    const keep = this.qKeepFirst;
    if (keep) {
      if (seedK === this.qSeedDepth.length) this.qSeedDepth = grow(this.qSeedDepth, seedK * 2);
      this.qSeedDepth[seedK] = i;
    }
    const { recExp, runLen, hCand, hBit, hSpec, hMix0, qStamp, qWant, qDev, qHost, qDisk, qBucket, qBucketStamp } =
      this;
    let nodes = this.qNodes;
    let k = this.qNodeN;
    let shared = 0;
    for (let r = this.table.data[slot * T + T_HEAD]; r !== NONE; r = rec[r * R + R_NEXT_E]) {
      const h = rec[r * R + R_HOLDER];
      const spec = hSpec[h] === 1;
      const exp = spec ? recExp[r] : 0;
      const b = hBit[h];
      // Who the holder counts for: a tracked candidate's level, the shared pool, or nobody.
      const c = hCand[h];
      let who = NONE;
      if (c === NONE) {
        who = SHARED;
        shared++;
      } else if (!spec || exp > now) {
        if (qStamp[c] === qid) {
          if (qDisk[c] === EXT) who = c;
        } else if (i === 0 && (stamped ? qWant[c] === qid : limit === undefined || limit.has(this.cands[c].instance))) {
          // First seen: tracked from here, its levels open.
          qStamp[c] = qid;
          qDev[c] = EXT;
          qHost[c] = EXT;
          qDisk[c] = EXT;
          qCount[4 * c] = 0;
          qCount[4 * c + 1] = 0;
          qCount[4 * c + 2] = 0;
          qAlive[this.qAliveN++] = c;
          this.qTracked[this.qTrackedN++] = c;
          this.qLive++;
          who = c;
        }
        if (who >= 0) {
          qCount[4 * c]++;
          if (b & GPU) qCount[4 * c + 1]++;
          if (b & GPU_CPU) qCount[4 * c + 2]++;
        }
      }
      // Where it is predicted to stop: the end of its run. A node goes into that depth's list.
      const end = i + Math.max(1, runLen[rec[r * R + R_RUN]] - rec[r * R + R_POS]);
      if (keep) {
        if (i === 0) {
          this.qhFirst[h] = r;
          this.qhFirstQ[h] = qid;
        }
        this.qhSeedQ[h] = qid;
        this.qhSeedK[h] = seedK;
        this.qhSeedEnd[h] = end;
      }
      if (end >= n) continue;
      if ((k + 1) * Q > nodes.length) this.qNodes = nodes = grow(nodes, nodes.length * 2);
      nodes[k * Q] = spec ? recordMix(h, exp) : hMix0[h];
      nodes[k * Q + 1] = who;
      nodes[k * Q + 2] = b;
      if (qBucketStamp[end] !== qid) {
        qBucketStamp[end] = qid;
        nodes[k * Q + 3] = NONE;
      } else nodes[k * Q + 3] = qBucket[end];
      qBucket[end] = k++;
    }
    this.qNodeN = k;
    this.qSharedN = shared;
  }

  /** After a seed: end the levels without a live holder at block i; drop candidates with none (and compact the list). */
  private settleAll(i: number): void {
    const { qAlive, qDev, qHost, qDisk, qCount } = this;
    let kept = 0;
    for (let k = 0; k < this.qAliveN; k++) {
      const c = qAlive[k];
      if (qDisk[c] !== EXT) continue;
      if (qCount[4 * c] === 0) {
        if (qDev[c] === EXT) qDev[c] = i;
        if (qHost[c] === EXT) qHost[c] = i;
        qDisk[c] = i;
        continue;
      }
      if (qCount[4 * c + 1] === 0 && qDev[c] === EXT) qDev[c] = i;
      if (qCount[4 * c + 2] === 0 && qHost[c] === EXT) qHost[c] = i;
      qAlive[kept++] = c;
    }
    this.qAliveN = kept;
    this.qLive = kept;
  }

  // Kept out of query(): V8 deopts a hot loop whose exit path has no type feedback yet.
  private collect(): CandidateOverlap[] {
    const out: CandidateOverlap[] = [];
    for (let k = 0; k < this.qTrackedN; k++) {
      const c = this.qTracked[k];
      const cand = this.cands[c];
      out.push({
        instance: cand.instance,
        dpRank: cand.dpRank,
        device: this.qDev[c],
        host: this.qHost[c],
        disk: this.qDisk[c],
      });
    }
    return out;
  }

  /** Blocks held by a holder, in insertion order (for /dump and peer recovery). */
  holderBlocks(holder: number): DumpedBlock[] {
    const h = this.holders[holder];
    const out: DumpedBlock[] = [];
    if (!h) return out;
    const rec = this.rec;
    for (let r = h.head; r !== NONE; r = rec[r * R + R_NEXT_H]) {
      const o = r * R;
      const eng = this.recEng;
      const same = eng[2 * r] === rec[o + R_LO] && eng[2 * r + 1] === rec[o + R_HI];
      out.push({
        hash: join(rec[o + R_LO], rec[o + R_HI]),
        engineHash: same ? null : join(eng[2 * r], eng[2 * r + 1]),
        expiresAt: this.recExp[r],
      });
    }
    return out;
  }

  stats(): IndexStats {
    const bytes =
      this.table.byteLength +
      this.rec.byteLength +
      this.recExp.byteLength +
      this.recTouch.byteLength +
      this.recEng.byteLength +
      this.runLen.byteLength +
      this.runRefs.byteLength +
      this.groups.reduce((s, g) => s + (g.engineMap ? g.engineMap.byteLength : 0), 0);
    return {
      blocks: this.table.size,
      records: this.liveRecords,
      holders: this.holderIds().length,
      bytes,
    };
  }

  // ---------------------------------------------------------------- internals

  private findRecord(head: number, holder: number): number {
    const rec = this.rec;
    for (let r = head; r !== NONE; r = rec[r * R + R_NEXT_E]) if (rec[r * R + R_HOLDER] === holder) return r;
    return NONE;
  }

  private groupHolds(head: number, group: number): boolean {
    const rec = this.rec;
    for (let r = head; r !== NONE; r = rec[r * R + R_NEXT_E])
      if (this.hGroup[rec[r * R + R_HOLDER]] === group) return true;
    return false;
  }

  private dropSpeculative(slot: number, cand: number): void {
    const rec = this.rec;
    for (let r = this.table.data[slot * T + T_HEAD]; r !== NONE; ) {
      const next = rec[r * R + R_NEXT_E];
      const h = rec[r * R + R_HOLDER];
      if (this.hSpec[h] === 1 && this.hCand[h] === cand) this.freeRecord(r);
      r = next;
    }
  }

  private newRecord(
    slot: number,
    lo: number,
    hi: number,
    holder: number,
    elo: number,
    ehi: number,
    expiresAt: number,
    run: number,
    pos: number,
  ): number {
    let r = this.recFree;
    if (r !== NONE) this.recFree = this.rec[r * R + R_NEXT_E];
    else {
      r = this.recTop++;
      if (r * R >= this.rec.length) {
        this.rec = grow(this.rec, this.rec.length * 2);
        this.recExp = grow(this.recExp, this.recExp.length * 2);
        this.recTouch = grow(this.recTouch, this.recTouch.length * 2);
        this.recClaims = grow(this.recClaims, this.recClaims.length * 2);
        this.recEng = grow(this.recEng, this.recEng.length * 2);
      }
    }
    this.runRefs[run]++;
    const rec = this.rec;
    const o = r * R;
    const tbl = this.table.data;
    rec[o + R_LO] = lo;
    rec[o + R_HI] = hi;
    rec[o + R_HOLDER] = holder;
    rec[o + R_NEXT_E] = tbl[slot * T + T_HEAD];
    tbl[slot * T + T_HEAD] = r;
    tbl[slot * T + T_SIG] ^= recordMix(holder, expiresAt);
    this.recExp[r] = expiresAt;
    rec[o + R_RUN] = run;
    rec[o + R_POS] = pos;
    this.recEng[2 * r] = elo;
    this.recEng[2 * r + 1] = ehi;
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

  private unlinkFromHolder(h: Holder, r: number): void {
    const rec = this.rec;
    const prev = rec[r * R + R_PREV_H];
    const next = rec[r * R + R_NEXT_H];
    if (prev !== NONE) rec[prev * R + R_NEXT_H] = next;
    else h.head = next;
    if (next !== NONE) rec[next * R + R_PREV_H] = prev;
    else h.tail = prev;
  }

  private moveToTail(h: Holder, r: number): void {
    if (h.tail === r) return;
    this.unlinkFromHolder(h, r);
    const rec = this.rec;
    rec[r * R + R_PREV_H] = h.tail;
    rec[r * R + R_NEXT_H] = NONE;
    if (h.tail !== NONE) rec[h.tail * R + R_NEXT_H] = r;
    else h.head = r;
    h.tail = r;
  }

  private freeRecord(r: number): void {
    const rec = this.rec;
    const o = r * R;
    const lo = rec[o + R_LO];
    const hi = rec[o + R_HI];
    const holder = rec[o + R_HOLDER];
    const h = this.holders[holder];
    const slot = this.table.find(lo, hi);
    const tbl = this.table.data;
    const headAt = slot * T + T_HEAD;
    // unlink from the entry's singly linked list
    if (tbl[headAt] === r) tbl[headAt] = rec[o + R_NEXT_E];
    else {
      let p = tbl[headAt];
      while (rec[p * R + R_NEXT_E] !== r) p = rec[p * R + R_NEXT_E];
      rec[p * R + R_NEXT_E] = rec[o + R_NEXT_E];
    }
    tbl[slot * T + T_SIG] ^= recordMix(holder, this.recExp[r]);
    this.unlinkFromHolder(h, r);
    this.leaveRun(r);
    h.count--;
    this.liveRecords--;
    // Forget the engine hash once no medium of this group holds the block any more.
    const emptied = tbl[headAt] === NONE;
    const em = this.groups[h.group].engineMap;
    if (em) {
      const elo = this.recEng[2 * r];
      const ehi = this.recEng[2 * r + 1];
      if ((elo !== lo || ehi !== hi) && (emptied || !this.groupHolds(tbl[headAt], h.group))) {
        const s = em.find(elo, ehi);
        if (s !== NONE && em.data[s * EM + 3] === lo && em.data[s * EM + 4] === hi) em.removeSlot(s);
      }
    }
    rec[o + R_NEXT_E] = this.recFree;
    this.recFree = r;
    if (emptied) this.table.removeSlot(slot);
  }
}

function grow<T extends Int32Array | Uint8Array | Float64Array>(a: T, n: number): T {
  const b = new (a.constructor as new (n: number) => T)(n);
  b.set(a);
  return b;
}
