// XXH3-64 (xxHash v0.8) in AssemblyScript, compiled to WebAssembly by `npm run build:wasm`.
// Why hand-written: the router hashes every prompt block twice (local + chain) and a library call
// per block costs ~0.3-0.5 us of JS<->native overhead; one WASM call per prompt removes it.
// Verified against @node-rs/xxhash on every input length 0..1100 and the project's vectors.
// Memory: [0, 1 page) static data (the default secret), inputs and outputs from BASE upwards.

const P32_1: u64 = 0x9e3779b1;
const P32_2: u64 = 0x85ebca77;
const P32_3: u64 = 0xc2b2ae3d;
const P64_1: u64 = 0x9e3779b185ebca87;
const P64_2: u64 = 0xc2b2ae3d27d4eb4f;
const P64_3: u64 = 0x165667b19e3779f9;
const P64_4: u64 = 0x85ebca77c2b2ae63;
const P64_5: u64 = 0x27d4eb2f165667c5;
const PMX_1: u64 = 0x165667919e3779f9;
const PMX_2: u64 = 0x9fb21c651e98df25;

const SECRET_SIZE: usize = 192;
const SECRET = memory.data<u8>([
  0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c,
  0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f,
  0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21,
  0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c,
  0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3,
  0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8,
  0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d,
  0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64,
  0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb,
  0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e,
  0x2b, 0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce,
  0x45, 0xcb, 0x3a, 0x8f, 0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e,
]);
// Per-seed secret for inputs over 240 bytes, and the seed it was derived for.
const CUSTOM = memory.data(192, 16);
let customSeed: u64 = 0;
let customReady = false;
// Eight accumulators for the long path.
const ACC = memory.data(64, 16);

export const BASE: usize = 65536;

@inline function rd64(p: usize): u64 {
  return load<u64>(p);
}
@inline function rd32(p: usize): u64 {
  return <u64>load<u32>(p);
}

@inline function mul128fold64(a: u64, b: u64): u64 {
  const aLo = a & 0xffffffff;
  const aHi = a >> 32;
  const bLo = b & 0xffffffff;
  const bHi = b >> 32;
  const ll = aLo * bLo;
  const hl = aHi * bLo;
  const lh = aLo * bHi;
  const hh = aHi * bHi;
  const cross = (ll >> 32) + (hl & 0xffffffff) + lh;
  const upper = (hl >> 32) + (cross >> 32) + hh;
  // The low half of the product is the wrapping 64-bit product itself: one multiply, not a reassembly.
  return (a * b) ^ upper;
}

// A 64-bit byte swap as one SIMD byte shuffle: WebAssembly has no bswap, and its shifts and masks
// (bswap<u64>) are ~13 instructions in every chain step (a 32k-token prompt: ~30.5 -> ~29.3 us).
@inline function bswap64(x: u64): u64 {
  const v = i64x2.splat(x);
  return i64x2.extract_lane(i8x16.shuffle(v, v, 7, 6, 5, 4, 3, 2, 1, 0, 15, 14, 13, 12, 11, 10, 9, 8), 0);
}

@inline function avalanche(h: u64): u64 {
  h ^= h >> 37;
  h *= PMX_1;
  return h ^ (h >> 32);
}

@inline function xxh64Avalanche(h: u64): u64 {
  h ^= h >> 33;
  h *= P64_2;
  h ^= h >> 29;
  h *= P64_3;
  return h ^ (h >> 32);
}

@inline function rrmxmx(h: u64, len: u64): u64 {
  h ^= rotl<u64>(h, 49) ^ rotl<u64>(h, 24);
  h *= PMX_2;
  h ^= (h >> 35) + len;
  h *= PMX_2;
  return h ^ (h >> 28);
}

@inline function mix16(p: usize, s: usize, seed: u64): u64 {
  return mul128fold64(rd64(p) ^ (rd64(s) + seed), rd64(p + 8) ^ (rd64(s + 8) - seed));
}

function len0to16(p: usize, len: usize, seed: u64): u64 {
  const s = SECRET;
  if (len > 8) {
    const bf1 = (rd64(s + 24) ^ rd64(s + 32)) + seed;
    const bf2 = (rd64(s + 40) ^ rd64(s + 48)) - seed;
    const lo = rd64(p) ^ bf1;
    const hi = rd64(p + len - 8) ^ bf2;
    const acc = <u64>len + bswap64(lo) + hi + mul128fold64(lo, hi);
    return avalanche(acc);
  }
  if (len >= 4) {
    const sd = seed ^ (<u64>bswap<u32>(<u32>seed) << 32);
    const in1 = rd32(p);
    const in2 = rd32(p + len - 4);
    const bf = (rd64(s + 8) ^ rd64(s + 16)) - sd;
    const in64 = in2 + (in1 << 32);
    return rrmxmx(in64 ^ bf, <u64>len);
  }
  if (len > 0) {
    const c1 = <u32>load<u8>(p);
    const c2 = <u32>load<u8>(p + (len >> 1));
    const c3 = <u32>load<u8>(p + len - 1);
    const combined: u32 = (c1 << 16) | (c2 << 24) | c3 | (<u32>len << 8);
    const bf = (rd32(s) ^ rd32(s + 4)) + seed;
    return xxh64Avalanche(<u64>combined ^ bf);
  }
  return xxh64Avalanche(seed ^ (rd64(s + 56) ^ rd64(s + 64)));
}

function len17to128(p: usize, len: usize, seed: u64): u64 {
  const s = SECRET;
  let acc = <u64>len * P64_1;
  if (len > 32) {
    if (len > 64) {
      if (len > 96) {
        acc += mix16(p + 48, s + 96, seed);
        acc += mix16(p + len - 64, s + 112, seed);
      }
      acc += mix16(p + 32, s + 64, seed);
      acc += mix16(p + len - 48, s + 80, seed);
    }
    acc += mix16(p + 16, s + 32, seed);
    acc += mix16(p + len - 32, s + 48, seed);
  }
  acc += mix16(p, s, seed);
  acc += mix16(p + len - 16, s + 16, seed);
  return avalanche(acc);
}

function len129to240(p: usize, len: usize, seed: u64): u64 {
  const s = SECRET;
  let acc = <u64>len * P64_1;
  const rounds = len / 16;
  for (let i: usize = 0; i < 8; i++) acc += mix16(p + 16 * i, s + 16 * i, seed);
  acc = avalanche(acc);
  for (let i: usize = 8; i < rounds; i++) acc += mix16(p + 16 * i, s + 16 * (i - 8) + 3, seed);
  acc += mix16(p + len - 16, s + 136 - 17, seed);
  return avalanche(acc);
}

@inline function accumulate512(p: usize, s: usize): void {
  for (let i: usize = 0; i < 8; i++) {
    const v = rd64(p + 8 * i);
    const k = v ^ rd64(s + 8 * i);
    const swapped = ACC + 8 * (i ^ 1);
    store<u64>(swapped, load<u64>(swapped) + v);
    const here = ACC + 8 * i;
    store<u64>(here, load<u64>(here) + (k & 0xffffffff) * (k >> 32));
  }
}

@inline function scramble(s: usize): void {
  for (let i: usize = 0; i < 8; i++) {
    let a = load<u64>(ACC + 8 * i);
    a ^= a >> 47;
    a ^= rd64(s + 8 * i);
    a *= P32_1;
    store<u64>(ACC + 8 * i, a);
  }
}

function hashLong(p: usize, len: usize, seed: u64): u64 {
  let s = SECRET;
  if (seed != 0) {
    if (!customReady || customSeed != seed) {
      for (let i: usize = 0; i < SECRET_SIZE / 16; i++) {
        store<u64>(CUSTOM + 16 * i, rd64(SECRET + 16 * i) + seed);
        store<u64>(CUSTOM + 16 * i + 8, rd64(SECRET + 16 * i + 8) - seed);
      }
      customSeed = seed;
      customReady = true;
    }
    s = CUSTOM;
  }
  store<u64>(ACC, P32_3);
  store<u64>(ACC + 8, P64_1);
  store<u64>(ACC + 16, P64_2);
  store<u64>(ACC + 24, P64_3);
  store<u64>(ACC + 32, P64_4);
  store<u64>(ACC + 40, P32_2);
  store<u64>(ACC + 48, P64_5);
  store<u64>(ACC + 56, P32_1);
  const stripesPerBlock: usize = (SECRET_SIZE - 64) / 8;
  const blockLen: usize = 64 * stripesPerBlock;
  const blocks = (len - 1) / blockLen;
  for (let n: usize = 0; n < blocks; n++) {
    for (let k: usize = 0; k < stripesPerBlock; k++) accumulate512(p + n * blockLen + 64 * k, s + 8 * k);
    scramble(s + SECRET_SIZE - 64);
  }
  const stripes = (len - 1 - blockLen * blocks) / 64;
  for (let k: usize = 0; k < stripes; k++) accumulate512(p + blocks * blockLen + 64 * k, s + 8 * k);
  accumulate512(p + len - 64, s + SECRET_SIZE - 64 - 7);
  let result = <u64>len * P64_1;
  for (let i: usize = 0; i < 4; i++) {
    result += mul128fold64(load<u64>(ACC + 16 * i) ^ rd64(s + 11 + 16 * i), load<u64>(ACC + 16 * i + 8) ^ rd64(s + 11 + 16 * i + 8));
  }
  return avalanche(result);
}

/** XXH3-64 of `len` bytes at `p` with `seed`. */
export function xxh3(p: usize, len: usize, seed: u64): u64 {
  if (len <= 16) return len0to16(p, len, seed);
  if (len <= 128) return len17to128(p, len, seed);
  if (len <= 240) return len129to240(p, len, seed);
  return hashLong(p, len, seed);
}

// XXH3 of one 64-byte block (16 tokens, the common block size): len17to128's four mixes with
// the seed-keyed secret words in locals, computed once per prompt instead of once per block.
let K0: u64 = 0, K1: u64 = 0, K2: u64 = 0, K3: u64 = 0, K4: u64 = 0, K5: u64 = 0, K6: u64 = 0, K7: u64 = 0;

function keyBlock64(seed: u64): void {
  const s = SECRET;
  K0 = rd64(s) + seed;
  K1 = rd64(s + 8) - seed;
  K2 = rd64(s + 16) + seed;
  K3 = rd64(s + 24) - seed;
  K4 = rd64(s + 32) + seed;
  K5 = rd64(s + 40) - seed;
  K6 = rd64(s + 48) + seed;
  K7 = rd64(s + 56) - seed;
}

@inline function block64(p: usize, k0: u64, k1: u64, k2: u64, k3: u64, k4: u64, k5: u64, k6: u64, k7: u64): u64 {
  let acc: u64 = 64 * P64_1;
  acc += mul128fold64(rd64(p) ^ k0, rd64(p + 8) ^ k1);
  acc += mul128fold64(rd64(p + 48) ^ k2, rd64(p + 56) ^ k3);
  acc += mul128fold64(rd64(p + 16) ^ k4, rd64(p + 24) ^ k5);
  acc += mul128fold64(rd64(p + 32) ^ k6, rd64(p + 40) ^ k7);
  return avalanche(acc);
}

/**
 * Rolling sequence hashes of `blocks` complete blocks of `blockSize` u32 tokens at `tokens`,
 * written as u64 to `out`. `hasParent` continues a chain from `parent`.
 */
export function seqHashes(tokens: usize, blocks: usize, blockSize: usize, localSeed: u64, chainSeed: u64, hasParent: bool, parent: u64, out: usize): void {
  const stride = blockSize * 4;
  let prev = parent;
  let chained = hasParent;
  // The chain step is XXH3 of 16 bytes (le64 parent, le64 local): len0to16's 9..16-byte path on the
  // two words in registers, with its seed-derived words computed once per prompt, not per block.
  const s = SECRET;
  const bf1 = (rd64(s + 24) ^ rd64(s + 32)) + chainSeed;
  const bf2 = (rd64(s + 40) ^ rd64(s + 48)) - chainSeed;
  keyBlock64(localSeed);
  const k0 = K0, k1 = K1, k2 = K2, k3 = K3, k4 = K4, k5 = K5, k6 = K6, k7 = K7;
  if (stride == 64 && blocks > 0) {
    // The common case as its own loop: no per-block test of the block size or of a parent.
    let i: usize = 0;
    if (!chained) {
      prev = block64(tokens, k0, k1, k2, k3, k4, k5, k6, k7);
      store<u64>(out, prev);
      i = 1;
    }
    for (; i < blocks; i++) {
      const lo = prev ^ bf1;
      const hi = block64(tokens + i * 64, k0, k1, k2, k3, k4, k5, k6, k7) ^ bf2;
      prev = avalanche(16 + bswap64(lo) + hi + mul128fold64(lo, hi));
      store<u64>(out + 8 * i, prev);
    }
    return;
  }
  for (let i: usize = 0; i < blocks; i++) {
    const p = tokens + i * stride;
    const local = stride == 64 ? block64(p, k0, k1, k2, k3, k4, k5, k6, k7) : xxh3(p, stride, localSeed);
    let h = local;
    if (chained) {
      const lo = prev ^ bf1;
      const hi = local ^ bf2;
      h = avalanche(16 + bswap64(lo) + hi + mul128fold64(lo, hi));
    }
    store<u64>(out + 8 * i, h);
    prev = h;
    chained = true;
  }
}

/** Local block hashes only (no chaining). */
export function localHashes(tokens: usize, blocks: usize, blockSize: usize, localSeed: u64, out: usize): void {
  const stride = blockSize * 4;
  if (stride != 64) {
    for (let i: usize = 0; i < blocks; i++) store<u64>(out + 8 * i, xxh3(tokens + i * stride, stride, localSeed));
    return;
  }
  keyBlock64(localSeed);
  const k0 = K0, k1 = K1, k2 = K2, k3 = K3, k4 = K4, k5 = K5, k6 = K6, k7 = K7;
  for (let i: usize = 0; i < blocks; i++) store<u64>(out + 8 * i, block64(tokens + i * 64, k0, k1, k2, k3, k4, k5, k6, k7));
}
