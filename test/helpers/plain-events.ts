// Decoders may hand out hashes and tokens as typed arrays (see src/events/decode/fast-unpack.ts);
// tests compare events in their plain-array form.
import type { DecodedBatch, PayloadResult } from '../../src/events/decode/index.js';
import type { KvEvent } from '../../src/indexer/kv-event.js';

export function plainEvent(e: KvEvent): KvEvent {
  if (e.event_type === 'cleared') return e;
  const out = { ...e, seq_hashes: Array.from(e.seq_hashes) };
  if (out.event_type === 'stored' && out.token_ids !== null) out.token_ids = Array.from(out.token_ids);
  return out;
}

export function plainBatch(b: DecodedBatch): DecodedBatch {
  return { ...b, events: b.events.map(plainEvent) };
}

export function plainResult<R extends PayloadResult>(r: R): R {
  return r.ok ? { ...r, batch: plainBatch(r.batch) } : r;
}
