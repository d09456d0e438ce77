// Engine blocks larger than the registration's block size (LMCache chunks of 256 tokens, vLLM with
// DCP/PCP where block_size is multiplied by the world size) would land in a namespace no query uses.
// When the engine block size is a multiple k of the registered one, each engine block is split into k
// router blocks. The engine hash names the chunk's last router block (so a child's parent_block_hash
// resolves to the right depth); the others get derived ids mix(H, i), which a removal of H expands to.
import { xxh3_64 } from '../../hashing/index.js';
import type { U32List, U64List } from '../../indexer/kv-event.js';

const MIX_SEED = 0x6b76_726f_7574_6572n; // "kvrouter"
const scratch = new Uint8Array(12);
const view = new DataView(scratch.buffer);

/** Engine id of router block i (< k-1) inside the engine block H. */
export function subBlockId(h: bigint, i: number): bigint {
  view.setBigUint64(0, h, true);
  view.setUint32(8, i, true);
  return xxh3_64(scratch, MIX_SEED);
}

export interface Chunked {
  hashes: U64List;
  tokens: U32List;
}

/** Router blocks per engine block, rounded up: removals expand to this many ids. */
export function splitRatio(engineSize: number, routerSize: number): number {
  return Math.ceil(engineSize / routerSize);
}

/**
 * Split `hashes.length` engine blocks of `engineSize` tokens into router blocks of `routerSize`.
 * An engine block that does not end on a router block boundary (LMCache's final partial chunk, or
 * a chunk size that is not a multiple) keeps its complete router blocks under derived ids only, so
 * a child naming it as parent is reported as an orphan instead of being hashed at the wrong offset.
 */
export function splitBlocks(hashes: U64List, tokens: U32List, engineSize: number, routerSize: number): Chunked {
  const out: bigint[] = [];
  let used = 0;
  for (let c = 0; c < hashes.length; c++) {
    const start = c * engineSize;
    const len = Math.min(engineSize, tokens.length - start);
    const m = len > 0 ? Math.floor(len / routerSize) : 0;
    const aligned = len === m * routerSize;
    for (let i = 0; i < (aligned ? m - 1 : m); i++) out.push(subBlockId(hashes[c], i));
    if (aligned && m > 0) out.push(hashes[c]);
    used += m * routerSize;
    if (!aligned || len < engineSize) break; // later engine blocks would start mid router block
  }
  return { hashes: out, tokens: tokens.length === used ? tokens : tokens.slice(0, used) };
}

/** Engine ids a removal of engine blocks `hashes` must remove when blocks were split by `ratio`. */
export function expandRemoved(hashes: U64List, ratio: number): U64List {
  if (ratio <= 1) return hashes;
  const out: bigint[] = [];
  for (const h of hashes) {
    for (let i = 0; i < ratio - 1; i++) out.push(subBlockId(h, i));
    out.push(h);
  }
  return out;
}
