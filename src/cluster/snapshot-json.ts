// IndexSnapshot from lossless JSON (a peer's GET /dump, a JetStream snapshot object). parseJson
// yields bigint only for integers beyond 2^53; smaller hashes arrive as exact numbers and are
// widened here, so restoreIndex always gets bigint hashes.
import type { JsonValue } from '../common/json.js';
import { ANY_TIERS, type GroupSnapshot } from '../indexer/groups.js';
import { MEDIA, type Medium } from '../indexer/tiers.js';
import type { IndexSnapshot, SnapshotHolder, SnapshotNamespace } from '../indexer/snapshot.js';
import { asObj, int, type Obj, optStr, str } from './codec.js';

function u64(v: unknown, what: string): bigint {
  if (typeof v === 'bigint' && v >= 0n && v < 1n << 64n) return v;
  if (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0) return BigInt(v);
  throw new Error(`${what} must be an unsigned 64-bit integer`);
}

function list(o: Obj, k: string): unknown[] {
  const v = o[k];
  if (!Array.isArray(v)) throw new Error(`${k} must be an array`);
  return v;
}

function holder(v: unknown): SnapshotHolder {
  const o = asObj(v, 'holder');
  const medium = str(o, 'medium');
  if (!(MEDIA as readonly string[]).includes(medium)) throw new Error(`unknown medium ${medium}`);
  const h: SnapshotHolder = {
    backend_id: str(o, 'backend_id'),
    instance_id: optStr(o, 'instance_id'),
    dp_rank: int(o, 'dp_rank'),
    medium: medium as Medium,
    seq_hashes: list(o, 'seq_hashes').map((x) => u64(x, 'seq_hashes[]')),
  };
  if (o.engine_hashes !== undefined)
    h.engine_hashes = list(o, 'engine_hashes').map((x) => (x === null ? null : u64(x, 'engine_hashes[]')));
  if (o.speculative_ttl_ms !== undefined) h.speculative_ttl_ms = int(o, 'speculative_ttl_ms');
  if (o.expires_at !== undefined)
    h.expires_at = list(o, 'expires_at').map((x) => (typeof x === 'number' ? x : Number(x)));
  return h;
}

/**
 * A hybrid instance's sliding-window / Mamba group (src/indexer/groups.ts): its spec decides how far
 * back a hit's window reaches, so it is checked as strictly as an engine's event.
 */
function groupSnapshot(v: unknown): GroupSnapshot {
  const o = asObj(v, 'groups[]');
  const spec = asObj(o.group, 'group');
  const kind = str(spec, 'kind');
  if (kind !== 'sliding_window' && kind !== 'mamba') throw new Error(`unknown KV-cache group kind ${kind}`);
  const seq = list(o, 'seq_hashes').map((x) => u64(x, 'seq_hashes[]'));
  const tiers = list(o, 'tiers').map((x) => {
    if (typeof x !== 'number' || !Number.isInteger(x) || x < 0 || (x & ~ANY_TIERS) !== 0)
      throw new Error('tiers[] must be tier bits');
    return x;
  });
  const engine = list(o, 'engine_hashes').map((x) => u64(x, 'engine_hashes[]'));
  const engineSeq = list(o, 'engine_seq_hashes').map((x) => u64(x, 'engine_seq_hashes[]'));
  if (tiers.length !== seq.length) throw new Error('tiers must have one entry per seq hash');
  if (engineSeq.length !== engine.length) throw new Error('engine_seq_hashes must have one entry per engine hash');
  return {
    backend_id: str(o, 'backend_id'),
    instance_id: optStr(o, 'instance_id'),
    dp_rank: int(o, 'dp_rank'),
    group: {
      idx: int(spec, 'idx'),
      kind,
      window: kind === 'sliding_window' ? int(spec, 'window', 1) : 0,
      blockSize: int(spec, 'blockSize', 1),
    },
    seq_hashes: seq,
    tiers,
    engine_hashes: engine,
    engine_seq_hashes: engineSeq,
  };
}

function namespace(v: unknown): SnapshotNamespace {
  const o = asObj(v, 'namespace');
  const ns: SnapshotNamespace = {
    model: str(o, 'model'),
    block_size: int(o, 'block_size', 1),
    lora_name: optStr(o, 'lora_name'),
    salt: optStr(o, 'salt'),
    tenant_id: str(o, 'tenant_id'),
    instances: list(o, 'instances').map((x) => {
      if (typeof x !== 'string') throw new Error('instances[] must be strings');
      return x;
    }),
    holders: list(o, 'holders').map(holder),
  };
  // Absent in dumps from before hybrid groups (and from routers without any).
  if (o.groups !== undefined) ns.groups = list(o, 'groups').map(groupSnapshot);
  return ns;
}

/** Validate and normalize a dump; throws with the first problem. */
export function indexSnapshotFromJson(v: JsonValue): IndexSnapshot {
  const o = asObj(v, 'snapshot');
  if (o.version !== 1) throw new Error(`unsupported snapshot version ${String(o.version)}`);
  return {
    version: 1,
    created_at: typeof o.created_at === 'number' ? o.created_at : 0,
    namespaces: list(o, 'namespaces').map(namespace),
  };
}
