// The standardized KV Events API (Mooncake Conductor, RFC #1527) as msgpack maps inside the usual
// batch. Hashes are the engine's own, so `token_ids` is always sent for the consumer to rehash.
// `event_id` is consecutive per stream = (additional_salt, lora_name, medium) of this publisher.
import type { BlockContent, Medium } from '../core/block.js';
import type { CoreKvEvent } from '../core/kv-events.js';
import { concatTokens, type WireContext, type WireEncoder } from './wire.js';

const MEDIUM: Record<Medium, string> = { GPU: 'gpu', CPU: 'cpu' };

interface StreamKey {
  salt: string | null;
  lora: string | null;
  medium: Medium;
}

export function mooncakeEncoder(ctx: WireContext, media: readonly Medium[]): WireEncoder {
  const nextId = new Map<string, { key: StreamKey; next: bigint }>();
  for (const medium of media)
    nextId.set(`\u0000\u0000${medium}`, { key: { salt: null, lora: null, medium }, next: 0n });

  const envelope = (key: StreamKey, type: string, nowMs: number): Record<string, unknown> => {
    const k = `${key.salt ?? ''}\u0000${key.lora ?? ''}\u0000${key.medium}`;
    let s = nextId.get(k);
    if (!s) nextId.set(k, (s = { key, next: 0n }));
    const id = s.next++;
    return {
      event_id: id,
      timestamp: Math.round(nowMs),
      event_type: type,
      model_name: ctx.modelName,
      block_size: ctx.blockSize,
      additional_salt: key.salt,
      lora_name: key.lora,
      tenant_id: ctx.tenantId,
      backend_id: ctx.backendId,
      medium: MEDIUM[key.medium],
      dp_rank: ctx.dpRank,
    };
  };
  const keyOf = (b: BlockContent, medium: Medium): StreamKey => ({ salt: b.cacheSalt, lora: b.loraName, medium });

  return {
    format: 'mooncake',
    render(events: readonly CoreKvEvent[], nowMs: number): unknown[] {
      const out: unknown[] = [];
      for (const ev of events) {
        if (ev.type === 'cleared') {
          // Every stream this publisher has used is purged.
          for (const s of [...nextId.values()]) out.push(envelope(s.key, 'cleared', nowMs));
          continue;
        }
        const first = ev.blocks[0];
        if (ev.type === 'stored') {
          out.push({
            ...envelope(keyOf(first, ev.medium), 'stored', nowMs),
            seq_hashes: ev.blocks.map((b) => b.hash),
            base_block_idx: first.depth,
            parent_hash: first.parent,
            token_ids: concatTokens(ev.blocks),
          });
        } else {
          for (const b of ev.blocks)
            out.push({
              ...envelope(keyOf(b, ev.medium), 'removed', nowMs),
              seq_hashes: [b.hash],
              base_block_idx: b.depth,
            });
        }
      }
      return out;
    },
  };
}
