// The hashing standard (Mooncake Conductor / RFC #1527, Dynamo-compatible):
//   local[i] = XXH3-64(le32(tokens of block i), localSeed)
//   seq[0]   = local[0]
//   seq[i]   = XXH3-64(le64(seq[i-1]) || le64(local[i]), chainSeed)
// Only complete blocks are hashed. With no LoRA and no salt, localSeed == chainSeed == S.
import { loadWasmXxh3 } from './wasm-xxh3.js';
import { U64_MASK, xxh3_64 } from './xxh3.js';

// The WASM build hashes a prompt in one call; without it (dist/ not built) we fall back to the
// library per block, with identical results.
const wasm = loadWasmXxh3();

/** Which XXH3 implementation hashes prompts: 'wasm' (batch) or 'native' (@node-rs/xxhash per block). */
export function hashingBackend(): 'wasm' | 'native' {
  return wasm ? 'wasm' : 'native';
}

export const DEFAULT_HASH_SEED = 1337n;

/** Seeds for one hash space (model pool seed + LoRA + salt). */
export interface HashSpace {
  readonly localSeed: bigint;
  readonly chainSeed: bigint;
}

export interface HashSpaceOptions {
  /** Base seed S (default 1337). */
  seed?: bigint;
  /** LoRA adapter name; empty/null means the base model. */
  loraName?: string | null;
  /** `cache_salt` / `additional_salt`; empty/null means none. */
  salt?: string | null;
}

const spaceCache = new Map<string, HashSpace>();

/**
 * Dynamo's derivation: localSeed = S + XXH3(lora, 0) + XXH3(salt, 1) (wrapping u64),
 * the chain step always uses S. Empty strings count as absent.
 */
export function hashSpace(opts: HashSpaceOptions = {}): HashSpace {
  const seed = (opts.seed ?? DEFAULT_HASH_SEED) & U64_MASK;
  const lora = opts.loraName ?? '';
  const salt = opts.salt ?? '';
  const key = `${seed}\u0000${lora}\u0000${salt}`;
  let space = spaceCache.get(key);
  if (space) return space;
  let localSeed = seed;
  if (lora !== '') localSeed = (localSeed + xxh3_64(lora, 0n)) & U64_MASK;
  if (salt !== '') localSeed = (localSeed + xxh3_64(salt, 1n)) & U64_MASK;
  space = Object.freeze({ localSeed, chainSeed: seed });
  if (spaceCache.size > 4096) spaceCache.clear();
  spaceCache.set(key, space);
  return space;
}

function asU32(tokens: ArrayLike<number>, count: number): Uint32Array {
  if (tokens instanceof Uint32Array) return tokens;
  const out = new Uint32Array(count);
  for (let i = 0; i < count; i++) {
    const t = tokens[i];
    if (!Number.isInteger(t) || t < 0 || t > 0xffffffff) {
      throw new RangeError(`token id at ${i} is not a u32: ${String(t)}`);
    }
    out[i] = t;
  }
  return out;
}

/** Number of complete blocks in `tokenCount` tokens. */
export function completeBlocks(tokenCount: number, blockSize: number): number {
  return Math.floor(tokenCount / blockSize);
}

/** Local block hashes of every complete block. */
export function localBlockHashes(tokens: ArrayLike<number>, blockSize: number, space: HashSpace): BigUint64Array {
  checkBlockSize(blockSize);
  const n = completeBlocks(tokens.length, blockSize);
  const u32 = asU32(tokens, n * blockSize);
  if (wasm) return wasm.blocks(u32, blockSize, space.localSeed, null, null);
  const bytes = new Uint8Array(u32.buffer, u32.byteOffset, n * blockSize * 4);
  const out = new BigUint64Array(n);
  const stride = blockSize * 4;
  for (let i = 0; i < n; i++) out[i] = xxh3_64(bytes.subarray(i * stride, (i + 1) * stride), space.localSeed);
  return out;
}

const chainScratch = new BigUint64Array(2);
const chainBytes = new Uint8Array(chainScratch.buffer);

/** One rolling step: XXH3(le64(parent) || le64(local), chainSeed). */
export function chainHash(parent: bigint, local: bigint, chainSeed: bigint): bigint {
  chainScratch[0] = parent;
  chainScratch[1] = local;
  return xxh3_64(chainBytes, chainSeed);
}

/**
 * Rolling sequence hashes of every complete block (the router's hot path).
 * `parent` continues a chain (the seq hash of the block before tokens[0]); null starts at the root.
 */
export function seqHashes(
  tokens: ArrayLike<number>,
  blockSize: number,
  space: HashSpace,
  parent: bigint | null = null,
): BigUint64Array {
  if (wasm) {
    checkBlockSize(blockSize);
    return wasm.blocks(tokens, blockSize, space.localSeed, space.chainSeed, parent);
  }
  const locals = localBlockHashes(tokens, blockSize, space);
  return chainLocals(locals, space, parent);
}

/**
 * seqHashes() whose result may be a view into hashing scratch memory, valid only until the next
 * hashing call: for callers that consume it at once (the event applier stores it into the index).
 */
export function seqHashesTransient(
  tokens: ArrayLike<number>,
  blockSize: number,
  space: HashSpace,
  parent: bigint | null = null,
): BigUint64Array {
  if (!wasm) return seqHashes(tokens, blockSize, space, parent);
  checkBlockSize(blockSize);
  return wasm.blocks(tokens, blockSize, space.localSeed, space.chainSeed, parent, true);
}

/** Turn local block hashes into sequence hashes (in place of a copy). */
export function chainLocals(locals: BigUint64Array, space: HashSpace, parent: bigint | null = null): BigUint64Array {
  const out = new BigUint64Array(locals.length);
  let prev = parent;
  for (let i = 0; i < locals.length; i++) {
    const h = prev === null ? locals[i] : chainHash(prev, locals[i], space.chainSeed);
    out[i] = h;
    prev = h;
  }
  return out;
}

function checkBlockSize(blockSize: number): void {
  if (!Number.isInteger(blockSize) || blockSize <= 0 || blockSize > 1 << 20) {
    throw new RangeError(`block_size must be a positive integer, got ${String(blockSize)}`);
  }
}
