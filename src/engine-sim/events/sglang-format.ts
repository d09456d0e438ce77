// SGLang's map-encoded events (PR #37482): one BlockStored per page, hashes are signed int64,
// no lora_name/extra_keys/group_idx, a top-level cache_salt when salted, host tier = CPU_PINNED.
import type { CoreKvEvent } from '../core/kv-events.js';
import type { Medium } from '../core/block.js';
import type { WireContext, WireEncoder } from './wire.js';

const MEDIUM: Record<Medium, string> = { GPU: 'GPU', CPU: 'CPU_PINNED' };
const signed = (h: bigint): bigint => BigInt.asIntN(64, h);

export function sglangEncoder(ctx: WireContext): WireEncoder {
  return {
    format: 'sglang',
    render(events: readonly CoreKvEvent[]): unknown[] {
      const out: unknown[] = [];
      for (const ev of events) {
        if (ev.type === 'cleared') {
          out.push({ type: 'AllBlocksCleared' });
          continue;
        }
        for (const b of ev.blocks) {
          if (ev.type === 'removed') {
            out.push({ type: 'BlockRemoved', block_hashes: [signed(b.hash)], medium: MEDIUM[ev.medium] });
            continue;
          }
          const e: Record<string, unknown> = {
            type: 'BlockStored',
            block_hashes: [signed(b.hash)],
            parent_block_hash: b.parent === null ? null : signed(b.parent),
            token_ids: Array.from(b.tokens),
            block_size: ctx.blockSize,
            lora_id: null,
            medium: MEDIUM[ev.medium],
          };
          if (b.cacheSalt) e.cache_salt = b.cacheSalt;
          out.push(e);
        }
      }
      return out;
    },
  };
}
