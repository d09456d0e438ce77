// vLLM KvCacheEvent encodings (see docs/engine-sim.md for byte-level shapes):
//   map   (vLLM >= PR #42892, v0.26+): tagged maps, `None` defaults omitted, required fields kept;
//   array (v0.2x before #42892):       tagged positional arrays with all 11 fields.
// One BlockRemoved per evicted block, as vLLM's block pool emits them.
import type { BlockContent } from '../core/block.js';
import type { CoreGroupTag, CoreKvEvent } from '../core/kv-events.js';
import { concatTokens, type WireContext, type WireEncoder } from './wire.js';

const KIND = 'full_attention';

function loraId(ctx: WireContext, blocks: readonly BlockContent[]): number | null {
  const name = blocks[0].loraName;
  return name ? (ctx.loraIds.get(name) ?? null) : null;
}

function storedMap(
  ctx: WireContext,
  medium: string,
  blocks: BlockContent[],
  group: CoreGroupTag | undefined,
): Record<string, unknown> {
  const out: Record<string, unknown> = {
    type: 'BlockStored',
    block_hashes: blocks.map((b) => b.hash),
    parent_block_hash: blocks[0].parent,
    token_ids: concatTokens(blocks),
    block_size: ctx.blockSize,
    lora_id: loraId(ctx, blocks),
    medium,
    lora_name: blocks[0].loraName,
    extra_keys: blocks.map((b) => b.extraKeys),
    group_idx: group?.idx ?? 0,
    kv_cache_spec_kind: group?.kind ?? KIND,
  };
  // vLLM omits None fields in the map layout: the window only for sliding-window groups.
  if (group?.kind === 'sliding_window') out.kv_cache_spec_sliding_window = group.window;
  return out;
}

function storedArray(
  ctx: WireContext,
  medium: string,
  blocks: BlockContent[],
  group: CoreGroupTag | undefined,
): unknown[] {
  return [
    'BlockStored',
    blocks.map((b) => b.hash),
    blocks[0].parent,
    concatTokens(blocks),
    ctx.blockSize,
    loraId(ctx, blocks),
    medium,
    blocks[0].loraName,
    blocks.map((b) => b.extraKeys),
    group?.idx ?? 0,
    group?.kind ?? KIND,
    group?.kind === 'sliding_window' ? group.window : null, // kv_cache_spec_sliding_window
  ];
}

export function vllmEncoder(ctx: WireContext, layout: 'map' | 'array'): WireEncoder {
  return {
    format: layout,
    render(events: readonly CoreKvEvent[]): unknown[] {
      const out: unknown[] = [];
      for (const ev of events) {
        if (ev.type === 'cleared') out.push(layout === 'map' ? { type: 'AllBlocksCleared' } : ['AllBlocksCleared']);
        else if (ev.type === 'stored')
          out.push(
            layout === 'map'
              ? storedMap(ctx, ev.medium, ev.blocks, ev.group)
              : storedArray(ctx, ev.medium, ev.blocks, ev.group),
          );
        else {
          const g = ev.group?.idx ?? 0;
          for (const b of ev.blocks)
            out.push(
              layout === 'map'
                ? { type: 'BlockRemoved', block_hashes: [b.hash], medium: ev.medium, group_idx: g }
                : ['BlockRemoved', [b.hash], ev.medium, g],
            );
        }
      }
      return out;
    },
  };
}
