// The secondary KV-cache groups of hybrid instances (sliding window, Mamba / linear-attention state)
// of one namespace, kept beside the prefix index (block-index.ts holds the full-attention groups
// exactly as for a single-group engine). A group's blocks never extend a prefix; they decide
// where an instance's hit may end. The rules, as vLLM's hybrid manager applies them
// (vllm/v1/core/single_type_kv_cache_manager.py: SlidingWindowManager.find_longest_cache_hit,
// MambaManager.find_longest_cache_hit; the coordinator in vllm/v1/core/kv_cache_coordinator.py
// takes the largest length every group accepts) and as issue 39 quotes llm-d/llm-d-kv-cache#650 and
// Dynamo's proposal ai-dynamo/dynamo#12169 (llm-d-kv-cache#510 keeps, per pod entry, the groups
// that stored a block, as this keeps a set per group):
//   - full attention: a contiguous run from block 0 (the prefix index's answer, `hit`);
//   - sliding window of W tokens: a hit ending at c needs the last ceil((W - 1) / B) group blocks
//     before c cached (B = the group's block size); a run shorter than that reaching block 0 also
//     counts (the window then covers the whole prefix);
//   - Mamba: the state is cached only at the group's block ends, so c must end a stored state block;
//   - the instance's hit is the largest c <= hit (and <= the blocks vLLM may reuse, the prompt
//     less its last token) that every group accepts.
// Blocks are kept as router seq hashes (the applier re-hashes a group's token_ids as it does the
// prefix's), per (backend, dp rank) and group, with the tiers holding each. Pure: no I/O.
import type { CandidateOverlaps, OverlapResult } from './block-index.js';
import type { KvCacheGroup } from './kv-event.js';
import { type Medium, TIER_BIT } from './tiers.js';

/** One secondary group of one (backend, dp rank). */
interface GroupSet {
  readonly idx: number;
  /** As the engine's events describe the group (kept for snapshots). */
  spec: KvCacheGroup;
  kind: KvCacheGroup['kind'];
  /** Router blocks a sliding-window hit needs before its end (0: any end). */
  need: number;
  /** Router blocks per group block (a Mamba state ends every `ratio`-th router block). */
  ratio: number;
  /** Router seq hash -> tier bits (TIER_BIT) of the media holding it. */
  readonly held: Map<bigint, number>;
  /**
   * Published (engine) id -> router seq hash, for removals and parents. Kept a while after the block
   * leaves (up to `ALIAS_SLACK` beyond the held blocks, oldest dropped first): a window group evicts
   * a request's early blocks long before the request's next blocks name them as parent, and when the
   * group's block size differs from the full-attention group's only this map knows the parent.
   */
  readonly alias: Map<bigint, bigint>;
}

const ALIAS_SLACK = 4096;

interface GroupHolder {
  readonly backend: string;
  readonly dpRank: number;
  /** The routable instance reading it (null: a shared pool, which has no hit of its own). */
  instance: string | null;
  readonly groups: GroupSet[];
}

/** One (backend, dp rank, group) in a snapshot. */
export interface GroupSnapshot {
  backend_id: string;
  instance_id: string | null;
  dp_rank: number;
  group: KvCacheGroup;
  /** Router seq hashes of the group's blocks, with their tier bits (TIER_BIT) in `tiers`. */
  seq_hashes: bigint[];
  tiers: number[];
  /** Engine ids and the router seq hash each names (removals). */
  engine_hashes: bigint[];
  engine_seq_hashes: bigint[];
}

/** Tier bits a query level reads: device, device + host, any own tier (block-index.ts's levels). */
export const DEVICE_TIERS = TIER_BIT.GPU;
export const HOST_TIERS = TIER_BIT.GPU | TIER_BIT.CPU;
export const ANY_TIERS = TIER_BIT.GPU | TIER_BIT.CPU | TIER_BIT.DISK | TIER_BIT.EXTERNAL;

function candidateKey(instance: string, dpRank: number): string {
  return `${instance}\u0000${dpRank}`;
}

export class KvGroups {
  private readonly holders = new Map<string, GroupHolder>();
  private readonly byCandidate = new Map<string, GroupHolder[]>();
  /** Some group block was ever stored off the device (host, disk): the tiers' clamps can differ. */
  private offDevice = false;

  /** No instance of this namespace has a secondary group (queries skip the clamp). */
  get empty(): boolean {
    return this.holders.size === 0;
  }

  /**
   * Record a group's stored blocks: `router` are their router seq hashes, `published` the ids the
   * engine names them by (same length), `routerBlockSize` the namespace's block size.
   */
  store(
    backend: string,
    instance: string | null,
    dpRank: number,
    medium: Medium,
    group: KvCacheGroup,
    routerBlockSize: number,
    router: BigUint64Array,
    published: ArrayLike<bigint>,
  ): number {
    const g = this.group(backend, instance, dpRank, group, routerBlockSize);
    const bit = TIER_BIT[medium];
    if (bit !== DEVICE_TIERS) this.offDevice = true;
    let n = 0;
    for (let i = 0; i < router.length; i++) {
      // A Mamba state exists only at the end of a group block; the event starts at a group block.
      if (g.kind === 'mamba' && i % g.ratio !== g.ratio - 1) continue;
      const h = router[i];
      const old = g.held.get(h) ?? 0;
      if ((old & bit) === 0) n++;
      g.held.set(h, old | bit);
      g.alias.set(published[i], h);
    }
    return n;
  }

  /** The router seq hash of a block a group of (backend, dp rank) stored, by the engine's id. */
  resolve(backend: string, dpRank: number, engineHash: bigint): bigint | null {
    const holder = this.holders.get(candidateKey(backend, dpRank));
    if (!holder) return null;
    for (const g of holder.groups) {
      const h = g.alias.get(engineHash);
      if (h !== undefined) return h;
    }
    return null;
  }

  /** Forget a group's blocks on one medium, named by the engine's ids. */
  remove(backend: string, dpRank: number, medium: Medium, groupIdx: number, published: ArrayLike<bigint>): number {
    const holder = this.holders.get(candidateKey(backend, dpRank));
    const g = holder?.groups.find((x) => x.idx === groupIdx);
    if (!g) return 0;
    const bit = TIER_BIT[medium];
    let n = 0;
    for (let i = 0; i < published.length; i++) {
      const h = g.alias.get(published[i]);
      if (h === undefined) continue;
      const mask = g.held.get(h) ?? 0;
      if ((mask & bit) === 0) continue;
      n++;
      if (mask === bit) g.held.delete(h);
      else g.held.set(h, mask & ~bit);
    }
    if (g.alias.size > g.held.size + ALIAS_SLACK) trimAlias(g);
    return n;
  }

  /**
   * Purge: a backend's groups (one dp rank, one medium when given). A holder left without blocks
   * is forgotten, so a fleet whose hybrid engines all left pays no clamp again.
   */
  clear(backend: string, dpRank?: number, medium?: Medium): number {
    let n = 0;
    for (const [key, holder] of this.holders) {
      if (holder.backend !== backend || (dpRank !== undefined && holder.dpRank !== dpRank)) continue;
      for (const g of holder.groups) n += medium === undefined ? clearAll(g) : clearMedium(g, TIER_BIT[medium]);
      if (holder.groups.every((g) => g.held.size === 0)) this.drop(key, holder);
    }
    return n;
  }

  /** A backend now belongs to another instance (TieredIndexer.bindBackend): its groups follow. */
  rebind(backend: string, instance: string | null): void {
    for (const [key, holder] of this.holders) {
      if (holder.backend !== backend || holder.instance === instance) continue;
      this.drop(key, holder);
      holder.instance = instance;
      this.holders.set(key, holder);
      if (instance !== null) {
        const ck = candidateKey(instance, holder.dpRank);
        const list = this.byCandidate.get(ck);
        if (list) list.push(holder);
        else this.byCandidate.set(ck, [holder]);
      }
    }
  }

  /** Purge the groups read by an instance (all its backends). */
  clearInstance(instance: string, dpRank?: number): number {
    let n = 0;
    for (const [key, holder] of this.holders) {
      if (holder.instance !== instance || (dpRank !== undefined && holder.dpRank !== dpRank)) continue;
      for (const g of holder.groups) n += clearAll(g);
      this.drop(key, holder);
    }
    return n;
  }

  clearEverything(): number {
    let n = 0;
    for (const holder of this.holders.values()) for (const g of holder.groups) n += clearAll(g);
    this.holders.clear();
    this.byCandidate.clear();
    return n;
  }

  /**
   * The largest c <= min(hit, maxBlocks) every secondary group of (instance, dp rank) accepts,
   * reading group blocks on the tiers in `tiers`. `seq` is the prompt's router seq hashes.
   * Without groups the hit is returned unchanged.
   */
  clamp(instance: string, dpRank: number, seq: BigUint64Array, hit: number, maxBlocks: number, tiers: number): number {
    const holders = this.byCandidate.get(candidateKey(instance, dpRank));
    if (holders === undefined || hit === 0) return hit;
    let c = Math.min(hit, maxBlocks, seq.length);
    // Each rule gives the largest end at or below c it accepts; repeat until all agree (a fixed
    // point, as vLLM's coordinator iterates).
    for (let changed = true; changed && c > 0; ) {
      changed = false;
      for (const holder of holders)
        for (const g of holder.groups) {
          const next = g.kind === 'mamba' ? stateEnd(g, seq, c, tiers) : windowEnd(g, seq, c, tiers);
          if (next < c) {
            c = next;
            changed = true;
          }
        }
    }
    return c;
  }

  /**
   * Clamp the scheduler's per-candidate overlaps in place (device, host, disk and the surviving
   * device prefix), with `maxBlocks` the blocks the engine may reuse (the prompt less its last token).
   */
  clampOverlaps(
    seq: BigUint64Array,
    maxBlocks: number,
    candidates: ReadonlyArray<{ instance: string; dpRank: number }>,
    o: CandidateOverlaps,
  ): void {
    for (let k = 0; k < candidates.length; k++) {
      if (o.disk[k] === 0 && o.device[k] === 0) continue;
      const { instance, dpRank } = candidates[k];
      if (!this.byCandidate.has(candidateKey(instance, dpRank))) continue;
      const device = o.device[k];
      o.device[k] = this.clamp(instance, dpRank, seq, device, maxBlocks, DEVICE_TIERS);
      // With every group block on the device, a tier level with the device's hit clamps alike.
      o.host[k] =
        !this.offDevice && o.host[k] === device
          ? o.device[k]
          : this.clamp(instance, dpRank, seq, o.host[k], maxBlocks, HOST_TIERS);
      o.disk[k] =
        !this.offDevice && o.disk[k] === device
          ? o.device[k]
          : this.clamp(instance, dpRank, seq, o.disk[k], maxBlocks, ANY_TIERS);
      if (o.surviving !== o.device)
        o.surviving[k] =
          o.surviving[k] === device
            ? o.device[k]
            : this.clamp(instance, dpRank, seq, o.surviving[k], maxBlocks, DEVICE_TIERS);
    }
  }

  /** Clamp a query's result (GET/POST query, the indexer API) in place. */
  clampResult(seq: BigUint64Array, maxBlocks: number, r: OverlapResult): void {
    for (const c of r.candidates) {
      if (!this.byCandidate.has(candidateKey(c.instance, c.dpRank))) continue;
      c.device = this.clamp(c.instance, c.dpRank, seq, c.device, maxBlocks, DEVICE_TIERS);
      c.host = this.clamp(c.instance, c.dpRank, seq, c.host, maxBlocks, HOST_TIERS);
      c.disk = this.clamp(c.instance, c.dpRank, seq, c.disk, maxBlocks, ANY_TIERS);
    }
  }

  /** Every group's blocks, for snapshots (GET /dump, peer recovery): see `restore`. */
  dump(): GroupSnapshot[] {
    const out: GroupSnapshot[] = [];
    for (const h of this.holders.values())
      for (const g of h.groups) {
        if (g.held.size === 0) continue;
        out.push({
          backend_id: h.backend,
          instance_id: h.instance,
          dp_rank: h.dpRank,
          group: { ...g.spec },
          seq_hashes: [...g.held.keys()],
          tiers: [...g.held.values()],
          engine_hashes: [...g.alias.keys()],
          engine_seq_hashes: [...g.alias.values()],
        });
      }
    return out;
  }

  /** Add a dumped group's blocks (idempotent, like the index's restore). Returns blocks added. */
  restore(s: GroupSnapshot, routerBlockSize: number): number {
    const g = this.group(s.backend_id, s.instance_id, s.dp_rank, s.group, routerBlockSize);
    let n = 0;
    s.seq_hashes.forEach((h, i) => {
      const old = g.held.get(h) ?? 0;
      if (old === 0) n++;
      const bits = s.tiers[i] & ANY_TIERS;
      if ((bits & ~DEVICE_TIERS) !== 0) this.offDevice = true;
      g.held.set(h, old | bits);
    });
    for (let i = 0; i < s.engine_hashes.length; i++) g.alias.set(s.engine_hashes[i], s.engine_seq_hashes[i]);
    return n;
  }

  /** Learned groups per (backend, dp rank), for diagnostics. */
  describe(): Array<{
    backend: string;
    dpRank: number;
    groups: Array<{ idx: number; kind: string; needBlocks: number; ratio: number; blocks: number }>;
  }> {
    return [...this.holders.values()].map((h) => ({
      backend: h.backend,
      dpRank: h.dpRank,
      groups: h.groups.map((g) => ({
        idx: g.idx,
        kind: g.kind,
        needBlocks: g.need,
        ratio: g.ratio,
        blocks: g.held.size,
      })),
    }));
  }

  private group(
    backend: string,
    instance: string | null,
    dpRank: number,
    spec: KvCacheGroup,
    routerBlockSize: number,
  ): GroupSet {
    const key = candidateKey(backend, dpRank);
    let holder = this.holders.get(key);
    if (holder === undefined) {
      holder = { backend, dpRank, instance, groups: [] };
      this.holders.set(key, holder);
      if (instance !== null) {
        const ck = candidateKey(instance, dpRank);
        const list = this.byCandidate.get(ck);
        if (list) list.push(holder);
        else this.byCandidate.set(ck, [holder]);
      }
    }
    let g = holder.groups.find((x) => x.idx === spec.idx);
    const ratio = Math.max(1, Math.round(spec.blockSize / routerBlockSize));
    const groupBlocks = spec.kind === 'sliding_window' ? Math.ceil((spec.window - 1) / spec.blockSize) : 0;
    if (g === undefined) {
      g = {
        idx: spec.idx,
        spec,
        kind: spec.kind,
        need: groupBlocks * ratio,
        ratio,
        held: new Map(),
        alias: new Map(),
      };
      holder.groups.push(g);
    } else if (g.kind !== spec.kind || g.ratio !== ratio || g.need !== groupBlocks * ratio) {
      // The engine restarted with another layout: what was learned no longer applies.
      clearAll(g);
      g.spec = spec;
      g.kind = spec.kind;
      g.ratio = ratio;
      g.need = groupBlocks * ratio;
    }
    return g;
  }

  private drop(key: string, holder: GroupHolder): void {
    this.holders.delete(key);
    if (holder.instance === null) return;
    const ck = candidateKey(holder.instance, holder.dpRank);
    const list = this.byCandidate.get(ck);
    if (!list) return;
    const rest = list.filter((h) => h !== holder);
    if (rest.length > 0) this.byCandidate.set(ck, rest);
    else this.byCandidate.delete(ck);
  }
}

/** Drop the oldest aliases of blocks no longer held until ALIAS_SLACK / 2 of them are left. */
function trimAlias(g: GroupSet): void {
  let excess = g.alias.size - g.held.size - ALIAS_SLACK / 2;
  for (const [e, h] of g.alias) {
    if (excess <= 0) break;
    if (g.held.has(h)) continue;
    g.alias.delete(e);
    excess--;
  }
}

function clearAll(g: GroupSet): number {
  const n = g.held.size;
  g.held.clear();
  g.alias.clear();
  return n;
}

function clearMedium(g: GroupSet, bit: number): number {
  let n = 0;
  for (const [h, mask] of g.held) {
    if ((mask & bit) === 0) continue;
    n++;
    if (mask === bit) g.held.delete(h);
    else g.held.set(h, mask & ~bit);
  }
  if (g.held.size === 0) g.alias.clear();
  return n;
}

/**
 * Sliding window: the largest end e <= c with the `need` blocks before it held, or else the held run
 * from block 0 (vLLM's SlidingWindowManager.find_longest_cache_hit, which scans block by block).
 * The far block of a window is read first: when it is missing no window containing it can end the
 * hit, so the scan jumps a whole window (the skip vLLM's TODO there describes).
 */
function windowEnd(g: GroupSet, seq: BigUint64Array, c: number, tiers: number): number {
  const m = g.need;
  if (m === 0) return c;
  const held = g.held;
  let e = c;
  while (e >= m) {
    if (((held.get(seq[e - m]) ?? 0) & tiers) === 0) {
      e -= m;
      continue;
    }
    let i = e - 1;
    while (i > e - m && ((held.get(seq[i]) ?? 0) & tiers) !== 0) i--;
    if (i === e - m) return e;
    e = i; // block i is missing: every window holding it is out
  }
  let r = 0;
  while (r < e && ((held.get(seq[r]) ?? 0) & tiers) !== 0) r++;
  return r;
}

/**
 * Mamba: the largest end at or below c whose state block is held (0 when none). States end group
 * blocks, so only multiples of the group's ratio are read.
 */
function stateEnd(g: GroupSet, seq: BigUint64Array, c: number, tiers: number): number {
  for (let e = c - (c % g.ratio); e > 0; e -= g.ratio) if (((g.held.get(seq[e - 1]) ?? 0) & tiers) !== 0) return e;
  return 0;
}
