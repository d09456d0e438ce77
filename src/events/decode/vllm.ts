// vLLM adapter. Events are tagged maps after PR #42892 and tagged positional arrays before it
// (v0.8.5 .. v0.23.x); positional arrays grew one field at a time, so shorter arrays simply leave
// the later fields absent. Hashes: u64 ints (low 64 bits of the digest), or raw digest bytes.
import type { DecodeContext } from './context.js';
import { type Parsed, type PositionalSchema, parseTagged } from './engine-event.js';
import { type BatchInfo, type Normalized, normalizeEngineEvent } from './normalize.js';
import { isRecord } from './values.js';

/** Declaration order of the array_like structs (see the wire-format reference, section 1.1). */
export const VLLM_SCHEMA: PositionalSchema = {
  stored: [
    'block_hashes',
    'parent_block_hash',
    'token_ids',
    'block_size',
    'lora_id', // deprecated, kept positionally
    'medium', // #19737
    'lora_name', // #27577
    'extra_keys', // #33304
    'group_idx', // #37688
    'kv_cache_spec_kind', // #40984
    'kv_cache_spec_sliding_window', // #40984
    'locality', // #48281 (only ever in map form in practice)
  ],
  removed: ['block_hashes', 'medium', 'group_idx', 'locality'],
  cleared: ['medium'],
};

export function parseVllmEvent(raw: unknown): Parsed {
  // A positional event whose 8th element is a map is SGLang's salted BlockStored on a mixed stream.
  if (Array.isArray(raw) && raw.length === 8 && isRecord(raw[7])) {
    const meta = raw[7];
    const p = parseTagged(raw.slice(0, 7), VLLM_SCHEMA);
    if ('kind' in p && p.kind === 'stored')
      p.salt = typeof meta.cache_salt === 'string' && meta.cache_salt !== '' ? meta.cache_salt : null;
    return p;
  }
  return parseTagged(raw, VLLM_SCHEMA);
}

export function decodeVllmEvent(raw: unknown, ctx: DecodeContext, b: BatchInfo): Normalized {
  const p = parseVllmEvent(raw);
  return 'kind' in p ? normalizeEngineEvent(p, ctx, b) : p;
}
