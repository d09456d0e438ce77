// One namespace of the tiered index: seq hash -> holders (backend, dp rank, medium), with a
// cumulative per-(instance, dp rank) tier walk for queries. Pure data structure: no timers, no I/O;
// callers pass `now` (ms) for speculative entries.
//
// Layout, chosen so a query touches about one cache line per block plus its records:
//   table   U64Table rows [hashLo, hashHi, used, headRecord]: seq hash -> first record
//   records Int32Array rows of 8: [hashLo, hashHi, holder, nextInEntry, prevInHolder, nextInHolder,
//           engineLo, engineHi] + Float64Array expiry (speculative records only) + Float64Array
//           touch (the holder's allocation clock when the block was last stored or routed to)
//           + Int32Array claims (speculative records only: the bookings' inserts that claim it)
//   holders (backend, dp rank, medium, owner) with a doubly linked list of their records, so a
//           `cleared` event or an unregister purges in O(records of that holder)
//   groups  (backend, dp rank): scope of engine-native hashes (dual key): engine hash -> seq hash
import { U64Table } from './u64-table.js';
import { type Medium, TIER_BIT } from './tiers.js';

const NONE = -1;
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
const R_ENG_LO = 6;
const R_ENG_HI = 7;
// table row: [lo, hi, sig, head]. sig doubles as the U64Table `used` word: an odd XOR of the
// entry's holder mixes, so two blocks with the same holder set (the long runs a shared prefix
// makes) compare equal and the query skips their record scan.
const T = 4;
const TOUCH_WINDOW = 64;
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
const specKey = (instance: string, dpRank: number, ttlMs: number): string => `s\u0000${instance}\u0000${dpRank}\u0000${ttlMs}`;
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
  private groups: Array<{ engineMap: U64Table | null }> = [];
  private groupKeys = new Map<string, number>();
  private cands: Candidate[] = [];
  private candKeys = new Map<string, number>();
  private backendOwner = new Map<string, string | null>();
  // query scratch, indexed by candidate id
  private qStamp = new Int32Array(64);
  private qMaskDepth = new Int32Array(64);
  private qMask = new Int32Array(64);
  private qDev = new Int32Array(64);
  private qHost = new Int32Array(64);
  private qDisk = new Int32Array(64);
  private qAlive = new Int32Array(64);
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
      if (!h.speculative && h.backend === backend) this.hCand[i] = instance === null ? NONE : this.candidate(instance, h.dpRank);
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
    return this.addHolder(key, `speculative:${instance}`, dpRank, 'GPU', this.candidate(instance, dpRank), g, true, ttlMs);
  }

  private addHolder(key: string, backend: string, dpRank: number, medium: Medium, cand: number, group: number, speculative: boolean, ttlMs: number): number {
    const reused = this.freeHolderIds.pop();
    const id = reused ?? this.holders.length;
    this.holders[id] = { key, backend, dpRank, medium, group, speculative, ttlMs, head: NONE, tail: NONE, count: 0, alive: true, clock: 0, peak: 0, evicted: 0 };
    this.holderKeys.set(key, id);
    this.liveHolders.add(id);
    if (id >= this.hCand.length) {
      const n = this.hCand.length * 2;
      this.hCand = grow(this.hCand, n);
      this.hBit = grow(this.hBit, n);
      this.hSpec = grow(this.hSpec, n);
      this.hGroup = grow(this.hGroup, n);
    }
    this.hCand[id] = cand;
    this.hBit[id] = TIER_BIT[medium];
    this.hSpec[id] = speculative ? 1 : 0;
    this.hGroup[id] = group;
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
    const key = `${instance}\u0000${dpRank}`;
    const found = this.candKeys.get(key);
    if (found !== undefined) return found;
    const id = this.cands.length;
    this.cands.push({ instance, dpRank });
    this.candKeys.set(key, id);
    if (id >= this.qStamp.length) {
      const n = this.qStamp.length * 2;
      this.qStamp = grow(this.qStamp, n);
      this.qMaskDepth = grow(this.qMaskDepth, n);
      this.qMask = grow(this.qMask, n);
      this.qDev = grow(this.qDev, n);
      this.qHost = grow(this.qHost, n);
      this.qDisk = grow(this.qDisk, n);
      this.qAlive = grow(this.qAlive, n);
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
   * `expiresAt` > 0 marks speculative entries; each store of one counts as a claim on its records
   * (`withdrawSpeculative`). Returns the number of newly added (block, holder) pairs.
   */
  store(holder: number, seq: BigUint64Array, engine: BigUint64Array | null = null, expiresAt = 0): number {
    const h = this.holders[holder];
    if (!h || !h.alive) throw new RangeError(`unknown holder ${holder}`);
    if (engine && engine.length !== seq.length) throw new RangeError('engine hashes and seq hashes differ in length');
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
        r = this.newRecord(slot, lo, hi, holder, elo, ehi, expiresAt);
        added++;
        if (h.speculative) this.recClaims[r] = 1;
      } else {
        if (h.speculative) this.recClaims[r]++;
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
  withdrawSpeculative(instance: string, dpRank: number, seq: BigUint64Array, ins: SpeculativeInsert, now: number): number {
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

  /** The instance's event-confirmed GPU holder (through its backend binding), or null. */
  private gpuHolder(instance: string, dpRank: number): number {
    const cand = this.candKeys.get(`${instance}\u0000${dpRank}`);
    if (cand === undefined) return NONE;
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
    for (let i = 0; i < d; i++) {
      const slot = this.table.find(sv[2 * i], sv[2 * i + 1]);
      if (slot === NONE) continue;
      const r = this.findRecord(this.table.data[slot * T + T_HEAD], id);
      if (r !== NONE) this.recTouch[r] = h.clock + 0.5 - i / (2 * (d + 1));
    }
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
    const id = this.gpuHolder(instance, dpRank);
    const h = id === NONE ? null : this.holders[id];
    if (!h || h.evicted === 0 || depth <= 0) return depth;
    const need = allocations - (h.peak - h.count);
    if (need <= 0) return depth;
    const sv = hashView(seq);
    const d = Math.min(depth, seq.length);
    for (let i = 0; i < d; i++) {
      const slot = this.table.find(sv[2 * i], sv[2 * i + 1]);
      const r = slot === NONE ? NONE : this.findRecord(this.table.data[slot * T + T_HEAD], id);
      if (r === NONE) continue; // held through another holder of the instance: no judgement
      // Strictly older blocks go first; this one goes once `need` exceeds them.
      const newer = Math.max(0, Math.floor(h.clock - this.recTouch[r]));
      if (h.count - 1 - newer < need) return i;
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
    return this.purgeHolders((h) => !h.speculative && h.backend === backend && (dpRank === undefined || h.dpRank === dpRank));
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
    const sv = hashView(seq);
    const n = seq.length;
    const qid = ++this.queryId;
    const { qStamp, qMaskDepth, qMask, qDev, qHost, qDisk, qAlive, rec, recExp, hCand, hBit, hSpec, cands, table } = this;
    const tbl = table.data;
    // Levels still extending are marked EXT; a level's depth is fixed when it stops.
    const EXT = -1;
    let alive = 0;
    const touched: number[] = [];
    let shared = 0;
    let sharedAlive = true;
    let sharedHere = false;
    let prevSig = 0; // signatures are odd, so block 0 always gets a full scan
    let done = 0; // blocks walked
    for (let i = 0; i < n; i++) {
      // Window by window, pull the next blocks' rows into cache ahead of the walk (one cache miss
      // per block otherwise bounds a long query); a walk that stops early wastes at most a window.
      if ((i & (TOUCH_WINDOW - 1)) === 0) this.sink ^= table.touch(sv, i, Math.min(n, i + TOUCH_WINDOW));
      const slot = table.find(sv[2 * i], sv[2 * i + 1]);
      if (slot === NONE) break;
      const sig = tbl[slot * T + T_SIG];
      // Same holder set as the block before: every live level extends, nothing to scan.
      if (sig === prevSig) {
        if (sharedAlive) shared = i + 1;
        done = i + 1;
        continue;
      }
      prevSig = sig;
      sharedHere = false;
      for (let r = tbl[slot * T + T_HEAD]; r !== NONE; r = rec[r * R + R_NEXT_E]) {
        const h = rec[r * R + R_HOLDER];
        const c = hCand[h];
        if (c === NONE) {
          sharedHere = true;
          continue;
        }
        if (hSpec[h] === 1 && recExp[r] <= now) continue;
        if (qStamp[c] !== qid) {
          if (i !== 0 || (limitInstances && !limitInstances.has(cands[c].instance))) continue;
          qStamp[c] = qid;
          qDev[c] = EXT;
          qHost[c] = EXT;
          qDisk[c] = EXT;
          qMaskDepth[c] = -1;
          qAlive[alive++] = c;
          touched.push(c);
        } else if (qDisk[c] !== EXT) continue; // dropped at an earlier depth
        if (qMaskDepth[c] !== i) {
          qMaskDepth[c] = i;
          qMask[c] = hBit[h];
        } else qMask[c] |= hBit[h];
      }
      if (sharedAlive && sharedHere) shared = i + 1;
      else sharedAlive = false;
      // Stop the levels this block ends; drop candidates that do not hold it at all.
      for (let k = 0; k < alive; ) {
        const c = qAlive[k];
        if (qMaskDepth[c] !== i) {
          if (qDev[c] === EXT) qDev[c] = i;
          if (qHost[c] === EXT) qHost[c] = i;
          qDisk[c] = i;
          qAlive[k] = qAlive[--alive];
          continue;
        }
        const m = qMask[c];
        if (!(m & GPU) && qDev[c] === EXT) qDev[c] = i;
        if (!(m & GPU_CPU) && qHost[c] === EXT) qHost[c] = i;
        k++;
      }
      done = i + 1;
      if (alive === 0 && !sharedAlive) break;
    }
    for (let k = 0; k < alive; k++) {
      const c = qAlive[k];
      if (qDev[c] === EXT) qDev[c] = done;
      if (qHost[c] === EXT) qHost[c] = done;
      if (qDisk[c] === EXT) qDisk[c] = done;
    }
    return { queriedBlocks: n, candidates: this.collect(touched), sharedBlocks: shared };
  }

  // Kept out of query(): V8 deopts a hot loop whose exit path has no type feedback yet.
  private collect(touched: number[]): CandidateOverlap[] {
    const out: CandidateOverlap[] = [];
    for (let k = 0; k < touched.length; k++) {
      const c = touched[k];
      const cand = this.cands[c];
      out.push({ instance: cand.instance, dpRank: cand.dpRank, device: this.qDev[c], host: this.qHost[c], disk: this.qDisk[c] });
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
      const same = rec[o + R_ENG_LO] === rec[o + R_LO] && rec[o + R_ENG_HI] === rec[o + R_HI];
      out.push({
        hash: join(rec[o + R_LO], rec[o + R_HI]),
        engineHash: same ? null : join(rec[o + R_ENG_LO], rec[o + R_ENG_HI]),
        expiresAt: this.recExp[r],
      });
    }
    return out;
  }

  stats(): IndexStats {
    const bytes =
      this.table.byteLength + this.rec.byteLength + this.recExp.byteLength + this.groups.reduce((s, g) => s + (g.engineMap ? g.engineMap.byteLength : 0), 0);
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
    for (let r = head; r !== NONE; r = rec[r * R + R_NEXT_E]) if (this.hGroup[rec[r * R + R_HOLDER]] === group) return true;
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

  private newRecord(slot: number, lo: number, hi: number, holder: number, elo: number, ehi: number, expiresAt: number): number {
    let r = this.recFree;
    if (r !== NONE) this.recFree = this.rec[r * R + R_NEXT_E];
    else {
      r = this.recTop++;
      if (r * R >= this.rec.length) {
        this.rec = grow(this.rec, this.rec.length * 2);
        this.recExp = grow(this.recExp, this.recExp.length * 2);
        this.recTouch = grow(this.recTouch, this.recTouch.length * 2);
        this.recClaims = grow(this.recClaims, this.recClaims.length * 2);
      }
    }
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
    rec[o + R_ENG_LO] = elo;
    rec[o + R_ENG_HI] = ehi;
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
    h.count--;
    this.liveRecords--;
    // Forget the engine hash once no medium of this group holds the block any more.
    const elo = rec[o + R_ENG_LO];
    const ehi = rec[o + R_ENG_HI];
    const emptied = tbl[headAt] === NONE;
    if ((elo !== lo || ehi !== hi) && (emptied || !this.groupHolds(tbl[headAt], h.group))) {
      const em = this.groups[h.group].engineMap;
      if (em) {
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
