// Loader for the WebAssembly XXH3 (src/hashing/wasm/xxh3.ts, built to dist/hashing/xxh3.wasm):
// one call hashes a whole prompt, instead of two native calls per block.
import { readFileSync } from 'node:fs';
import { builtFile } from '../common/built-file.js';

// The few WebAssembly JS API types used here (Node's globals; not in @types/node's lib set).
interface WasmMemory {
  readonly buffer: ArrayBuffer;
  grow(pages: number): number;
}
declare const WebAssembly: {
  Module: new (bytes: Uint8Array) => object;
  Instance: new (module: object, imports: object) => { exports: object };
};

interface Exports {
  memory: WasmMemory;
  BASE: { value: number };
  xxh3(p: number, len: number, seed: bigint): bigint;
  seqHashes(
    tokens: number,
    blocks: number,
    blockSize: number,
    localSeed: bigint,
    chainSeed: bigint,
    hasParent: number,
    parent: bigint,
    out: number,
  ): void;
  localHashes(tokens: number, blocks: number, blockSize: number, localSeed: bigint, out: number): void;
}

export interface WasmXxh3 {
  xxh3(bytes: Uint8Array, seed: bigint): bigint;
  /**
   * Seq hashes (or local hashes when `chainSeed` is null) of the complete blocks in `tokens`
   * (u32 each: anything else throws a RangeError). `transient`: the result is a view into WASM
   * memory, valid only until the next call (spares an allocation on the event path).
   */
  blocks(
    tokens: ArrayLike<number>,
    blockSize: number,
    localSeed: bigint,
    chainSeed: bigint | null,
    parent: bigint | null,
    transient?: boolean,
  ): BigUint64Array;
}

export function loadWasmXxh3(): WasmXxh3 | null {
  const path = builtFile(import.meta.url, 'xxh3.wasm');
  if (!path) return null;
  let instance: { exports: object };
  try {
    instance = new WebAssembly.Instance(new WebAssembly.Module(readFileSync(path)), {});
  } catch {
    return null; // a runtime without WebAssembly SIMD (the module uses it): the library hashes instead
  }
  const ex = instance.exports as unknown as Exports;
  const base = Number(ex.BASE.value);
  if (base % 8 !== 0) return null; // the views below need an aligned base
  // Whole-memory views, re-made only when the memory grows: a typed-array view costs ~0.2 us.
  let memBuf: ArrayBuffer | null = null;
  let mem32 = new Uint32Array(0);
  let mem64 = new BigUint64Array(0);
  const ensure = (bytes: number) => {
    const need = base + bytes;
    const have = ex.memory.buffer.byteLength;
    if (need > have) ex.memory.grow(Math.ceil((need - have) / 65536));
    if (ex.memory.buffer !== memBuf) {
      memBuf = ex.memory.buffer;
      mem32 = new Uint32Array(memBuf);
      mem64 = new BigUint64Array(memBuf);
    }
  };
  return {
    xxh3(bytes, seed) {
      ensure(bytes.length);
      new Uint8Array(ex.memory.buffer, base, bytes.length).set(bytes);
      return BigInt.asUintN(64, ex.xxh3(base, bytes.length, seed));
    },
    blocks(tokens, blockSize, localSeed, chainSeed, parent, transient = false) {
      const n = Math.floor(tokens.length / blockSize);
      if (n === 0) return new BigUint64Array(0);
      const count = n * blockSize;
      const inBytes = count * 4;
      const outAt = base + ((inBytes + 7) & ~7);
      ensure(outAt - base + n * 8);
      const at = base >> 2;
      if (tokens instanceof Uint32Array) mem32.set(count === tokens.length ? tokens : tokens.subarray(0, count), at);
      else {
        // Validated while copying (no intermediate Uint32Array).
        const m = mem32;
        for (let i = 0; i < count; i++) {
          const t = tokens[i];
          if (!Number.isInteger(t) || t < 0 || t > 0xffffffff)
            throw new RangeError(`token id at ${i} is not a u32: ${String(t)}`);
          m[at + i] = t;
        }
      }
      if (chainSeed === null) ex.localHashes(base, n, blockSize, localSeed, outAt);
      else ex.seqHashes(base, n, blockSize, localSeed, chainSeed, parent === null ? 0 : 1, parent ?? 0n, outAt);
      const o = outAt >> 3;
      return transient ? mem64.subarray(o, o + n) : mem64.slice(o, o + n);
    },
  };
}
