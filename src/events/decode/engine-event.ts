// The intermediate shape of vLLM-family events (vLLM, SGLang, LMCache) after field extraction and
// before registration defaults, group filtering and namespace resolution (normalize.ts).
// Map-form events are read by key; positional (array_like) events are first mapped onto the same
// keys by a per-engine schema, so every field-history variant goes through one reader.
import type { U32List, U64List } from '../../indexer/kv-event.js';
import { hashList, isRecord, optBlockSize, optHash, optString, optUint, tokenList } from './values.js';

export interface EngineStored {
  kind: 'stored';
  hashes: U64List;
  parent: bigint | null;
  tokens: U32List;
  eagle: boolean;
  blockSize: number | null;
  /** Raw medium name; null = device. */
  medium: string | null;
  /** undefined: the schema version has no such field, so the registration decides. */
  loraName: string | null | undefined;
  loraId: number | null;
  /** One entry per block (null = no extra keys), or null when absent. */
  extraKeys: unknown[] | null;
  groupIdx: number | null;
  specKind: string | null;
  /** kv_cache_spec_sliding_window (tokens), null when absent. */
  slidingWindow: number | null;
  /** SGLang's per-event cache_salt; undefined when absent. */
  salt: string | null | undefined;
}

export interface EngineRemoved {
  kind: 'removed';
  hashes: U64List;
  medium: string | null;
  groupIdx: number | null;
}

export interface EngineCleared {
  kind: 'cleared';
  medium: string | null;
}

export type EngineEvent = EngineStored | EngineRemoved | EngineCleared;

/** Not an error: an event we deliberately do not index (unknown tag, other KV group, ...). */
export interface Skip {
  skip: string;
}
/** A malformed event: counted as decode_error. */
export interface Bad {
  error: string;
}
export type Parsed = EngineEvent | Skip | Bad;

export const STORED_TAGS = new Set(['BlockStored', 'BlockStoredWithMetadata']);
export const REMOVED_TAGS = new Set(['BlockRemoved']);
export const CLEARED_TAGS = new Set(['AllBlocksCleared']);

/** Positional fields after the tag, in declaration order, per event kind. */
export interface PositionalSchema {
  stored: readonly string[];
  removed: readonly string[];
  cleared: readonly string[];
}

export const NO_TAG: Bad = { error: 'positional event without a string tag' };

/**
 * Map a tagged array `[tag, f1, f2, ...]` onto `{type: tag, f1: ..., ...}`; short arrays leave keys
 * absent, extra elements are ignored. null when element 0 is not a string tag.
 */
export function fromPositional(arr: readonly unknown[], schema: PositionalSchema): Record<string, unknown> | null {
  const tag = arr[0];
  if (typeof tag !== 'string') return null;
  const names = STORED_TAGS.has(tag)
    ? schema.stored
    : REMOVED_TAGS.has(tag)
      ? schema.removed
      : CLEARED_TAGS.has(tag)
        ? schema.cleared
        : [];
  const rec: Record<string, unknown> = { type: tag };
  const n = Math.min(names.length, arr.length - 1);
  for (let i = 0; i < n; i++) rec[names[i]] = arr[i + 1];
  return rec;
}

function medium(v: unknown): string | null | undefined {
  const m = optString(v);
  return m === '' ? null : m;
}

/** Read a vLLM-family event from its map form (or a positional event mapped by `fromPositional`). */
export function readEvent(rec: Record<string, unknown>): Parsed {
  const tag = rec.type;
  if (typeof tag !== 'string') return { error: 'event without a type tag' };
  if (STORED_TAGS.has(tag)) {
    const hashes = hashList(rec.block_hashes);
    if (hashes === undefined) return { error: 'BlockStored.block_hashes is not a list of u64/i64/bytes hashes' };
    const parent = optHash(rec.parent_block_hash);
    if (parent === undefined) return { error: 'BlockStored.parent_block_hash is not a hash' };
    const toks = tokenList(rec.token_ids);
    if (toks === undefined) return { error: 'BlockStored.token_ids is not a list of u32 (or EAGLE pairs)' };
    const blockSize = optBlockSize(rec.block_size);
    if (blockSize === undefined) return { error: 'BlockStored.block_size is not a positive integer' };
    const med = medium(rec.medium);
    if (med === undefined) return { error: 'medium is not a string' };
    const loraName = 'lora_name' in rec ? optString(rec.lora_name) : undefined;
    if ('lora_name' in rec && loraName === undefined) return { error: 'lora_name is not a string' };
    const loraId = optUint(rec.lora_id);
    const extra = rec.extra_keys;
    if (extra !== undefined && extra !== null && !Array.isArray(extra)) return { error: 'extra_keys is not a list' };
    const groupIdx = optUint(rec.group_idx);
    if (groupIdx === undefined) return { error: 'group_idx is not an integer' };
    const specKind = optString(rec.kv_cache_spec_kind);
    const window = optUint(rec.kv_cache_spec_sliding_window);
    if (window === undefined) return { error: 'kv_cache_spec_sliding_window is not an integer' };
    const salt = 'cache_salt' in rec ? optString(rec.cache_salt) : undefined;
    return {
      kind: 'stored',
      hashes,
      parent,
      tokens: toks.tokens,
      eagle: toks.eagle,
      blockSize,
      medium: med,
      loraName,
      loraId: loraId ?? null,
      extraKeys: (extra as unknown[] | null | undefined) ?? null,
      groupIdx,
      specKind: specKind ?? null,
      slidingWindow: window,
      salt: salt === '' ? null : salt,
    };
  }
  if (REMOVED_TAGS.has(tag)) {
    const hashes = hashList(rec.block_hashes);
    if (hashes === undefined) return { error: 'BlockRemoved.block_hashes is not a list of hashes' };
    const med = medium(rec.medium);
    if (med === undefined) return { error: 'medium is not a string' };
    const groupIdx = optUint(rec.group_idx);
    if (groupIdx === undefined) return { error: 'group_idx is not an integer' };
    return { kind: 'removed', hashes, medium: med, groupIdx };
  }
  if (CLEARED_TAGS.has(tag)) {
    const med = medium(rec.medium);
    if (med === undefined) return { error: 'medium is not a string' };
    return { kind: 'cleared', medium: med };
  }
  return { skip: `unknown event type ${tag.slice(0, 64)}` };
}

/** Map or positional event -> parsed, with the engine's positional schema. */
export function parseTagged(raw: unknown, schema: PositionalSchema): Parsed {
  if (Array.isArray(raw)) {
    const rec = fromPositional(raw, schema);
    return rec === null ? NO_TAG : readEvent(rec);
  }
  if (isRecord(raw)) return readEvent(raw);
  return { error: 'event is neither a map nor a tagged array' };
}
