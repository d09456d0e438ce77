// TieredIndexer: the map of namespaces (model, block size, LoRA, salt, tenant) -> BlockIndex and the
// backend owners; the one object the router, the HTTP API and the index writer share. The tier walk
// itself is BlockIndex.query (block-index.ts).
import { type HashSpace, hashSpace, seqHashes } from '../hashing/index.js';
import type { OverlapResult } from './block-index.js';
import { Namespace, type NamespaceId, namespaceKey, normalizeNamespace } from './namespace.js';

export interface TieredIndexerOptions {
  /** Hash seed S for namespaces whose model has no seed of its own (default 1337). */
  defaultSeed?: bigint;
  /** Per-model seeds (model pools may configure their own). */
  modelSeeds?: ReadonlyMap<string, bigint>;
  /**
   * KV-cache groups of hybrid engines: 'all' (default) keeps sliding-window and Mamba groups beside
   * the prefix index and clamps hits by them (groups.ts); 'full_attention' drops them (the old
   * behaviour, which over-claims on hybrid engines).
   */
  kvCacheGroups?: KvCacheGroupsMode;
  /**
   * Record rows each namespace's index allocates at once: the (block, holder) pairs it is expected to
   * hold at most (bench fleet: its engines' blocks). Rows never written cost no memory; they spare
   * the growth copies and the mark-compacts their allocation starts (records.ts). Default 0: grow.
   */
  reserveRecords?: number;
  /**
   * Engine hashes each (backend, dp rank) group's engine map holds before it grows (bench fleet: an
   * engine's share of reserveRecords). Growing by 1.25x from 64 rows to an engine's thousands copied
   * every row ~4x (4.5 % of the CPU of 1,024 x 10,000 behind 8 replicas). Default 0: grow.
   */
  reserveEngineHashes?: number;
}

export type KvCacheGroupsMode = 'all' | 'full_attention';

export class TieredIndexer {
  private readonly spaces = new Map<string, Namespace>();
  private readonly defaultSeed: bigint | undefined;
  private readonly modelSeeds: ReadonlyMap<string, bigint>;
  private readonly owners = new Map<string, string | null>();
  private gen = 0;
  private readonly reserveRecords: number;
  private readonly reserveEngineHashes: number;
  /** Whether secondary KV-cache groups are kept (TieredIndexerOptions.kvCacheGroups). */
  readonly groupAware: boolean;

  /** Changes whenever holders may have been purged or backends rebound (caches of holder ids check it). */
  get generation(): number {
    return this.gen;
  }

  constructor(opts: TieredIndexerOptions = {}) {
    this.defaultSeed = opts.defaultSeed;
    this.modelSeeds = opts.modelSeeds ?? new Map();
    this.groupAware = (opts.kvCacheGroups ?? 'all') === 'all';
    this.reserveRecords = opts.reserveRecords ?? 0;
    this.reserveEngineHashes = opts.reserveEngineHashes ?? 0;
  }

  /** The namespace for an identity, created on first use. */
  namespace(id: Parameters<typeof normalizeNamespace>[0]): Namespace {
    const nid = normalizeNamespace(id);
    const key = namespaceKey(nid);
    let ns = this.spaces.get(key);
    if (!ns) {
      ns = new Namespace(
        nid,
        this.modelSeeds.get(nid.model) ?? this.defaultSeed,
        () => this.gen++,
        this.reserveRecords,
        this.reserveEngineHashes,
      );
      for (const [backend, owner] of this.owners) ns.index.bindBackend(backend, owner);
      this.spaces.set(key, ns);
    }
    return ns;
  }

  /**
   * Declare which instance reads a backend's blocks (null: a shared pool every instance reads).
   * Unbound backends belong to the instance with the same id.
   */
  bindBackend(backend: string, instance: string | null): void {
    this.gen++;
    this.owners.set(backend, instance);
    for (const ns of this.spaces.values()) {
      ns.index.bindBackend(backend, instance);
      ns.groups?.rebind(backend, instance);
    }
  }

  /** The instance a backend's blocks belong to (null = shared pool). */
  ownerOf(backend: string): string | null {
    return this.owners.has(backend) ? this.owners.get(backend)! : backend;
  }

  /** The hash space a namespace uses (without creating the namespace). */
  spaceFor(id: Parameters<typeof normalizeNamespace>[0]): HashSpace {
    const found = this.find(id);
    if (found) return found.space;
    const nid = normalizeNamespace(id);
    return hashSpace({
      seed: this.modelSeeds.get(nid.model) ?? this.defaultSeed,
      loraName: nid.loraName,
      salt: nid.salt,
    });
  }

  /** Existing namespace or undefined (queries never create namespaces). */
  find(id: Parameters<typeof normalizeNamespace>[0]): Namespace | undefined {
    return this.spaces.get(namespaceKey(id));
  }

  namespaces(): Namespace[] {
    return [...this.spaces.values()];
  }

  /** Overlap for a prompt's tokens (hashes them in the namespace's hash space). */
  queryTokens(id: NamespaceId, tokens: ArrayLike<number>, now: number, instances?: ReadonlySet<string>): OverlapResult {
    const ns = this.find(id);
    const blocks = Math.floor(tokens.length / id.blockSize);
    if (!ns) return { queriedBlocks: blocks, candidates: [], sharedBlocks: 0 };
    const seq = seqHashes(tokens, id.blockSize, ns.space);
    const r = ns.index.query(seq, now, instances);
    if (ns.groups !== null && !ns.groups.empty)
      ns.groups.clampResult(seq, Math.floor(Math.max(0, tokens.length - 1) / id.blockSize), r);
    return r;
  }

  /** Overlap for precomputed router seq hashes. */
  queryHashes(id: NamespaceId, hashes: BigUint64Array, now: number, instances?: ReadonlySet<string>): OverlapResult {
    const ns = this.find(id);
    if (!ns) return { queriedBlocks: hashes.length, candidates: [], sharedBlocks: 0 };
    const r = ns.index.query(hashes, now, instances);
    // Without tokens the prompt's last partial block is unknown: every full block may be reused.
    if (ns.groups !== null && !ns.groups.empty) ns.groups.clampResult(hashes, hashes.length, r);
    return r;
  }

  /** Purge one backend (optionally one dp rank) from every namespace of a tenant, or all tenants. */
  removeBackend(backend: string, opts: { dpRank?: number; tenant?: string } = {}): number {
    let n = 0;
    for (const ns of this.spaces.values()) {
      if (opts.tenant !== undefined && ns.id.tenant !== opts.tenant) continue;
      n += ns.index.removeBackend(backend, opts.dpRank);
      ns.groups?.clear(backend, opts.dpRank);
    }
    return n;
  }

  /** Empty one backend's dp rank on every medium in every namespace of a tenant (AllBlocksCleared). */
  clearBackend(backend: string, dpRank: number, tenant: string): number {
    let n = 0;
    for (const ns of this.spaces.values()) {
      if (ns.id.tenant !== tenant) continue;
      n += ns.index.clearBackend(backend, dpRank);
      ns.groups?.clear(backend, dpRank);
    }
    return n;
  }

  /** Empty every event-confirmed holder everywhere (a relay epoch); bookings stay. */
  clearConfirmed(): number {
    let n = 0;
    for (const ns of this.spaces.values()) {
      n += ns.index.clearConfirmed();
      ns.groups?.clearEverything();
    }
    return n;
  }

  /** Declared backend owners (snapshots carry them: consumers need them before events). */
  bindings(): ReadonlyMap<string, string | null> {
    return this.owners;
  }

  /** Purge an instance (its backends and speculative entries) everywhere; forget it. */
  removeInstance(instance: string, opts: { dpRank?: number; tenant?: string } = {}): number {
    let n = 0;
    for (const ns of this.spaces.values()) {
      if (opts.tenant !== undefined && ns.id.tenant !== opts.tenant) continue;
      n += ns.index.removeInstance(instance, opts.dpRank);
      ns.groups?.clearInstance(instance, opts.dpRank);
      if (opts.dpRank === undefined) ns.instances.delete(instance);
    }
    return n;
  }

  /**
   * Forget namespaces that hold no block and serve no instance (what an unregistered publisher's
   * LoRA adapters and salts leave behind), so their tables are freed. Returns how many went.
   */
  dropEmptyNamespaces(): number {
    let n = 0;
    for (const [key, ns] of this.spaces) {
      if (ns.instances.size > 0 || ns.index.holderIds().length > 0) continue;
      this.spaces.delete(key);
      n++;
    }
    if (n > 0) this.gen++; // memos holding a namespace object must look it up again
    return n;
  }

  /** Expire speculative entries everywhere. */
  expire(now: number): number {
    let n = 0;
    for (const ns of this.spaces.values()) n += ns.index.expire(now);
    return n;
  }

  stats(): { namespaces: number; blocks: number; records: number; bytes: number } {
    let blocks = 0;
    let records = 0;
    let bytes = 0;
    for (const ns of this.spaces.values()) {
      const s = ns.index.stats();
      blocks += s.blocks;
      records += s.records;
      bytes += s.bytes;
    }
    return { namespaces: this.spaces.size, blocks, records, bytes };
  }
}
