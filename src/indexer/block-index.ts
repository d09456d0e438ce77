// One namespace of the tiered index: seq hash -> holders (backend, dp rank, medium), with a
// cumulative per-(instance, dp rank) tier walk for queries. Pure data structure: no timers, no I/O;
// callers pass `now` (ms) for speculative entries.
//
// Layout (typed arrays, grown by doubling, free lists for reuse):
//   table:   u64 seq hash -> entry id                         (U64Map)
//   entry:   head record, router hash lo/hi
//   record:  one (entry, holder) pair: entry, holder, next-in-entry, prev/next-in-holder, expiry
//   holder:  (backend, dp rank, medium, owner) with a doubly linked list of its records, so a
//            `cleared` event or an unregister purges in O(records of that holder)
//   group:   (backend, dp rank): the scope of engine-native hashes (dual key) -> entry id
import { U64Map } from './u64-map.js';
import { type Medium, TIER_BIT } from './tiers.js';

const NONE = -1;
const GPU = TIER_BIT.GPU;
const GPU_CPU = TIER_BIT.GPU | TIER_BIT.CPU;

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

export interface IndexStats {
  blocks: number;
  records: number;
  holders: number;
  bytes: number;
}

interface Holder {
  backend: string;
  dpRank: number;
  medium: Medium;
  tierBit: number;
  cand: number; // candidate id, NONE for the shared pool
  group: number;
  speculative: boolean;
  ttlMs: number;
  head: number;
  tail: number;
  count: number;
  alive: boolean;
}

interface Candidate {
  instance: string;
  dpRank: number;
}

const hashView = (a: BigUint64Array): Uint32Array => new Uint32Array(a.buffer, a.byteOffset, a.length * 2);
const splitScratch = new BigUint64Array(1);
const splitView = new Uint32Array(splitScratch.buffer);
function split(h: bigint): [number, number] {
  splitScratch[0] = h;
  return [splitView[0], splitView[1]];
}
function join(lo: number, hi: number): bigint {
  splitView[0] = lo;
  splitView[1] = hi;
  return splitScratch[0];
}

export class BlockIndex {
  private table: U64Map;
  // entries
  private entHead: Int32Array;
  private entLo: Uint32Array;
  private entHi: Uint32Array;
  private entFree: number[] = [];
  private entCount = 0; // high-water mark
  // records
  private recEntry: Int32Array;
  private recHolder: Int32Array;
  private recNextE: Int32Array;
  private recPrevH: Int32Array;
  private recNextH: Int32Array;
  private recExpiry: Float64Array;
  private recFree = NONE;
  private recCount = 0; // high-water mark
  private liveRecords = 0;
  // holders, groups, candidates
  private holders: Holder[] = [];
  private holderKeys = new Map<string, number>();
  private groups: Array<{ key: string; engineMap: U64Map | null; alive: boolean }> = [];
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
  private qAlive: number[] = [];
  private queryId = 0;

  constructor(initialBlocks = 1024) {
    const cap = Math.max(16, initialBlocks);
    this.table = new U64Map(cap);
    this.entHead = new Int32Array(cap).fill(NONE);
    this.entLo = new Uint32Array(cap);
    this.entHi = new Uint32Array(cap);
    this.recEntry = new Int32Array(cap);
    this.recHolder = new Int32Array(cap);
    this.recNextE = new Int32Array(cap);
    this.recPrevH = new Int32Array(cap);
    this.recNextH = new Int32Array(cap);
    this.recExpiry = new Float64Array(cap);
  }

  // ---------------------------------------------------------------- holders and ownership

  /**
   * Declare who can read a backend's blocks: an instance id, or null for a shared pool that every
   * instance in the namespace can read. Unbound backends default to the instance of the same id.
   */
  bindBackend(backend: string, instance: string | null): void {
    this.backendOwner.set(backend, instance);
    for (const h of this.holders) {
      if (h.alive && !h.speculative && h.backend === backend) {
        h.cand = instance === null ? NONE : this.candidate(instance, h.dpRank);
      }
    }
  }

  /** Holder id for a backend's (dp rank, medium) stream, created on first use. */
  holder(backend: string, dpRank: number, medium: Medium): number {
    const key = `b\u0000${backend}\u0000${dpRank}\u0000${medium}`;
    const found = this.holderKeys.get(key);
    if (found !== undefined) return found;
    const owner = this.backendOwner.has(backend) ? this.backendOwner.get(backend)! : backend;
    const cand = owner === null ? NONE : this.candidate(owner, dpRank);
    return this.addHolder(key, {
      backend,
      dpRank,
      medium,
      cand,
      group: this.group(`${backend}\u0000${dpRank}`),
      speculative: false,
      ttlMs: 0,
    });
  }

  /** Holder for router-predicted blocks of an instance (device tier, expiring). One per TTL class. */
  speculativeHolder(instance: string, dpRank: number, ttlMs: number): number {
    const key = `s\u0000${instance}\u0000${dpRank}\u0000${ttlMs}`;
    const found = this.holderKeys.get(key);
    if (found !== undefined) return found;
    return this.addHolder(key, {
      backend: `speculative:${instance}`,
      dpRank,
      medium: 'GPU',
      cand: this.candidate(instance, dpRank),
      group: this.group(`s\u0000${instance}\u0000${dpRank}`),
      speculative: true,
      ttlMs,
    });
  }

  private addHolder(
    key: string,
    h: Omit<Holder, 'head' | 'tail' | 'count' | 'alive' | 'tierBit'>,
  ): number {
    const id = this.holders.length;
    this.holders.push({ ...h, tierBit: TIER_BIT[h.medium], head: NONE, tail: NONE, count: 0, alive: true });
    this.holderKeys.set(key, id);
    return id;
  }

  private group(key: string): number {
    const found = this.groupKeys.get(key);
    if (found !== undefined) return found;
    const id = this.groups.length;
    this.groups.push({ key, engineMap: null, alive: true });
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
    }
    return id;
  }

  holderInfo(holder: number): HolderInfo {
    const h = this.holders[holder];
    const cand = h.cand === NONE ? null : this.cands[h.cand];
    return {
      backend: h.backend,
      dpRank: h.dpRank,
      medium: h.medium,
      instance: cand ? cand.instance : null,
      speculative: h.speculative,
      blocks: h.count,
    };
  }

  /** TTL class of a speculative holder (0 for event-confirmed holders). */
  speculativeTtl(holder: number): number {
    return this.holders[holder]?.ttlMs ?? 0;
  }

  /** Live holder ids (those with at least one block). */
  holderIds(): number[] {
    const out: number[] = [];
    this.holders.forEach((h, i) => {
      if (h.alive && h.count > 0) out.push(i);
    });
    return out;
  }

  // ---------------------------------------------------------------- writes

  /**
   * Store consecutive blocks for a holder. `seq` are router seq hashes; `engine` the engine's own
   * hashes for the same blocks (dual key) or null when the engine uses the router's hashes.
   * `expiresAt` > 0 marks speculative entries. Returns the number of newly added (block, holder) pairs.
   */
  store(holder: number, seq: BigUint64Array, engine: BigUint64Array | null = null, expiresAt = 0): number {
    const h = this.holders[holder];
    if (!h || !h.alive) throw new RangeError(`unknown holder ${holder}`);
    const sv = hashView(seq);
    const ev = engine ? hashView(engine) : null;
    if (ev && engine!.length !== seq.length) throw new RangeError('engine hashes and seq hashes differ in length');
    let added = 0;
    for (let i = 0; i < seq.length; i++) {
      const lo = sv[2 * i];
      const hi = sv[2 * i + 1];
      let e = this.table.get(lo, hi);
      if (e === NONE) e = this.newEntry(lo, hi);
      let rec = this.findRecord(e, holder);
      if (rec === NONE) {
        rec = this.newRecord(e, holder, expiresAt);
        added++;
      } else {
        this.recExpiry[rec] = expiresAt;
        if (h.speculative) this.moveToTail(h, rec); // keep expiry order within the holder
      }
      if (!h.speculative && h.cand !== NONE) this.dropSpeculative(e, h.cand);
      if (ev && (ev[2 * i] !== lo || ev[2 * i + 1] !== hi)) {
        const g = this.groups[h.group];
        if (!g.engineMap) g.engineMap = new U64Map(1024);
        g.engineMap.set(ev[2 * i], ev[2 * i + 1], e);
      }
    }
    return added;
  }

  /** Remove blocks named by engine hashes (or router hashes for standard publishers). */
  remove(holder: number, engine: BigUint64Array): number {
    const h = this.holders[holder];
    if (!h || !h.alive) return 0;
    const ev = hashView(engine);
    const g = this.groups[h.group];
    let removed = 0;
    for (let i = 0; i < engine.length; i++) {
      const lo = ev[2 * i];
      const hi = ev[2 * i + 1];
      let e = g.engineMap ? g.engineMap.get(lo, hi) : NONE;
      if (e === NONE) e = this.table.get(lo, hi);
      if (e === NONE) continue;
      const rec = this.findRecord(e, holder);
      if (rec === NONE) continue;
      this.freeRecord(rec);
      removed++;
      // Forget the engine hash once no medium of this group holds the block any more.
      if (g.engineMap && !this.groupHolds(e, h.group)) g.engineMap.delete(lo, hi);
    }
    return removed;
  }

  /** Router seq hash for an engine hash known in the holder's (backend, dp rank) group, or null. */
  resolve(holder: number, engineHash: bigint): bigint | null {
    const h = this.holders[holder];
    if (!h) return null;
    const [lo, hi] = split(engineHash);
    const g = this.groups[h.group];
    let e = g.engineMap ? g.engineMap.get(lo, hi) : NONE;
    if (e !== NONE) return this.groupHolds(e, h.group) ? join(this.entLo[e], this.entHi[e]) : null;
    e = this.table.get(lo, hi);
    if (e !== NONE && this.groupHolds(e, h.group)) return engineHash;
    return null;
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
    this.sweepEngineMap(h.group);
    return n;
  }

  /** Forget engine hashes whose block the group no longer holds on any medium. */
  private sweepEngineMap(group: number): void {
    const g = this.groups[group];
    if (!g.engineMap) return;
    if (!this.groupHasRecords(group)) {
      g.engineMap = null;
      return;
    }
    const stale: number[] = [];
    g.engineMap.forEach((lo, hi, e) => {
      if (!this.groupHolds(e, group)) stale.push(lo, hi);
    });
    for (let i = 0; i < stale.length; i += 2) g.engineMap.delete(stale[i], stale[i + 1]);
  }

  /** Purge and forget every holder matching the predicate. */
  private purgeHolders(pred: (h: Holder) => boolean): number {
    let n = 0;
    this.holders.forEach((h, i) => {
      if (!h.alive || !pred(h)) return;
      n += this.clearHolder(i);
    });
    this.holders.forEach((h, i) => {
      if (!h.alive || !pred(h)) return;
      h.alive = false;
      for (const [k, v] of this.holderKeys) if (v === i) this.holderKeys.delete(k);
      this.groups[h.group].engineMap = null;
    });
    return n;
  }

  /** Purge one backend's blocks (all ranks and media, or one dp rank). */
  removeBackend(backend: string, dpRank?: number): number {
    return this.purgeHolders((h) => !h.speculative && h.backend === backend && (dpRank === undefined || h.dpRank === dpRank));
  }

  /** Purge everything readable through an instance (its own backends and its speculative entries). */
  removeInstance(instance: string, dpRank?: number): number {
    return this.purgeHolders((h) => {
      if (h.cand === NONE) return false;
      const c = this.cands[h.cand];
      return c.instance === instance && (dpRank === undefined || c.dpRank === dpRank);
    });
  }

  /** Remove speculative entries whose expiry is at or before `now`. */
  expire(now: number): number {
    let n = 0;
    for (const h of this.holders) {
      if (!h.alive || !h.speculative) continue;
      while (h.head !== NONE && this.recExpiry[h.head] <= now) {
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
    const { qStamp, qMaskDepth, qMask, qDev, qHost, qDisk, recNextE, recHolder, recExpiry, holders, cands } = this;
    const alive = this.qAlive;
    alive.length = 0;
    const touched: number[] = [];
    let shared = 0;
    let sharedAlive = true;
    for (let i = 0; i < n; i++) {
      const e = this.table.get(sv[2 * i], sv[2 * i + 1]);
      if (e === NONE) break;
      let sharedHere = false;
      for (let r = this.entHead[e]; r !== NONE; r = recNextE[r]) {
        const exp = recExpiry[r];
        if (exp !== 0 && exp <= now) continue;
        const h = holders[recHolder[r]];
        const c = h.cand;
        if (c === NONE) {
          sharedHere = true;
          continue;
        }
        if (i === 0) {
          if (qStamp[c] !== qid) {
            if (limitInstances && !limitInstances.has(cands[c].instance)) continue;
            qStamp[c] = qid;
            qDev[c] = 0;
            qHost[c] = 0;
            qDisk[c] = 0;
            alive.push(c);
            touched.push(c);
          }
        } else if (qStamp[c] !== qid || qDisk[c] !== i) continue; // never matched, or already dropped
        if (qMaskDepth[c] !== i || qStamp[c] !== qid) {
          qMaskDepth[c] = i;
          qMask[c] = 0;
        }
        qMask[c] |= h.tierBit;
      }
      if (sharedAlive && sharedHere) shared = i + 1;
      else sharedAlive = false;
      // Advance or drop each live candidate.
      for (let k = 0; k < alive.length; ) {
        const c = alive[k];
        if (qMaskDepth[c] !== i) {
          alive[k] = alive[alive.length - 1];
          alive.pop();
          continue;
        }
        const m = qMask[c];
        if (m & GPU && qDev[c] === i) qDev[c] = i + 1;
        if (m & GPU_CPU && qHost[c] === i) qHost[c] = i + 1;
        qDisk[c] = i + 1;
        qMaskDepth[c] = -1;
        k++;
      }
      if (alive.length === 0 && !sharedAlive) break;
    }
    const candidates: CandidateOverlap[] = touched.map((c) => ({
      instance: cands[c].instance,
      dpRank: cands[c].dpRank,
      device: qDev[c],
      host: qHost[c],
      disk: qDisk[c],
    }));
    return { queriedBlocks: n, candidates, sharedBlocks: shared };
  }

  /** Blocks held by a holder, in insertion order (for /dump and peer recovery). */
  holderBlocks(holder: number): DumpedBlock[] {
    const h = this.holders[holder];
    const out: DumpedBlock[] = [];
    if (!h) return out;
    const g = this.groups[h.group];
    let reverse: Map<number, bigint> | null = null;
    if (g.engineMap) {
      reverse = new Map();
      g.engineMap.forEach((lo, hi, e) => reverse!.set(e, join(lo, hi)));
    }
    for (let r = h.head; r !== NONE; r = this.recNextH[r]) {
      const e = this.recEntry[r];
      out.push({
        hash: join(this.entLo[e], this.entHi[e]),
        engineHash: reverse?.get(e) ?? null,
        expiresAt: this.recExpiry[r],
      });
    }
    return out;
  }

  stats(): IndexStats {
    const bytes =
      this.table.byteLength +
      this.entHead.byteLength +
      this.entLo.byteLength +
      this.entHi.byteLength +
      this.recEntry.byteLength * 5 +
      this.recExpiry.byteLength +
      this.groups.reduce((s, g) => s + (g.engineMap ? g.engineMap.byteLength : 0), 0);
    return {
      blocks: this.table.size,
      records: this.liveRecords,
      holders: this.holders.filter((h) => h.alive && h.count > 0).length,
      bytes,
    };
  }

  // ---------------------------------------------------------------- internals

  private findRecord(e: number, holder: number): number {
    for (let r = this.entHead[e]; r !== NONE; r = this.recNextE[r]) if (this.recHolder[r] === holder) return r;
    return NONE;
  }

  private groupHolds(e: number, group: number): boolean {
    for (let r = this.entHead[e]; r !== NONE; r = this.recNextE[r]) {
      if (this.holders[this.recHolder[r]].group === group) return true;
    }
    return false;
  }

  private groupHasRecords(group: number): boolean {
    return this.holders.some((h) => h.alive && h.group === group && h.count > 0);
  }

  private dropSpeculative(e: number, cand: number): void {
    for (let r = this.entHead[e]; r !== NONE; ) {
      const next = this.recNextE[r];
      const h = this.holders[this.recHolder[r]];
      if (h.speculative && h.cand === cand) this.freeRecord(r);
      r = next;
    }
  }

  private newEntry(lo: number, hi: number): number {
    let e = this.entFree.pop();
    if (e === undefined) {
      e = this.entCount++;
      if (e >= this.entHead.length) {
        const n = this.entHead.length * 2;
        this.entHead = grow(this.entHead, n, NONE);
        this.entLo = grow(this.entLo, n);
        this.entHi = grow(this.entHi, n);
      }
    }
    this.entHead[e] = NONE;
    this.entLo[e] = lo;
    this.entHi[e] = hi;
    this.table.set(lo, hi, e);
    return e;
  }

  private newRecord(e: number, holder: number, expiresAt: number): number {
    let r = this.recFree;
    if (r !== NONE) this.recFree = this.recNextE[r];
    else {
      r = this.recCount++;
      if (r >= this.recEntry.length) {
        const n = this.recEntry.length * 2;
        this.recEntry = grow(this.recEntry, n);
        this.recHolder = grow(this.recHolder, n);
        this.recNextE = grow(this.recNextE, n);
        this.recPrevH = grow(this.recPrevH, n);
        this.recNextH = grow(this.recNextH, n);
        this.recExpiry = grow(this.recExpiry, n);
      }
    }
    this.recEntry[r] = e;
    this.recHolder[r] = holder;
    this.recExpiry[r] = expiresAt;
    this.recNextE[r] = this.entHead[e];
    this.entHead[e] = r;
    const h = this.holders[holder];
    this.recPrevH[r] = h.tail;
    this.recNextH[r] = NONE;
    if (h.tail !== NONE) this.recNextH[h.tail] = r;
    else h.head = r;
    h.tail = r;
    h.count++;
    this.liveRecords++;
    return r;
  }

  private unlinkFromHolder(h: Holder, r: number): void {
    const prev = this.recPrevH[r];
    const next = this.recNextH[r];
    if (prev !== NONE) this.recNextH[prev] = next;
    else h.head = next;
    if (next !== NONE) this.recPrevH[next] = prev;
    else h.tail = prev;
  }

  private moveToTail(h: Holder, r: number): void {
    if (h.tail === r) return;
    this.unlinkFromHolder(h, r);
    this.recPrevH[r] = h.tail;
    this.recNextH[r] = NONE;
    if (h.tail !== NONE) this.recNextH[h.tail] = r;
    else h.head = r;
    h.tail = r;
  }

  private freeRecord(r: number): void {
    const e = this.recEntry[r];
    const h = this.holders[this.recHolder[r]];
    // unlink from the entry's singly linked list
    if (this.entHead[e] === r) this.entHead[e] = this.recNextE[r];
    else {
      let p = this.entHead[e];
      while (this.recNextE[p] !== r) p = this.recNextE[p];
      this.recNextE[p] = this.recNextE[r];
    }
    this.unlinkFromHolder(h, r);
    h.count--;
    this.liveRecords--;
    this.recNextE[r] = this.recFree;
    this.recFree = r;
    if (this.entHead[e] === NONE) {
      this.table.delete(this.entLo[e], this.entHi[e]);
      this.entFree.push(e);
    }
  }
}

function grow<T extends Int32Array | Uint32Array | Float64Array>(a: T, n: number, fill?: number): T {
  const b = new (a.constructor as new (n: number) => T)(n);
  b.set(a);
  if (fill !== undefined) b.fill(fill, a.length);
  return b;
}
