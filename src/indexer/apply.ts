// Applies normalized KV events to the indexer: stream ordering by event_id, canonical media,
// the dual-key path (re-hash token_ids into router seq hashes, map engine hashes to them), and
// orphan detection. Pure: no I/O, no timers.
import { type HashSpace, seqHashesTransient } from '../hashing/index.js';
import type { BlockIndex } from './block-index.js';
import type { Namespace, NamespaceId } from './namespace.js';
import type { TieredIndexer } from './namespaces.js';
import { canonicalMedium, type Medium } from './tiers.js';
import {
  type ApplyStatus,
  type KvCacheGroup,
  type KvEvent,
  type StoredEvent,
  type StreamIdentity,
  streamIdentityOf,
  type U64List,
} from './kv-event.js';

/** Removals prefetch() loads ahead at most (BlockIndex.prefetchRemovals). */
export const PREFETCH_REMOVALS = 32;

export interface ApplyOptions {
  /** What to do with a stream when its event_id skips ahead: purge its blocks (default) or keep them. */
  onGap?: 'purge' | 'keep';
}

export interface ApplyOutcome {
  status: ApplyStatus;
  /** Blocks added (stored) or removed (removed/cleared/purged). */
  blocks: number;
  reason?: string;
}

export function streamKey(s: StreamIdentity): string {
  return [
    s.model_name,
    s.block_size,
    s.additional_salt ?? '',
    s.lora_name ?? '',
    s.tenant_id,
    s.backend_id,
    canonicalMedium(s.medium) ?? s.medium,
    s.dp_rank,
  ].join('\u0000');
}

/**
 * A resolved stream: its namespace and holder. `id` is a copy of the identity fields, not the event
 * (a memo kept per backend would keep each backend's last event and its token ids alive).
 */
interface StreamMemo {
  id: StreamIdentity;
  medium: Medium;
  ns: Namespace;
  holder: number;
  gen: number;
  key: string | null;
}

/** The index takes packed hashes; the fast decoder already delivers them so (no copy). */
function u64Array(h: U64List): BigUint64Array {
  return h instanceof BigUint64Array ? h : BigUint64Array.from(h);
}

export class EventApplier {
  private readonly lastIds = new Map<string, bigint>();
  readonly counts: Record<ApplyStatus, number> = {
    ok: 0,
    gap: 0,
    replayed: 0,
    orphan: 0,
    decode_error: 0,
    purged: 0,
    rejected: 0,
  };
  private readonly onGap: 'purge' | 'keep';

  constructor(
    private readonly indexer: TieredIndexer,
    opts: ApplyOptions = {},
  ) {
    this.onGap = opts.onGap ?? 'purge';
  }

  /** Apply one event. Never throws for bad content: it is counted and reported instead. */
  apply(ev: KvEvent): ApplyOutcome {
    const out = this.applyInner(ev);
    this.counts[out.status]++;
    return out;
  }

  /** Forget the ordering state of every stream (after the whole index was cleared). */
  resetAllStreams(): void {
    this.lastIds.clear();
  }

  /** Forget ordering state for streams of a backend (after a purge or unregister), optionally one rank and tenant. */
  resetStreams(backend: string, dpRank?: number, tenant?: string): void {
    for (const k of [...this.lastIds.keys()]) {
      const parts = k.split('\u0000');
      if (
        parts[5] === backend &&
        (dpRank === undefined || parts[7] === String(dpRank)) &&
        (tenant === undefined || parts[4] === tenant)
      )
        this.lastIds.delete(k);
    }
  }

  /** The hashes of the removals prefetch() saw ahead, as lo/hi pairs (aheadPairs). */
  private readonly ahead = new BigUint64Array(PREFETCH_REMOVALS);
  private readonly aheadPairs = new Int32Array(this.ahead.buffer);

  /**
   * Load what the removals among events [from, to) of a batch will read (an optimization: no state
   * changes, no counts): removals come one block per event (vLLM's BlockRemoved), so the index cannot
   * overlap their cache misses itself. Only removals of the last applied event's stream are seen
   * (a publisher's batch is mostly one stream); at most 32 blocks.
   */
  prefetch(events: readonly KvEvent[], from: number, to: number): void {
    const m = this.memo;
    if (m === null || m.gen !== this.indexer.generation) return;
    const ahead = this.ahead;
    let k = 0;
    for (let i = from; i < to && k < PREFETCH_REMOVALS; i++) {
      const ev = events[i];
      if (ev.event_type !== 'removed' || ev.group !== undefined || !this.sameStream(m.id, ev)) continue;
      const hs = ev.seq_hashes;
      for (let j = 0; j < hs.length && k < PREFETCH_REMOVALS; j++) {
        // A hint must never throw (a malformed list is the apply's to reject).
        const x = hs[j];
        if (typeof x === 'bigint') ahead[k++] = x;
      }
    }
    if (k > 1) m.ns.index.prefetchRemovals(m.holder, this.aheadPairs, k);
  }

  // The stream of the previous event: consecutive events of one publisher share it, and resolving
  // namespace and holder (string keys, map lookups) is most of the per-event cost.
  private memo: StreamMemo | null = null;
  /**
   * The last stream of each backend, for publishers whose batches interleave (a router of 1,024
   * engines: the previous event's stream was mostly another engine's). Valid for one generation.
   */
  private readonly memos = new Map<string, StreamMemo>();
  private memosGen = -1;

  private sameStream(a: StreamIdentity, b: StreamIdentity): boolean {
    return (
      a.backend_id === b.backend_id &&
      a.dp_rank === b.dp_rank &&
      a.medium === b.medium &&
      a.model_name === b.model_name &&
      a.block_size === b.block_size &&
      a.tenant_id === b.tenant_id &&
      a.lora_name === b.lora_name &&
      a.additional_salt === b.additional_salt
    );
  }

  private applyInner(ev: KvEvent): ApplyOutcome {
    let medium: Medium;
    let ns: Namespace;
    let holder: number;
    const gen = this.indexer.generation;
    let m = this.memo;
    if (m === null || m.gen !== gen || !this.sameStream(m.id, ev)) {
      const b = this.memos.get(ev.backend_id);
      m = b !== undefined && b.gen === gen && this.sameStream(b.id, ev) ? b : null;
      if (m !== null) {
        // As a resolution would: the owner serves the namespace again (forget() may have dropped it).
        const owner = this.indexer.ownerOf(ev.backend_id);
        if (owner !== null) m.ns.instances.add(owner);
      }
    }
    if (m !== null) {
      this.memo = m;
      medium = m.medium;
      ns = m.ns;
      holder = m.holder;
    } else {
      const canon = canonicalMedium(ev.medium);
      if (canon === null) return { status: 'rejected', blocks: 0, reason: `unknown medium ${ev.medium}` };
      if (!Number.isInteger(ev.block_size) || ev.block_size <= 0) {
        return { status: 'rejected', blocks: 0, reason: 'block_size must be a positive integer' };
      }
      medium = canon;
      ns = this.indexer.namespace({
        model: ev.model_name,
        blockSize: ev.block_size,
        loraName: ev.lora_name,
        salt: ev.additional_salt,
        tenant: ev.tenant_id,
      });
      const owner = this.indexer.ownerOf(ev.backend_id);
      if (owner !== null) ns.instances.add(owner);
      holder = ns.index.holder(ev.backend_id, ev.dp_rank, medium);
      m = { id: streamIdentityOf(ev), medium, ns, holder, gen, key: null };
      this.memo = m;
      if (this.memosGen !== gen) {
        this.memos.clear();
        this.memosGen = gen;
      }
      this.memos.set(ev.backend_id, m);
    }

    // Ordering: consecutive event_id per stream. Regression = publisher restart.
    let status: ApplyStatus = 'ok';
    let purged = 0;
    if (ev.event_id !== null) {
      // The memo's stream is this event's: its key (a joined string) is built once per stream run.
      const key = (m.key ??= streamKey(ev));
      const last = this.lastIds.get(key);
      if (last !== undefined && ev.event_id !== last + 1n) {
        if (ev.event_id <= last) {
          purged = this.clearStream(ns, holder, ev.backend_id, ev.dp_rank, medium);
          status = 'purged';
        } else {
          status = 'gap';
          if (this.onGap === 'purge') purged = this.clearStream(ns, holder, ev.backend_id, ev.dp_rank, medium);
        }
      }
      this.lastIds.set(key, ev.event_id);
    }

    switch (ev.event_type) {
      case 'cleared': {
        // vLLM's AllBlocksCleared covers every namespace (LoRA, salt) of the engine, not only those
        // the decoder fanned the event out to.
        const n =
          ev.medium === null
            ? this.indexer.clearBackend(ev.backend_id, ev.dp_rank, ev.tenant_id)
            : this.clearStream(ns, holder, ev.backend_id, ev.dp_rank, medium);
        return { status, blocks: n + purged };
      }
      case 'removed': {
        if (ev.group !== undefined) {
          const n = this.indexer.groupAware
            ? (ns.groups?.remove(ev.backend_id, ev.dp_rank, medium, ev.group.idx, ev.seq_hashes) ?? 0)
            : 0;
          return { status, blocks: n };
        }
        const n = ns.index.remove(holder, u64Array(ev.seq_hashes));
        return { status, blocks: n };
      }
      case 'stored':
        if (ev.group !== undefined)
          return this.indexer.groupAware
            ? this.storeGroup(ev, ev.group, ns, holder, medium, status)
            : { status, blocks: 0, reason: 'kv_cache_groups: full_attention' };
        return this.store(ev, ns.index, ns.space, holder, status);
    }
  }

  /** Empty one stream's holder and its secondary groups on that medium. */
  private clearStream(ns: Namespace, holder: number, backend: string, dpRank: number, medium: Medium): number {
    ns.groups?.clear(backend, dpRank, medium);
    return ns.index.clearHolder(holder);
  }

  /**
   * A secondary KV-cache group's blocks (hybrid models): re-hashed like the prefix's, their parent
   * resolved through the prefix index (the full-attention group stored the same engine hashes) or
   * the group's own blocks, and kept beside the index (groups.ts).
   */
  private storeGroup(
    ev: StoredEvent,
    group: KvCacheGroup,
    ns: Namespace,
    holder: number,
    medium: Medium,
    status: ApplyStatus,
  ): ApplyOutcome {
    const n = ev.seq_hashes.length;
    if (n === 0) return { status, blocks: 0 };
    const bs = ev.block_size;
    if (ev.token_ids === null || ev.token_ids.length < n * bs)
      return { status: 'rejected', blocks: 0, reason: `group ${group.idx}: token_ids do not cover ${n} blocks` };
    let parent: bigint | null = null;
    let target = ns;
    if (ev.parent_hash !== null) {
      parent =
        ns.index.resolve(holder, ev.parent_hash) ??
        ns.groups?.resolve(ev.backend_id, ev.dp_rank, ev.parent_hash) ??
        null;
      if (parent === null) {
        const moved = this.parentElsewhere(ev);
        if (moved === null) return { status: 'orphan', blocks: 0, reason: 'parent block not found' };
        parent = moved.parent;
        target = this.indexer.namespace(moved.id);
      }
    } else if (ev.base_block_idx !== null && ev.base_block_idx > 0) {
      return { status: 'orphan', blocks: 0, reason: 'no parent_hash for a block below the root' };
    }
    let router: BigUint64Array;
    try {
      const t = ev.token_ids;
      const tokens = t.length === n * bs ? t : t instanceof Uint32Array ? t.subarray(0, n * bs) : t.slice(0, n * bs);
      router = seqHashesTransient(tokens, bs, target.space, parent).slice();
    } catch (err) {
      return { status: 'rejected', blocks: 0, reason: (err as Error).message };
    }
    const owner = this.indexer.ownerOf(ev.backend_id);
    const blocks = target
      .hybridGroups()
      .store(ev.backend_id, owner, ev.dp_rank, medium, group, bs, router, ev.seq_hashes);
    return { status, blocks };
  }

  private parentElsewhere(
    ev: StoredEvent,
  ): { index: BlockIndex; space: HashSpace; id: NamespaceId; parent: bigint } | null {
    for (const ns of this.indexer.namespaces()) {
      const id = ns.id;
      if (
        id.model !== ev.model_name ||
        id.blockSize !== ev.block_size ||
        id.tenant !== ev.tenant_id ||
        id.loraName !== (ev.lora_name || null)
      )
        continue;
      if (id.salt === (ev.additional_salt || null)) continue;
      const parent = ns.index.resolveBackend(ev.backend_id, ev.dp_rank, ev.parent_hash!);
      if (parent !== null) return { index: ns.index, space: ns.space, id, parent };
    }
    return null;
  }

  private store(
    ev: StoredEvent,
    index: BlockIndex,
    space: HashSpace,
    holder: number,
    status: ApplyStatus,
    knownParent: bigint | null = null,
  ): ApplyOutcome {
    const n = ev.seq_hashes.length;
    if (n === 0) return { status, blocks: 0 };
    const published = u64Array(ev.seq_hashes);
    if (ev.token_ids === null) {
      // Standard publisher: its hashes are router seq hashes already (its parent's too).
      return { status, blocks: index.store(holder, published, null, 0, ev.parent_hash) };
    }
    const bs = ev.block_size;
    if (ev.token_ids.length < n * bs) {
      return {
        status: 'rejected',
        blocks: 0,
        reason: `token_ids holds ${ev.token_ids.length} tokens, ${n} blocks of ${bs} need ${n * bs}`,
      };
    }
    let parent: bigint | null = knownParent;
    if (ev.parent_hash !== null && parent === null) {
      parent = index.resolve(holder, ev.parent_hash);
      if (parent === null) {
        // The chain may have started in another namespace of this backend: vLLM names a request's
        // cache_salt on block 0 only, so later blocks follow their parent into its namespace.
        const moved = this.parentElsewhere(ev);
        if (moved)
          return this.store(
            { ...ev, additional_salt: moved.id.salt, parent_hash: ev.parent_hash },
            moved.index,
            moved.space,
            moved.index.holder(ev.backend_id, ev.dp_rank, canonicalMedium(ev.medium)!),
            status,
            moved.parent,
          );
        return { status: 'orphan', blocks: 0, reason: 'parent block not found' };
      }
    } else if (ev.base_block_idx !== null && ev.base_block_idx > 0) {
      return { status: 'orphan', blocks: 0, reason: 'no parent_hash for a block below the root' };
    }
    let router: BigUint64Array;
    try {
      const t = ev.token_ids;
      const tokens = t.length === n * bs ? t : t instanceof Uint32Array ? t.subarray(0, n * bs) : t.slice(0, n * bs);
      // Consumed by index.store below before any other hashing call.
      router = seqHashesTransient(tokens, bs, space, parent);
    } catch (err) {
      return { status: 'rejected', blocks: 0, reason: (err as Error).message };
    }
    return { status, blocks: index.store(holder, router, published, 0, parent) };
  }
}
