// Holders of one namespace: who holds blocks (backend, dp rank, medium, or a speculative TTL class),
// whom they count for (a routable candidate = (instance, dp rank), or the shared pool), and the
// (backend, dp rank) groups that scope engine-native hashes. Objects for metadata, typed arrays
// (hCand, hBit, hSpec, hGroup, hMix0) for the query loop. See README.md (module map).
import { WorkerMap } from '../common/worker-map.js';
import { type Candidate, grow, type Holder, NONE, recordMix, specKey } from './layout.js';
import { type Medium, TIER_BIT } from './tiers.js';
import type { EngineMap } from './engine-map.js';

export interface HolderInfo {
  backend: string;
  dpRank: number;
  medium: Medium;
  /** Routable instance, or null for a shared-pool backend. */
  instance: string | null;
  speculative: boolean;
  blocks: number;
}

export abstract class HolderTable {
  // holders: objects for metadata, typed arrays for the query loop
  protected holders: Holder[] = [];
  protected holderKeys = new Map<string, number>();
  // Purged holder ids are reused, so a flapping publisher cannot grow the holder table.
  protected liveHolders = new Set<number>();
  protected freeHolderIds: number[] = [];
  protected hCand = new Int32Array(16);
  protected hBit = new Int32Array(16);
  protected hSpec = new Uint8Array(16);
  protected hGroup = new Int32Array(16);
  /** The holder's record mix for an unexpiring record (what a confirmed record adds to a signature). */
  protected hMix0 = new Int32Array(16);
  /**
   * (backend, dp rank) groups: the engine map, and the group's live confirmed holders (its media): with
   * one, a freed record's engine hash has no other record of the group on the block to move to.
   */
  protected groups: Array<{ engineMap: EngineMap | null; confirmed: number }> = [];
  protected groupKeys = new Map<string, number>();
  protected cands: Candidate[] = [];
  /** Per candidate: the ids its speculative holders were given (ids are reused: check hSpec, hCand). */
  protected candSpec: number[][] = [];
  /** Candidate ids by (instance, dp rank); ids are never taken back. */
  protected candIds = new WorkerMap<number>();
  private backendOwner = new Map<string, string | null>();
  /**
   * Candidate -> its confirmed GPU holder (NONE: none known; validated on use, rebuilt by a scan when
   * stale), by candidate id: the eviction judgement asks it for every loaded candidate of a decision,
   * and a Map lookup plus the holder's (cold) object were a third of overlapsFor's own time at 1,024.
   */
  private gpuHolders = new Int32Array(16).fill(NONE);
  /** Per holder: 1 while it is alive, event-confirmed and on the GPU (what a candidate's GPU holder is). */
  private hLiveGpu = new Uint8Array(16);
  /**
   * Candidates a scan found without a GPU holder (an instance booked before its engine's first
   * event): no scan again until one is made for it (addHolder) or backends are rebound.
   */
  private noGpuHolder = new Set<number>();

  // ---------------------------------------------------------------- holders and ownership

  /**
   * Declare who can read a backend's blocks: an instance id, or null for a shared pool that every
   * instance in the namespace can read. Unbound backends default to the instance of the same id.
   */
  bindBackend(backend: string, instance: string | null): void {
    this.backendOwner.set(backend, instance);
    this.noGpuHolder.clear();
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
    const cand = this.candidate(instance, dpRank);
    const id = this.addHolder(key, `speculative:${instance}`, dpRank, 'GPU', cand, g, true, ttlMs);
    const ids = (this.candSpec[cand] ??= []);
    if (!ids.includes(id)) ids.push(id);
    return id;
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
    if (!speculative && medium === 'GPU') {
      // The candidate's GPU holder, unless it has one (the first made still alive, as a scan finds).
      this.noGpuHolder.delete(cand);
    }
    if (id >= this.hCand.length) {
      const n = this.hCand.length * 2;
      this.hCand = grow(this.hCand, n);
      this.hBit = grow(this.hBit, n);
      this.hSpec = grow(this.hSpec, n);
      this.hGroup = grow(this.hGroup, n);
      this.hMix0 = grow(this.hMix0, n);
      this.hLiveGpu = grow(this.hLiveGpu, n);
    }
    this.hCand[id] = cand;
    this.hBit[id] = TIER_BIT[medium];
    this.hSpec[id] = speculative ? 1 : 0;
    this.hGroup[id] = group;
    this.hMix0[id] = recordMix(id, 0);
    this.hLiveGpu[id] = !speculative && medium === 'GPU' ? 1 : 0;
    if (!speculative) this.groups[group].confirmed++;
    if (this.hLiveGpu[id] === 1 && cand !== NONE) {
      // The candidate's GPU holder, unless it has one (the first made still alive, as a scan finds).
      const known = this.gpuHolders[cand];
      if (known === NONE || !this.isGpuHolderOf(known, cand)) this.gpuHolders[cand] = id;
    }
    return id;
  }

  private group(key: string): number {
    const found = this.groupKeys.get(key);
    if (found !== undefined) return found;
    const id = this.groups.length;
    this.groups.push({ engineMap: null, confirmed: 0 });
    this.groupKeys.set(key, id);
    return id;
  }

  protected candidate(instance: string, dpRank: number): number {
    const found = this.candIds.get(instance, dpRank);
    if (found !== undefined) return found;
    const id = this.cands.length;
    this.cands.push({ instance, dpRank });
    if (id >= this.gpuHolders.length) {
      const more = new Int32Array(this.gpuHolders.length * 2).fill(NONE);
      more.set(this.gpuHolders);
      this.gpuHolders = more;
    }
    this.candIds.set(instance, dpRank, id);
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

  // ---------------------------------------------------------------- GPU holders (eviction awareness)

  /** The instance's event-confirmed GPU holder (through its backend binding), or NONE. */
  protected gpuHolder(instance: string, dpRank: number): number {
    const cand = this.candIds.get(instance, dpRank);
    return cand === undefined ? NONE : this.gpuHolderOf(cand);
  }

  protected gpuHolderOf(cand: number): number {
    const known = this.gpuHolders[cand];
    if (known !== NONE && this.isGpuHolderOf(known, cand)) return known;
    if (this.noGpuHolder.has(cand)) return NONE;
    for (const i of this.liveHolders) {
      if (this.isGpuHolderOf(i, cand)) {
        this.gpuHolders[cand] = i;
        return i;
      }
    }
    this.noGpuHolder.add(cand);
    return NONE;
  }

  private isGpuHolderOf(h: number, cand: number): boolean {
    return this.hLiveGpu[h] === 1 && this.hCand[h] === cand;
  }

  /** A holder was purged (its id may be reused): it is nobody's GPU holder now. */
  protected holderPurged(h: number): void {
    this.holders[h].alive = false;
    if (this.hSpec[h] === 0) this.groups[this.hGroup[h]].confirmed--;
    this.hLiveGpu[h] = 0;
  }
}
