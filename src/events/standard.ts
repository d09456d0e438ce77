// The standardized KV event (Mooncake Conductor "KV Events API", RFC #1527) from a plain object:
// JSON bodies of POST /events and msgpack maps from Mooncake publishers share this reader.
// Registration context fills what a publisher leaves out (Mooncake's store never stamps model,
// block size, LoRA or dp rank).
import { toU64 } from '../common/u64.js';
import type { KvEvent, U32List, U64List } from '../indexer/kv-event.js';

export interface EventDefaults {
  model_name?: string;
  block_size?: number;
  additional_salt?: string | null;
  lora_name?: string | null;
  tenant_id?: string;
  backend_id?: string;
  medium?: string | null;
  dp_rank?: number;
}

export type ParseResult = { ok: true; event: KvEvent } | { ok: false; field: string; message: string };

type Failure = Extract<ParseResult, { ok: false }>;

const fail = (field: string, message: string): Failure => ({ ok: false, field, message });

type Obj = Record<string, unknown>;

function optStr(o: Obj, names: string[], def: string | null): string | null | Error {
  for (const n of names) {
    const v = o[n];
    if (v === undefined || v === null) continue;
    if (typeof v !== 'string') return new Error(n);
    return v;
  }
  return def;
}

function optInt(o: Obj, name: string, def: number | null, max: number): number | null | Error {
  const v = o[name];
  if (v === undefined || v === null) return def;
  const n = typeof v === 'bigint' ? Number(v) : v;
  if (typeof n !== 'number' || !Number.isInteger(n) || n < 0 || n > max) return new Error(name);
  return n;
}

const MAX_BLOCKS_PER_EVENT = 1 << 20;

const isFailure = (x: unknown): x is Failure =>
  typeof x === 'object' && x !== null && (x as { ok?: unknown }).ok === false;

/** seq_hashes (or block_hashes): packed u64s from the fast msgpack decoder, or a list read one by one. */
function readSeqHashes(o: Obj): U64List | Failure {
  const hashesRaw = o.seq_hashes ?? o.block_hashes;
  const hashField = o.seq_hashes !== undefined ? 'seq_hashes' : 'block_hashes';
  const packed = hashesRaw instanceof BigUint64Array; // from the fast msgpack decoder: valid u64s
  if (!packed && !Array.isArray(hashesRaw)) return fail('seq_hashes', 'is required and must be an array');
  if (hashesRaw.length > MAX_BLOCKS_PER_EVENT) return fail(hashField, 'holds too many hashes');
  if (packed) return hashesRaw;
  const list: bigint[] = [];
  for (let i = 0; i < hashesRaw.length; i++) {
    const h = toU64(hashesRaw[i]);
    if (h === null) return fail(`${hashField}[${i}]`, 'must be a u64');
    list.push(h);
  }
  return list;
}

/** token_ids: packed u32s, a list read one by one, or null; at most `maxTokens`. */
function readTokenIds(o: Obj, maxTokens: number): U32List | null | Failure {
  const rawTokens = o.token_ids;
  if (rawTokens instanceof Uint32Array) {
    if (rawTokens.length > maxTokens) return fail('token_ids', `holds more than ${maxTokens} tokens`);
    return rawTokens;
  }
  if (rawTokens !== undefined && rawTokens !== null) {
    if (!Array.isArray(rawTokens)) return fail('token_ids', 'must be an array of u32 or null');
    if (rawTokens.length > maxTokens) return fail('token_ids', `holds more than ${maxTokens} tokens`);
    const list = new Array<number>(rawTokens.length);
    for (let i = 0; i < rawTokens.length; i++) {
      const x: unknown = rawTokens[i];
      if (typeof x !== 'number' || !Number.isInteger(x) || x < 0 || x > 0xffffffff)
        return fail(`token_ids[${i}]`, 'must be a u32');
      list[i] = x;
    }
    return list;
  }
  return null;
}

/** The event's kind from event_type (or type), in either naming (stored / BlockStored, ...). */
function readKind(o: Obj): 'stored' | 'removed' | 'cleared' | Failure {
  const type = optStr(o, ['event_type', 'type'], null);
  if (type instanceof Error) return fail(type.message, 'must be a string');
  const t = type?.toLowerCase();
  if (t === 'stored' || t === 'blockstored') return 'stored';
  if (t === 'removed' || t === 'blockremoved') return 'removed';
  if (t === 'cleared' || t === 'allblockscleared') return 'cleared';
  return fail('event_type', 'must be one of stored, removed, cleared');
}

/** The fields every kind carries, normalized (empty tenant, salt, LoRA read as their defaults). */
interface Header {
  event_id: bigint | null;
  timestamp: number | null;
  model_name: string;
  block_size: number;
  additional_salt: string | null;
  lora_name: string | null;
  tenant_id: string;
  backend_id: string;
  medium: string | null;
  dp_rank: number;
}

/** backend_id: a string, or an integer id some publishers send (kept as its decimal text). */
function readBackend(o: Obj, def: string | null): string | null | Failure {
  const backend = optStr(o, ['backend_id'], def);
  if (!(backend instanceof Error)) return backend;
  const v = o.backend_id;
  if (typeof v === 'number' && Number.isSafeInteger(v)) return String(v);
  if (typeof v === 'bigint') return v.toString();
  return fail('backend_id', 'must be a string');
}

function readHeader(o: Obj, defaults: EventDefaults): Header | Failure {
  const model = optStr(o, ['model_name', 'model', 'modelname'], defaults.model_name ?? null);
  if (model instanceof Error) return fail(model.message, 'must be a string');
  if (!model) return fail('model_name', 'is required');
  const bs = optInt(o, 'block_size', defaults.block_size ?? null, 1 << 20);
  if (bs instanceof Error) return fail('block_size', 'must be a positive integer');
  if (!bs) return fail('block_size', 'is required and must be positive');
  const salt = optStr(o, ['additional_salt', 'additionalsalt'], defaults.additional_salt ?? null);
  if (salt instanceof Error) return fail(salt.message, 'must be a string or null');
  const lora = optStr(o, ['lora_name'], defaults.lora_name ?? null);
  if (lora instanceof Error) return fail('lora_name', 'must be a string or null');
  const tenant = optStr(o, ['tenant_id'], defaults.tenant_id ?? 'default');
  if (tenant instanceof Error) return fail('tenant_id', 'must be a string');
  const backend = readBackend(o, defaults.backend_id ?? null);
  if (isFailure(backend)) return backend;
  if (!backend) return fail('backend_id', 'is required');
  const medium = optStr(o, ['medium'], defaults.medium ?? null);
  if (medium instanceof Error) return fail('medium', 'must be a string or null');
  const dp = optInt(o, 'dp_rank', defaults.dp_rank ?? 0, 65535);
  if (dp instanceof Error) return fail('dp_rank', 'must be an integer in [0, 65535]');
  let eventId: bigint | null = null;
  if (o.event_id !== undefined && o.event_id !== null) {
    eventId = toU64(o.event_id);
    if (eventId === null || (typeof o.event_id === 'number' && o.event_id < 0))
      return fail('event_id', 'must be a u64');
  }
  const ts = o.timestamp;
  return {
    event_id: eventId,
    timestamp: typeof ts === 'number' && Number.isFinite(ts) ? ts : typeof ts === 'bigint' ? Number(ts) : null,
    model_name: model,
    block_size: bs,
    additional_salt: salt || null,
    lora_name: lora || null,
    tenant_id: tenant || 'default',
    backend_id: backend,
    medium,
    dp_rank: dp ?? 0,
  };
}

/** Read one standardized event. `maxTokens` bounds token_ids. */
export function parseStandardEvent(o: Obj, defaults: EventDefaults = {}, maxTokens = 1 << 22): ParseResult {
  const kind = readKind(o);
  if (isFailure(kind)) return kind;
  const h = readHeader(o, defaults);
  if (isFailure(h)) return h;
  // Plain object literals below (not spreads of a shared base): measured 2x faster per event.
  if (kind === 'cleared') {
    return {
      ok: true,
      event: {
        event_type: 'cleared',
        event_id: h.event_id,
        timestamp: h.timestamp,
        model_name: h.model_name,
        block_size: h.block_size,
        additional_salt: h.additional_salt,
        lora_name: h.lora_name,
        tenant_id: h.tenant_id,
        backend_id: h.backend_id,
        medium: h.medium,
        dp_rank: h.dp_rank,
      },
    };
  }

  const seq = readSeqHashes(o);
  if (isFailure(seq)) return seq;
  const base_block_idx = optInt(o, 'base_block_idx', null, 0x7fffffff);
  if (base_block_idx instanceof Error) return fail('base_block_idx', 'must be a non-negative integer');
  if (kind === 'removed') {
    return {
      ok: true,
      event: {
        event_type: 'removed',
        event_id: h.event_id,
        timestamp: h.timestamp,
        model_name: h.model_name,
        block_size: h.block_size,
        additional_salt: h.additional_salt,
        lora_name: h.lora_name,
        tenant_id: h.tenant_id,
        backend_id: h.backend_id,
        medium: h.medium,
        dp_rank: h.dp_rank,
        seq_hashes: seq,
        base_block_idx,
      },
    };
  }

  let parent: bigint | null = null;
  if (o.parent_hash !== undefined && o.parent_hash !== null) {
    parent = toU64(o.parent_hash);
    if (parent === null) return fail('parent_hash', 'must be a u64 or null');
  }
  const tokens = readTokenIds(o, maxTokens);
  if (isFailure(tokens)) return tokens;
  return {
    ok: true,
    event: {
      event_type: 'stored',
      event_id: h.event_id,
      timestamp: h.timestamp,
      model_name: h.model_name,
      block_size: h.block_size,
      additional_salt: h.additional_salt,
      lora_name: h.lora_name,
      tenant_id: h.tenant_id,
      backend_id: h.backend_id,
      medium: h.medium,
      dp_rank: h.dp_rank,
      seq_hashes: seq,
      base_block_idx,
      parent_hash: parent,
      token_ids: tokens,
    },
  };
}
