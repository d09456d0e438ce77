// Dump and restore of the whole index (GET /dump, peer recovery, JetStream snapshots).
// Hashes stay bigint; serialize with stringifyJson so they are exact integers on the wire.
import { toU64 } from '../common/u64.js';
import type { GroupSnapshot } from './groups.js';
import { canonicalMedium, type Medium } from './tiers.js';
import type { TieredIndexer } from './namespaces.js';

export interface SnapshotHolder {
  backend_id: string;
  /** Owner when dumped: an instance id, or null for a shared pool. */
  instance_id: string | null;
  dp_rank: number;
  medium: Medium;
  /** TTL class of a speculative holder (ms); absent for event-confirmed blocks. */
  speculative_ttl_ms?: number;
  /** Router seq hashes in insertion order. */
  seq_hashes: bigint[];
  /** Engine-native hashes for the same blocks (null where equal to the router hash). */
  engine_hashes?: Array<bigint | null>;
  /** Absolute expiry (ms since epoch) per block for speculative holders. */
  expires_at?: number[];
}

export interface SnapshotNamespace {
  model: string;
  block_size: number;
  lora_name: string | null;
  salt: string | null;
  tenant_id: string;
  instances: string[];
  holders: SnapshotHolder[];
  /** Hybrid instances' sliding-window and Mamba groups (src/indexer/groups.ts); absent when none. */
  groups?: GroupSnapshot[];
}

export interface IndexSnapshot {
  version: 1;
  created_at: number;
  namespaces: SnapshotNamespace[];
}

export function dumpIndex(indexer: TieredIndexer, now: number): IndexSnapshot {
  const namespaces: SnapshotNamespace[] = [];
  for (const ns of indexer.namespaces()) {
    const holders: SnapshotHolder[] = [];
    for (const h of ns.index.holderIds()) {
      const info = ns.index.holderInfo(h);
      const blocks = ns.index.holderBlocks(h).filter((b) => b.expiresAt === 0 || b.expiresAt > now);
      if (blocks.length === 0) continue;
      const out: SnapshotHolder = {
        backend_id: info.backend,
        instance_id: info.instance,
        dp_rank: info.dpRank,
        medium: info.medium,
        seq_hashes: blocks.map((b) => b.hash),
      };
      if (blocks.some((b) => b.engineHash !== null)) out.engine_hashes = blocks.map((b) => b.engineHash);
      if (info.speculative) {
        out.speculative_ttl_ms = ns.index.speculativeTtl(h);
        out.expires_at = blocks.map((b) => b.expiresAt);
      }
      holders.push(out);
    }
    const entry: SnapshotNamespace = {
      model: ns.id.model,
      block_size: ns.id.blockSize,
      lora_name: ns.id.loraName,
      salt: ns.id.salt,
      tenant_id: ns.id.tenant,
      instances: [...ns.instances],
      holders,
    };
    const groups = ns.groups?.dump() ?? [];
    if (groups.length > 0) entry.groups = groups;
    namespaces.push(entry);
  }
  return { version: 1, created_at: now, namespaces };
}

/** A hash from a parsed dump: JSON gives small values as numbers and large ones as bigint. */
function hash(v: unknown): bigint {
  const h = toU64(v);
  if (h === null) throw new Error(`snapshot holds an invalid u64 hash: ${String(v)}`);
  return h;
}

/**
 * Apply a snapshot on top of the current index (stores are idempotent). Returns blocks added.
 * Accepts a snapshot parsed from JSON (hashes as numbers, bigints or decimal strings).
 */
export function restoreIndex(indexer: TieredIndexer, snap: IndexSnapshot, now: number): number {
  let added = 0;
  for (const s of snap.namespaces) {
    const ns = indexer.namespace({
      model: s.model,
      blockSize: s.block_size,
      loraName: s.lora_name,
      salt: s.salt,
      tenant: s.tenant_id,
    });
    for (const i of s.instances) ns.instances.add(i);
    for (const h of s.holders) {
      const medium = canonicalMedium(h.medium);
      if (medium === null) throw new Error(`snapshot holds an unknown medium: ${String(h.medium)}`);
      if (h.speculative_ttl_ms !== undefined) {
        if (h.instance_id === null) continue;
        const holder = ns.index.speculativeHolder(h.instance_id, h.dp_rank, h.speculative_ttl_ms);
        h.seq_hashes.forEach((v, i) => {
          const exp = h.expires_at?.[i] ?? 0;
          if (exp > now) added += ns.index.store(holder, BigUint64Array.of(hash(v)), null, exp);
        });
        continue;
      }
      if (indexer.ownerOf(h.backend_id) !== h.instance_id) indexer.bindBackend(h.backend_id, h.instance_id);
      const holder = ns.index.holder(h.backend_id, h.dp_rank, medium);
      const seq = BigUint64Array.from(h.seq_hashes, hash);
      const eng = h.engine_hashes ? BigUint64Array.from(h.engine_hashes, (e, i) => hash(e ?? h.seq_hashes[i])) : null;
      added += ns.index.store(holder, seq, eng);
    }
    if (indexer.groupAware)
      for (const g of s.groups ?? []) {
        if (g.group.kind !== 'sliding_window' && g.group.kind !== 'mamba')
          throw new Error(`snapshot holds an unknown KV-cache group kind: ${String(g.group.kind)}`);
        added += ns.hybridGroups().restore(
          {
            ...g,
            seq_hashes: g.seq_hashes.map(hash),
            engine_hashes: g.engine_hashes.map(hash),
            engine_seq_hashes: g.engine_seq_hashes.map(hash),
            tiers: g.tiers.map(Number),
          },
          s.block_size,
        );
      }
  }
  return added;
}
