// SGLang adapter. Same transport and batch as vLLM, but: hashes are the first 8 bytes of SGLang's
// SHA-256 chain as a signed i64; one BlockStored per page; no lora_name, extra_keys or group_idx;
// a per-event cache_salt (top-level key in map form, since PR #37482; an 8th positional element
// `{"cache_salt": ...}` before); media GPU, CPU_PINNED, CPU_TIER1/2, DISK, EXTERNAL; the batch's rank
// is `attn_dp_rank`.
import type { DecodeContext } from './context.js';
import { NO_TAG, type Parsed, type PositionalSchema, fromPositional, readEvent } from './engine-event.js';
import { type BatchInfo, type Normalized, normalizeEngineEvent } from './normalize.js';
import { isRecord } from './values.js';

export const SGLANG_SCHEMA: PositionalSchema = {
  stored: ['block_hashes', 'parent_block_hash', 'token_ids', 'block_size', 'lora_id', 'medium', 'metadata'],
  removed: ['block_hashes', 'medium'],
  cleared: ['medium'],
};

export function parseSglangEvent(raw: unknown): Parsed {
  if (isRecord(raw)) return readEvent(raw);
  if (!Array.isArray(raw)) return { error: 'event is neither a map nor a tagged array' };
  const rec = fromPositional(raw, SGLANG_SCHEMA);
  if (rec === null) return NO_TAG;
  const meta = rec.metadata;
  delete rec.metadata;
  if (isRecord(meta) && 'cache_salt' in meta) rec.cache_salt = meta.cache_salt;
  return readEvent(rec);
}

export function decodeSglangEvent(raw: unknown, ctx: DecodeContext, b: BatchInfo): Normalized {
  const p = parseSglangEvent(raw);
  return 'kind' in p ? normalizeEngineEvent(p, ctx, b) : p;
}
