// Mooncake adapter: the standardized KV Events API (Mooncake Conductor RFC #1527) as msgpack maps:
// `event_type` stored|removed|cleared (legacy alias `type`), `seq_hashes` (legacy `block_hashes`),
// `base_block_idx`, `parent_hash`, `token_ids` (null = the hashes already follow the router standard),
// and the envelope (event_id, timestamp ms, model_name, block_size, additional_salt, lora_name,
// tenant_id, backend_id, medium, dp_rank). Fields an event leaves out come from the registration.
// A vLLM-tagged event on a Mooncake stream (type "BlockStored", ...) goes to the vLLM adapter.
import type { ClearedEvent, RemovedEvent, StoredEvent } from '../model.js';
import type { DecodeContext } from './context.js';
import { CLEARED_TAGS, REMOVED_TAGS, STORED_TAGS } from './engine-event.js';
import type { BatchInfo, Normalized } from './normalize.js';
import { decodeVllmEvent } from './vllm.js';
import { hashList, isRecord, optBlockSize, optHash, optNumber, optString, optU64, optUint, tokenList } from './values.js';

function field<T>(rec: Record<string, unknown>, key: string, read: (v: unknown) => T | null | undefined, fallback: T): T | undefined {
  if (!(key in rec) || rec[key] === undefined) return fallback;
  const v = read(rec[key]);
  return v === null ? fallback : v;
}

/** Like `field`, but an explicit null is kept (lora_name null = base model, salt null = none). */
function nullable(rec: Record<string, unknown>, key: string, fallback: string | null): string | null | undefined {
  if (!(key in rec)) return fallback;
  const v = optString(rec[key]);
  return v === '' ? null : v;
}

export function decodeMooncakeEvent(raw: unknown, ctx: DecodeContext, b: BatchInfo): Normalized {
  if (Array.isArray(raw)) return decodeVllmEvent(raw, ctx, b);
  if (!isRecord(raw)) return { error: 'event is not a map' };
  const type = raw.event_type ?? raw.type;
  if (typeof type !== 'string') return { error: 'event without event_type' };
  if (STORED_TAGS.has(type) || REMOVED_TAGS.has(type) || CLEARED_TAGS.has(type)) return decodeVllmEvent(raw, ctx, b);
  const kind = type.toLowerCase();
  if (kind !== 'stored' && kind !== 'removed' && kind !== 'cleared') return { skip: `unknown event_type ${type.slice(0, 64)}` };

  const reg = ctx.reg;
  const eventId = optU64(raw.event_id);
  const timestamp = optNumber(raw.timestamp);
  const model = field(raw, 'model_name', optString, reg.model);
  const blockSize = field(raw, 'block_size', optBlockSize, reg.blockSize);
  const salt = nullable(raw, 'additional_salt', reg.additionalSalt || null);
  const lora = nullable(raw, 'lora_name', reg.loraName || null);
  const tenant = field(raw, 'tenant_id', optString, reg.tenant);
  const backend = field(raw, 'backend_id', optString, reg.backendId);
  const medium = optString(raw.medium);
  const dpRank = field(raw, 'dp_rank', optUint, b.dpRank);
  if (eventId === undefined) return { error: 'event_id is not a u64' };
  if (timestamp === undefined) return { error: 'timestamp is not a number' };
  if (model === undefined || tenant === undefined || backend === undefined) return { error: 'model_name, tenant_id and backend_id must be strings' };
  if (blockSize === undefined) return { error: 'block_size is not a positive integer' };
  if (salt === undefined || lora === undefined || medium === undefined) return { error: 'additional_salt, lora_name and medium must be strings or null' };
  if (dpRank === undefined) return { error: 'dp_rank is not an integer' };

  // Envelope written out per event type (object spreads are several times slower on this path).
  const med = medium === '' ? null : medium;
  const ts = timestamp ?? b.tsMs;
  if (kind === 'cleared') {
    const ev: ClearedEvent = { model_name: model, block_size: blockSize, additional_salt: salt, lora_name: lora, tenant_id: tenant, backend_id: backend, medium: med, dp_rank: dpRank, event_id: eventId, timestamp: ts, event_type: 'cleared' };
    return [ev];
  }
  const hashes = hashList(raw.seq_hashes ?? raw.block_hashes);
  if (hashes === undefined) return { error: 'seq_hashes is not a list of u64 hashes' };
  const baseIdx = optUint(raw.base_block_idx);
  if (baseIdx === undefined) return { error: 'base_block_idx is not an integer' };
  if (kind === 'removed') {
    const ev: RemovedEvent = { model_name: model, block_size: blockSize, additional_salt: salt, lora_name: lora, tenant_id: tenant, backend_id: backend, medium: med, dp_rank: dpRank, event_id: eventId, timestamp: ts, event_type: 'removed', seq_hashes: hashes, base_block_idx: baseIdx };
    return [ev];
  }
  const parent = optHash(raw.parent_hash ?? raw.parent_block_hash);
  if (parent === undefined) return { error: 'parent_hash is not a u64' };
  let tokens: number[] | null = null;
  if (raw.token_ids !== null && raw.token_ids !== undefined) {
    const t = tokenList(raw.token_ids);
    if (t === undefined) return { error: 'token_ids is not a list of u32' };
    tokens = t.tokens;
  }
  const ev: StoredEvent = {
    model_name: model,
    block_size: blockSize,
    additional_salt: salt,
    lora_name: lora,
    tenant_id: tenant,
    backend_id: backend,
    medium: med,
    dp_rank: dpRank,
    event_id: eventId,
    timestamp: ts,
    event_type: 'stored',
    seq_hashes: hashes,
    base_block_idx: baseIdx,
    parent_hash: parent,
    token_ids: tokens,
  };
  return [ev];
}
