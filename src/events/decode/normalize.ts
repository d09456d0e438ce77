// vLLM-family events (vLLM, SGLang, LMCache) -> normalized KvEvents: registration defaults, KV-cache
// group filter, LoRA and salt resolution, extra_keys, block splitting, and removal fan-out.
import type {
  ClearedEvent,
  KvCacheGroup,
  KvEvent,
  RemovedEvent,
  StoredEvent,
  U32List,
  U64List,
} from '../../indexer/kv-event.js';
import type { DecodeContext } from './context.js';
import type { Bad, EngineEvent, EngineStored, Skip } from './engine-event.js';
import { expandRemoved, splitBlocks, splitRatio } from './rechunk.js';

/** Batch-level facts every event of a batch shares. */
export interface BatchInfo {
  /** Batch rank, or the registration's when the batch has none. */
  dpRank: number;
  /** Batch timestamp in Unix ms, when known. */
  tsMs: number | null;
}

export type Normalized = KvEvent[] | Skip | Bad;

interface Space {
  blockSize: number;
  loraName: string | null;
  salt: string | null;
}

// Object literals with every field spelled out (not spreads): this is the per-event hot path and
// V8 builds these an order of magnitude faster than `{ ...identity, ... }`.
function storedEvent(
  ctx: DecodeContext,
  b: BatchInfo,
  medium: string | null,
  v: Space,
  hashes: U64List,
  parent: bigint | null,
  tokens: U32List,
  group: KvCacheGroup | null,
): StoredEvent {
  const ev: StoredEvent = {
    model_name: ctx.reg.model,
    block_size: v.blockSize,
    additional_salt: v.salt,
    lora_name: v.loraName,
    tenant_id: ctx.reg.tenant,
    backend_id: ctx.reg.backendId,
    medium,
    dp_rank: b.dpRank,
    event_id: null,
    timestamp: b.tsMs,
    event_type: 'stored',
    seq_hashes: hashes,
    base_block_idx: parent === null ? 0 : null,
    parent_hash: parent,
    token_ids: tokens,
  };
  if (group !== null) ev.group = group;
  return ev;
}

function removedEvent(
  ctx: DecodeContext,
  b: BatchInfo,
  medium: string | null,
  v: Space,
  hashes: U64List,
  group: KvCacheGroup | null,
): RemovedEvent {
  const ev: RemovedEvent = {
    model_name: ctx.reg.model,
    block_size: v.blockSize,
    additional_salt: v.salt,
    lora_name: v.loraName,
    tenant_id: ctx.reg.tenant,
    backend_id: ctx.reg.backendId,
    medium,
    dp_rank: b.dpRank,
    event_id: null,
    timestamp: b.tsMs,
    event_type: 'removed',
    seq_hashes: hashes,
    base_block_idx: null,
  };
  if (group !== null) ev.group = group;
  return ev;
}

function clearedEvent(ctx: DecodeContext, b: BatchInfo, medium: string | null, v: Space): ClearedEvent {
  return {
    model_name: ctx.reg.model,
    block_size: v.blockSize,
    additional_salt: v.salt,
    lora_name: v.loraName,
    tenant_id: ctx.reg.tenant,
    backend_id: ctx.reg.backendId,
    medium,
    dp_rank: b.dpRank,
    event_id: null,
    timestamp: b.tsMs,
    event_type: 'cleared',
  };
}

/**
 * How many leading blocks the router can re-hash from tokens alone. vLLM's extra_keys per block hold
 * the LoRA name (fine: the namespace carries it), multimodal (identifier, offset) items, the
 * cache_salt (block 0) and prompt-embeds digests; the router's hash cannot reproduce the last three,
 * so blocks from the first such one on are not indexed (children then arrive as orphans).
 */
function plainPrefix(extra: readonly unknown[] | null, blocks: number, lora: string | null): number {
  if (extra === null) return blocks;
  for (let i = 0; i < blocks && i < extra.length; i++) {
    const keys = extra[i];
    if (keys === null || keys === undefined) continue;
    if (!Array.isArray(keys)) return i;
    for (const k of keys) {
      if (typeof k === 'string' && k === lora) continue;
      if (k !== null && typeof k === 'object' && !Array.isArray(k) && (k as { type?: unknown }).type === 'lora')
        continue;
      return i;
    }
  }
  return blocks;
}

/**
 * vLLM puts a request's cache_salt into block 0's extra_keys (and only there). A single string on
 * block 0 that is not the LoRA name, with no keys on block 1, is that salt: the block is indexed in
 * the salted namespace (later blocks follow their parent there, see EventApplier).
 */
function saltFromExtraKeys(
  extra: readonly unknown[] | null,
  lora: string | null,
  firstDepth: number | null,
): string | null {
  if (extra === null || extra.length === 0 || firstDepth !== 0) return null;
  const k0 = extra[0];
  if (!Array.isArray(k0)) return null;
  const strings = k0.filter((k) => typeof k === 'string' && k !== lora);
  if (strings.length !== 1 || k0.some((k) => typeof k !== 'string')) return null;
  const k1 = extra[1];
  if (k1 !== undefined && k1 !== null && (!Array.isArray(k1) || k1.some((k) => k !== lora))) return null;
  return strings[0] as string;
}

function withoutSalt(extra: readonly unknown[] | null, salt: string | null): readonly unknown[] | null {
  if (extra === null || salt === null) return extra;
  return [(extra[0] as unknown[]).filter((k) => k !== salt), ...extra.slice(1)];
}

function stored(e: EngineStored, ctx: DecodeContext, b: BatchInfo): Normalized {
  const reg = ctx.reg;
  const cls = ctx.state.groups.classifyStored(
    b.dpRank,
    e.groupIdx,
    e.specKind,
    e.slidingWindow,
    e.blockSize ?? reg.blockSize,
  );
  if (cls === 'skip') {
    return {
      skip: `KV cache group ${e.groupIdx ?? '-'} (${e.specKind ?? 'unknown kind'}) is neither full attention, a sliding window nor mamba`,
    };
  }
  const group = cls === 'main' ? null : cls;
  let lora = e.loraName !== undefined ? e.loraName : reg.loraName || null;
  if (lora === null && e.loraId !== null) {
    // Deprecated lora_id without a name: only the registration can name the adapter.
    if (!reg.loraName) return { skip: `lora_id ${e.loraId} without lora_name and no registered lora_name` };
    lora = reg.loraName;
  }
  const extraSalt = e.salt ? null : saltFromExtraKeys(e.extraKeys, lora, e.parent === null ? 0 : null);
  const salt = e.salt ? e.salt : (extraSalt ?? (reg.additionalSalt || null));

  let hashes = e.hashes;
  let tokens = e.tokens;
  let blockSize = e.blockSize ?? reg.blockSize;
  const plain = plainPrefix(withoutSalt(e.extraKeys, extraSalt), hashes.length, lora);
  if (plain === 0 && hashes.length > 0)
    return { skip: 'extra_keys (multimodal, cache_salt or prompt embeds) the router hash cannot reproduce' };
  if (plain < hashes.length) {
    hashes = hashes.slice(0, plain);
    tokens = tokens.slice(0, plain * blockSize);
  }

  let ratio = 1;
  // A secondary group's blocks only matter in the namespace the prefix is queried in: they are
  // split when a whole multiple of the registered size (a Mamba checkpoint then ends its last
  // router block) and skipped otherwise.
  if (group !== null && blockSize !== reg.blockSize && blockSize % reg.blockSize !== 0)
    return { skip: `KV cache group ${group.idx}: block size ${blockSize} is not a multiple of ${reg.blockSize}` };
  // Split engine blocks larger than the registered size (see rechunk.ts). Smaller ones (SGLang with a
  // page size below the registered block size) stay in their own block-size namespace.
  if (blockSize > reg.blockSize && tokens.length > 0 && (blockSize % reg.blockSize === 0 || hashes.length === 1)) {
    ratio = splitRatio(blockSize, reg.blockSize);
    const split = splitBlocks(hashes, tokens, blockSize, reg.blockSize);
    hashes = split.hashes;
    tokens = split.tokens;
    blockSize = reg.blockSize;
  }
  const v: Space = { blockSize, loraName: lora, salt };
  // A group's removals expand by the group's own ratio (see removal below).
  ctx.state.noteVariant(blockSize, lora, salt, group === null ? ratio : 1);
  // Engine hashes are not router hashes: the applier always gets tokens (possibly empty, which it
  // rejects) so it never mistakes engine hashes for router seq hashes.
  return [storedEvent(ctx, b, e.medium, v, hashes, e.parent, tokens, group)];
}

export function normalizeEngineEvent(e: EngineEvent, ctx: DecodeContext, b: BatchInfo): Normalized {
  switch (e.kind) {
    case 'stored':
      return stored(e, ctx, b);
    case 'removed': {
      const cls = ctx.state.groups.classifyRemoved(b.dpRank, e.groupIdx);
      if (cls === 'skip') return { skip: `KV cache group ${e.groupIdx} is not indexed` };
      const out: KvEvent[] = [];
      for (const v of ctx.state.spaceVariants()) {
        if (cls === 'main') out.push(removedEvent(ctx, b, e.medium, v, expandRemoved(e.hashes, v.ratio), null));
        else {
          const ratio = cls.blockSize > v.blockSize ? splitRatio(cls.blockSize, v.blockSize) : 1;
          out.push(removedEvent(ctx, b, e.medium, v, expandRemoved(e.hashes, ratio), cls));
        }
      }
      return out;
    }
    case 'cleared': {
      // One event per known namespace; the listener also purges the backend across all of them.
      const out: KvEvent[] = [];
      for (const v of ctx.state.spaceVariants()) out.push(clearedEvent(ctx, b, e.medium, v));
      return out;
    }
  }
}
