// Mooncake adapter: the standardized KV Events API (Mooncake Conductor RFC #1527) as msgpack maps:
// `event_type` stored|removed|cleared (legacy alias `type`), `seq_hashes` (legacy `block_hashes`),
// `base_block_idx`, `parent_hash`, `token_ids` (null = the hashes already follow the router standard),
// and the envelope. The field reader is shared with POST /events (../standard.ts); this adapter adds
// the registration defaults (fields an event leaves out or sends as null) and the batch rank.
// A vLLM-tagged event on a Mooncake stream (type "BlockStored", or a positional array) is an engine
// event with engine hashes, so it goes to the vLLM adapter instead.
import { type EventDefaults, parseStandardEvent } from '../standard.js';
import type { DecodeContext } from './context.js';
import { CLEARED_TAGS, REMOVED_TAGS, STORED_TAGS } from './engine-event.js';
import type { BatchInfo, Normalized } from './normalize.js';
import { isRecord } from './values.js';
import { decodeVllmEvent } from './vllm.js';

const KINDS = new Set(['stored', 'removed', 'cleared']);

export function decodeMooncakeEvent(raw: unknown, ctx: DecodeContext, b: BatchInfo): Normalized {
  if (Array.isArray(raw)) return decodeVllmEvent(raw, ctx, b);
  if (!isRecord(raw)) return { error: 'event is not a map' };
  const type = raw.event_type ?? raw.type;
  if (typeof type !== 'string') return { error: 'event without event_type' };
  if (STORED_TAGS.has(type) || REMOVED_TAGS.has(type) || CLEARED_TAGS.has(type)) return decodeVllmEvent(raw, ctx, b);
  if (!KINDS.has(type.toLowerCase())) return { skip: `unknown event_type ${type.slice(0, 64)}` };

  const reg = ctx.reg;
  const defaults: EventDefaults = {
    model_name: reg.model,
    block_size: reg.blockSize,
    additional_salt: reg.additionalSalt || null,
    lora_name: reg.loraName || null,
    tenant_id: reg.tenant,
    backend_id: reg.backendId,
    dp_rank: b.dpRank,
  };
  const r = parseStandardEvent(raw, defaults);
  if (!r.ok) return { error: `${r.field} ${r.message}` };
  // A publisher writes only into the tenant it was registered under (isolation).
  r.event.tenant_id = reg.tenant;
  if (r.event.timestamp === null) r.event.timestamp = b.tsMs;
  return [r.event];
}
