// The vLLM map-layout batch `[ts, events, dp_rank]` written straight from the core's events: the
// same bytes as `encodeBatch(ts, vllmEncoder(ctx, 'map').render(events), dpRank)` without the
// values in between (a 1,024-engine `bench fleet` renders millions of token ids into JS arrays,
// then msgpack walks them). Only full-attention events without LoRA or extra keys are written
// here; anything else returns null and takes the generic path.
import { type BlockContent, ChainContent } from '../core/block.js';
import type { CoreKvEvent } from '../core/kv-events.js';

const enc = new TextEncoder();
const str = (s: string): Uint8Array => {
  const b = enc.encode(s);
  if (b.length >= 32) throw new Error('fixstr only');
  const out = new Uint8Array(1 + b.length);
  out[0] = 0xa0 + b.length;
  out.set(b, 1);
  return out;
};

const K_TYPE = str('type');
const V_STORED = str('BlockStored');
const V_REMOVED = str('BlockRemoved');
const V_CLEARED = str('AllBlocksCleared');
const K_HASHES = str('block_hashes');
const K_PARENT = str('parent_block_hash');
const K_TOKENS = str('token_ids');
const K_BLOCK_SIZE = str('block_size');
const K_LORA_ID = str('lora_id');
const K_MEDIUM = str('medium');
const K_LORA_NAME = str('lora_name');
const K_EXTRA = str('extra_keys');
const K_GROUP = str('group_idx');
const K_KIND = str('kv_cache_spec_kind');
const V_KIND = str('full_attention');
const MEDIUM = { GPU: str('GPU'), CPU: str('CPU') };
const NIL = 0xc0;

/** Bytes of msgpack's encoding of a non-negative safe integer (positive fixint / uint 8 / 16 / 32). */
function uintLen(n: number): number {
  return n < 0x80 ? 1 : n < 0x100 ? 2 : n < 0x10000 ? 3 : 5;
}

function arrayHeaderLen(n: number): number {
  return n < 16 ? 1 : n < 0x10000 ? 3 : 5;
}

/** Only what the map layout writes without a group, LoRA or extra keys. */
function plain(ev: CoreKvEvent): boolean {
  if (ev.type === 'cleared') return true;
  if (ev.group !== undefined) return false;
  if (ev.type === 'removed') return true;
  for (const b of ev.blocks) if (b.loraName !== null || b.extraKeys !== null || b.hash < 0n) return false;
  return ev.blocks[0].parent === null || ev.blocks[0].parent >= 0n;
}

class Writer {
  pos = 0;
  constructor(
    readonly out: Uint8Array,
    readonly view: DataView,
  ) {}

  bytes(b: Uint8Array): void {
    this.out.set(b, this.pos);
    this.pos += b.length;
  }

  u8(n: number): void {
    this.out[this.pos++] = n;
  }

  uint(n: number): void {
    if (n < 0x80) this.u8(n);
    else if (n < 0x100) {
      this.u8(0xcc);
      this.u8(n);
    } else if (n < 0x10000) {
      this.u8(0xcd);
      this.view.setUint16(this.pos, n);
      this.pos += 2;
    } else {
      this.u8(0xce);
      this.view.setUint32(this.pos, n);
      this.pos += 4;
    }
  }

  u64(h: bigint): void {
    this.u8(0xcf);
    this.view.setBigUint64(this.pos, h);
    this.pos += 8;
  }

  arrayHeader(n: number): void {
    if (n < 16) this.u8(0x90 + n);
    else if (n < 0x10000) {
      this.u8(0xdc);
      this.view.setUint16(this.pos, n);
      this.pos += 2;
    } else {
      this.u8(0xdd);
      this.view.setUint32(this.pos, n);
      this.pos += 4;
    }
  }
}

// A block's tokens as a range of an array: the engine's contents are read in place (a `tokens`
// view per block and pass is an object per block published).
const EMPTY_TOKENS = new Uint32Array(0);
let rangeArray: Uint32Array = EMPTY_TOKENS;
let rangeAt = 0;
let rangeLen = 0;

function tokenRange(b: BlockContent): void {
  if (b instanceof ChainContent) {
    rangeArray = b.tokenArray;
    rangeAt = b.tokenOffset;
    rangeLen = b.tokenCount;
  } else {
    rangeArray = b.tokens;
    rangeAt = 0;
    rangeLen = rangeArray.length;
  }
}

/**
 * At most the bytes of a stored event (each token id at its longest, 5 bytes): the batch is written
 * once, into scratch memory of at least the batch's bound, and copied out at its exact length (the
 * exact length took a pass over every token id of its own).
 */
function storedBound(blocks: readonly BlockContent[]): number {
  let tokens = 0;
  for (const b of blocks) tokens += b instanceof ChainContent ? b.tokenCount : b.tokens.length;
  const n = blocks.length;
  // Three arrays (hashes: 9 bytes an item, extra keys: 1, token ids), each header at its longest.
  return STORED_FIXED + 3 * MAX_HEADER_LEN + 10 * n + MAX_UINT_LEN * tokens;
}

/** The longest uintLen and arrayHeaderLen: a u32 (a token id, a count) takes at most 5 bytes. */
const MAX_UINT_LEN = 5;
const MAX_HEADER_LEN = 5;

// A stored event's bytes but for its arrays (headers and items) and its block size; its parent at its longest (9).
const STORED_FIXED =
  1 +
  K_TYPE.length +
  V_STORED.length +
  K_HASHES.length +
  K_PARENT.length +
  9 +
  K_TOKENS.length +
  K_BLOCK_SIZE.length +
  K_LORA_ID.length +
  1 +
  K_MEDIUM.length +
  4 +
  K_LORA_NAME.length +
  1 +
  K_EXTRA.length +
  K_GROUP.length +
  1 +
  K_KIND.length +
  V_KIND.length;

const REMOVED_LEN =
  1 + K_TYPE.length + V_REMOVED.length + K_HASHES.length + 1 + 9 + K_MEDIUM.length + 4 + K_GROUP.length + 1;
const CLEARED_LEN = 1 + K_TYPE.length + V_CLEARED.length;

function writeStored(w: Writer, medium: 'GPU' | 'CPU', blocks: readonly BlockContent[], blockSize: number): void {
  const n = blocks.length;
  w.u8(0x80 + 11);
  w.bytes(K_TYPE);
  w.bytes(V_STORED);
  w.bytes(K_HASHES);
  w.arrayHeader(n);
  for (const b of blocks) w.u64(b.hash);
  w.bytes(K_PARENT);
  const parent = blocks[0].parent;
  if (parent === null) w.u8(NIL);
  else w.u64(parent);
  w.bytes(K_TOKENS);
  let tokens = 0;
  for (const b of blocks) tokens += b instanceof ChainContent ? b.tokenCount : b.tokens.length;
  w.arrayHeader(tokens);
  for (const b of blocks) {
    tokenRange(b);
    const t = rangeArray;
    const end = rangeAt + rangeLen;
    for (let i = rangeAt; i < end; i++) w.uint(t[i]);
  }
  rangeArray = EMPTY_TOKENS; // no content's array is kept alive by the writer
  w.bytes(K_BLOCK_SIZE);
  w.uint(blockSize);
  w.bytes(K_LORA_ID);
  w.u8(NIL);
  w.bytes(K_MEDIUM);
  w.bytes(MEDIUM[medium]);
  w.bytes(K_LORA_NAME);
  w.u8(NIL);
  w.bytes(K_EXTRA);
  w.arrayHeader(n);
  for (let i = 0; i < n; i++) w.u8(NIL);
  w.bytes(K_GROUP);
  w.u8(0);
  w.bytes(K_KIND);
  w.bytes(V_KIND);
}

/**
 * msgpack of `[ts, events, dp_rank]` in vLLM's map layout (ts as float64, as encodeBatch), or null
 * when an event has a group, LoRA or extra keys (the caller renders those).
 */
export function encodeMapBatch(
  tsSeconds: number,
  events: readonly CoreKvEvent[],
  blockSize: number,
  dpRank: number,
  alloc: (bytes: number) => Uint8Array = (n) => new Uint8Array(n),
): Uint8Array | null {
  if (!Number.isSafeInteger(dpRank) || dpRank < 0 || dpRank >= 2 ** 32) return null;
  let items = 0;
  let bound = 0;
  for (const ev of events) {
    if (!plain(ev)) return null;
    if (ev.type === 'cleared') {
      items++;
      bound += CLEARED_LEN;
    } else if (ev.type === 'removed') {
      items += ev.blocks.length;
      bound += REMOVED_LEN * ev.blocks.length;
    } else {
      items++;
      bound += storedBound(ev.blocks) + uintLen(blockSize);
    }
  }
  bound += 10 + arrayHeaderLen(items) + uintLen(dpRank);
  const w = scratchWriter(bound);
  const view = w.view;
  w.u8(0x93);
  w.u8(0xcb);
  view.setFloat64(2, tsSeconds);
  w.pos = 10;
  w.arrayHeader(items);
  for (const ev of events) {
    if (ev.type === 'cleared') {
      w.u8(0x81);
      w.bytes(K_TYPE);
      w.bytes(V_CLEARED);
    } else if (ev.type === 'removed') {
      for (const b of ev.blocks) {
        w.u8(0x84);
        w.bytes(K_TYPE);
        w.bytes(V_REMOVED);
        w.bytes(K_HASHES);
        w.u8(0x91);
        w.u64(b.hash);
        w.bytes(K_MEDIUM);
        w.bytes(MEDIUM[ev.medium]);
        w.bytes(K_GROUP);
        w.u8(0);
      }
    } else writeStored(w, ev.medium, ev.blocks, blockSize);
  }
  w.uint(dpRank);
  if (w.pos > bound) throw new Error(`encodeMapBatch: wrote ${w.pos} bytes past its bound ${bound}`);
  const out = alloc(w.pos);
  out.set(new Uint8Array(w.out.buffer, 0, w.pos));
  return out;
}

/** The writer over the scratch memory, grown to at least `bytes` (one batch at a time: read before the next call). */
let scratch: Writer | null = null;
function scratchWriter(bytes: number): Writer {
  if (scratch === null || scratch.out.length < bytes) {
    const out = new Uint8Array(Math.max(bytes, 2 * (scratch?.out.length ?? 32 * 1024)));
    scratch = new Writer(out, new DataView(out.buffer));
  }
  scratch.pos = 0;
  return scratch;
}
