// Relayed KV-event messages (`kvrouter relay` -> JetStream -> routers). One JetStream message holds
// an ordered batch of operations; the relay's index is exactly what applying them in stream order
// builds. Hashes travel as packed u64 (seq_hashes) or decimal strings (parent_hash, event_id).
import {
  type KvCacheGroup,
  type KvEvent,
  type StoredEvent,
  type RemovedEvent,
  streamIdentityOf,
} from '../indexer/kv-event.js';
import { asObj, int, type Obj, optStr, packU64, str, unpackU64 } from './codec.js';

export type RelayedOp =
  | { op: 'event'; event: KvEvent }
  /** A listener purge (gap, restart, disconnect) or an unregister: IndexWriter.purge. */
  | { op: 'remove_backend'; backend: string; dpRank: number | null; tenant: string | null }
  | { op: 'remove_instance'; instance: string; dpRank: number | null; tenant: string | null }
  /** IndexWriter.bind (shared pools, backends owned by another instance id). */
  | { op: 'bind'; backend: string; instance: string | null }
  /**
   * Everything before this point is void: consumers clear the relayed index. `start`/`reset`: the
   * relay (re)started with an empty index. `resync`: publishes were lost; a snapshot stored under
   * this message's stream sequence holds the relay's index, consumers restore it.
   */
  | { op: 'epoch'; reason: 'start' | 'reset' | 'resync' };

export interface RelayedBatch {
  relay: string;
  ops: RelayedOp[];
}

const enc = new TextEncoder();
const dec = new TextDecoder();

function eventToWire(e: KvEvent): Obj {
  // Object.assign onto a fresh literal, not a leading spread plus keys (V8's slow path on Node 20).
  const base: Obj = Object.assign(streamIdentityOf(e), {
    type: e.event_type,
    event_id: e.event_id === null ? null : e.event_id.toString(),
    timestamp: e.timestamp,
  });
  switch (e.event_type) {
    case 'stored':
      Object.assign(base, {
        seq_hashes: packU64(e.seq_hashes),
        base_block_idx: e.base_block_idx,
        parent_hash: e.parent_hash === null ? null : e.parent_hash.toString(),
        // Plain array: JSON would render a Uint32Array as an object.
        token_ids: e.token_ids === null || Array.isArray(e.token_ids) ? e.token_ids : Array.from(e.token_ids),
      });
      // A hybrid model's sliding-window / Mamba group (absent: full attention).
      if (e.group) base.group = groupToWire(e.group);
      return base;
    case 'removed':
      Object.assign(base, { seq_hashes: packU64(e.seq_hashes), base_block_idx: e.base_block_idx });
      if (e.group) base.group = groupToWire(e.group);
      return base;
    case 'cleared':
      return base;
  }
}

function groupToWire(g: KvCacheGroup): Obj {
  return { idx: g.idx, kind: g.kind, window: g.window, block_size: g.blockSize };
}

function groupFromWire(v: unknown): KvCacheGroup | null {
  if (v === undefined || v === null) return null;
  const g = asObj(v, 'group');
  const kind = str(g, 'kind');
  if (kind !== 'sliding_window' && kind !== 'mamba') throw new Error(`unknown KV-cache group kind ${kind}`);
  return { idx: int(g, 'idx'), kind, window: int(g, 'window'), blockSize: int(g, 'block_size', 1) };
}

const optBig = (o: Obj, k: string): bigint | null => {
  const v = optStr(o, k);
  return v === null ? null : BigInt(v);
};
const optInt = (o: Obj, k: string): number | null => (o[k] === null || o[k] === undefined ? null : int(o, k));

function eventFromWire(o: Obj): KvEvent {
  // One literal per type (no spread of a shared base: V8's slow path), hashes kept as the typed
  // array they unpack into (a bigint per value made this a third of a batch's decode).
  const model_name = str(o, 'model_name');
  const block_size = int(o, 'block_size', 1);
  const additional_salt = optStr(o, 'additional_salt');
  const lora_name = optStr(o, 'lora_name');
  const tenant_id = str(o, 'tenant_id');
  const backend_id = str(o, 'backend_id');
  const medium = optStr(o, 'medium');
  const dp_rank = int(o, 'dp_rank');
  const event_id = optBig(o, 'event_id');
  const timestamp = typeof o.timestamp === 'number' ? o.timestamp : null;
  switch (o.type) {
    case 'stored': {
      const t = o.token_ids;
      if (t !== null && !Array.isArray(t)) throw new Error('token_ids must be an array or null');
      const ev: StoredEvent = {
        model_name,
        block_size,
        additional_salt,
        lora_name,
        tenant_id,
        backend_id,
        medium,
        dp_rank,
        event_id,
        timestamp,
        event_type: 'stored',
        seq_hashes: unpackU64(str(o, 'seq_hashes')),
        base_block_idx: optInt(o, 'base_block_idx'),
        parent_hash: optBig(o, 'parent_hash'),
        token_ids: t as number[] | null,
      };
      const group = groupFromWire(o.group);
      if (group) ev.group = group;
      return ev;
    }
    case 'removed': {
      const ev: RemovedEvent = {
        model_name,
        block_size,
        additional_salt,
        lora_name,
        tenant_id,
        backend_id,
        medium,
        dp_rank,
        event_id,
        timestamp,
        event_type: 'removed',
        seq_hashes: unpackU64(str(o, 'seq_hashes')),
        base_block_idx: optInt(o, 'base_block_idx'),
      };
      const group = groupFromWire(o.group);
      if (group) ev.group = group;
      return ev;
    }
    case 'cleared':
      return {
        model_name,
        block_size,
        additional_salt,
        lora_name,
        tenant_id,
        backend_id,
        medium,
        dp_rank,
        event_id,
        timestamp,
        event_type: 'cleared',
      };
    default:
      throw new Error(`unknown event type ${String(o.type)}`);
  }
}

function opToWire(op: RelayedOp): Obj {
  switch (op.op) {
    case 'event':
      return { op: 'event', event: eventToWire(op.event) };
    case 'remove_backend':
      return { op: op.op, backend: op.backend, dp_rank: op.dpRank, tenant: op.tenant };
    case 'remove_instance':
      return { op: op.op, instance: op.instance, dp_rank: op.dpRank, tenant: op.tenant };
    case 'bind':
      return { op: op.op, backend: op.backend, instance: op.instance };
    case 'epoch':
      return { op: op.op, reason: op.reason };
  }
}

function opFromWire(v: unknown): RelayedOp {
  const o = asObj(v, 'op');
  switch (o.op) {
    case 'event':
      return { op: 'event', event: eventFromWire(asObj(o.event, 'event')) };
    case 'remove_backend':
      return {
        op: 'remove_backend',
        backend: str(o, 'backend'),
        dpRank: optInt(o, 'dp_rank'),
        tenant: optStr(o, 'tenant'),
      };
    case 'remove_instance':
      return {
        op: 'remove_instance',
        instance: str(o, 'instance'),
        dpRank: optInt(o, 'dp_rank'),
        tenant: optStr(o, 'tenant'),
      };
    case 'bind':
      return { op: 'bind', backend: str(o, 'backend'), instance: optStr(o, 'instance') };
    case 'epoch': {
      const r = o.reason;
      if (r !== 'start' && r !== 'reset' && r !== 'resync') throw new Error(`unknown epoch reason ${String(r)}`);
      return { op: 'epoch', reason: r };
    }
    default:
      throw new Error(`unknown op ${String(o.op)}`);
  }
}

/** Serialize one op (the relay batches serialized ops, tracking their size). */
export const encodeOp = (op: RelayedOp): string => JSON.stringify(opToWire(op));

export function encodeBatch(relay: string, encodedOps: readonly string[]): Uint8Array {
  return enc.encode(`{"v":1,"relay":${JSON.stringify(relay)},"ops":[${encodedOps.join(',')}]}`);
}

export function decodeBatch(data: Uint8Array): RelayedBatch {
  const o = asObj(JSON.parse(dec.decode(data)), 'batch');
  if (o.v !== 1) throw new Error(`unsupported relayed batch version ${String(o.v)}`);
  if (!Array.isArray(o.ops)) throw new Error('ops must be an array');
  return { relay: str(o, 'relay'), ops: o.ops.map(opFromWire) };
}
