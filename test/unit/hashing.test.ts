import { describe, expect, it } from 'vitest';
import { chainHash, hashSpace, localBlockHashes, seqHashes, xxh3_64 } from '../../src/hashing/index.js';
import { fixture } from '../helpers/fixtures.js';

type Hex = { dec: string; hex: string };
interface Case {
  name: string;
  seed: Hex;
  block_size: number;
  tokens: number[];
  local_block_hashes: { dec: string[] };
  seq_hashes: { dec: string[] };
  second_seq_input_bytes_hex?: string;
}
const vectors = JSON.parse(fixture('xxh3_vectors.json')) as {
  sanity: Record<string, Hex>;
  cases: Case[];
  dynamo_compat_informational: Record<string, unknown> & {
    lora_name: string;
    cache_salt: string;
    local_seed_lora_only: Hex;
    local_seed_lora_and_salt: Hex;
    lora_only_bs4_tokens1to12: { local_block_hashes: { dec: string[] }; seq_hashes: { dec: string[] } };
    lora_and_salt_bs4_tokens1to12: { local_block_hashes: { dec: string[] }; seq_hashes: { dec: string[] } };
  };
};
const big = (xs: string[]) => xs.map((x) => BigInt(x));

describe('XXH3-64 sanity values', () => {
  const enc = (s: string) => new TextEncoder().encode(s);
  const cases: Array<[string, Uint8Array, bigint]> = [
    ['xxh3_64(empty, seed=0)', new Uint8Array(0), 0n],
    ['xxh3_64(empty, seed=42)', new Uint8Array(0), 42n],
    ['xxh3_64(empty, seed=1337)', new Uint8Array(0), 1337n],
    ['xxh3_64("a" utf8, seed=0)', enc('a'), 0n],
    ['xxh3_64("abc" utf8, seed=0)', enc('abc'), 0n],
    ['xxh3_64(u32_le(1), seed=0)', new Uint8Array([1, 0, 0, 0]), 0n],
    ['xxh3_64(empty, seed=2^64-1)', new Uint8Array(0), (1n << 64n) - 1n],
  ];
  for (const [name, bytes, seed] of cases) {
    it(name, () => expect(xxh3_64(bytes, seed)).toBe(BigInt(vectors.sanity[name].dec)));
  }
});

describe('hashing standard vectors', () => {
  for (const c of vectors.cases) {
    it(c.name, () => {
      const space = hashSpace({ seed: BigInt(c.seed.dec) });
      expect([...localBlockHashes(c.tokens, c.block_size, space)]).toEqual(big(c.local_block_hashes.dec));
      expect([...seqHashes(c.tokens, c.block_size, space)]).toEqual(big(c.seq_hashes.dec));
      // Uint32Array input takes the zero-copy path and must agree.
      expect([...seqHashes(Uint32Array.from(c.tokens), c.block_size, space)]).toEqual(big(c.seq_hashes.dec));
    });
  }

  it('a chain can be continued from a parent', () => {
    const c = vectors.cases[0];
    const space = hashSpace({ seed: 0n });
    const all = seqHashes(c.tokens, 4, space);
    const tail = seqHashes(c.tokens.slice(4), 4, space, all[0]);
    expect([...tail]).toEqual([...all.slice(1)]);
    expect(chainHash(all[0], localBlockHashes(c.tokens, 4, space)[1], 0n)).toBe(all[1]);
  });

  it('rejects non-u32 tokens and bad block sizes', () => {
    const space = hashSpace();
    expect(() => seqHashes([1, 2, -1, 4], 4, space)).toThrow(/u32/);
    expect(() => seqHashes([1, 2, 3, 2 ** 32], 4, space)).toThrow(/u32/);
    expect(() => seqHashes([1, 2, 3, 4], 0, space)).toThrow(/block_size/);
  });
});

describe('LoRA and salt hash spaces (Dynamo derivation)', () => {
  const d = vectors.dynamo_compat_informational;
  const tokens = Array.from({ length: 12 }, (_, i) => i + 1);

  it('derives the local seed', () => {
    expect(hashSpace({ loraName: d.lora_name }).localSeed).toBe(BigInt(d.local_seed_lora_only.dec));
    expect(hashSpace({ loraName: d.lora_name, salt: d.cache_salt }).localSeed).toBe(
      BigInt(d.local_seed_lora_and_salt.dec),
    );
    expect(hashSpace({ loraName: d.lora_name }).chainSeed).toBe(1337n);
  });

  it('reproduces LoRA-only and LoRA+salt vectors', () => {
    const lora = hashSpace({ loraName: d.lora_name });
    expect([...localBlockHashes(tokens, 4, lora)]).toEqual(big(d.lora_only_bs4_tokens1to12.local_block_hashes.dec));
    expect([...seqHashes(tokens, 4, lora)]).toEqual(big(d.lora_only_bs4_tokens1to12.seq_hashes.dec));
    const both = hashSpace({ loraName: d.lora_name, salt: d.cache_salt });
    expect([...seqHashes(tokens, 4, both)]).toEqual(big(d.lora_and_salt_bs4_tokens1to12.seq_hashes.dec));
  });

  it('empty or null LoRA and salt give the plain standard', () => {
    const plain = hashSpace();
    expect(hashSpace({ loraName: '', salt: null })).toEqual(plain);
    expect(plain.localSeed).toBe(1337n);
  });
});

describe('WASM XXH3 agrees with @node-rs/xxhash', () => {
  it('is the active backend (dist/ is built by the global setup)', async () => {
    const { hashingBackend } = await import('../../src/hashing/index.js');
    expect(hashingBackend()).toBe('wasm');
  });

  it('on every input length 0..1100 and several seeds', async () => {
    const { loadWasmXxh3 } = await import('../../src/hashing/wasm-xxh3.js');
    const wasm = loadWasmXxh3()!;
    const bytes = new Uint8Array(1100);
    let x = 12345;
    for (let i = 0; i < bytes.length; i++) bytes[i] = (x = (Math.imul(x, 1103515245) + 12345) >>> 0) >>> 24;
    for (const seed of [0n, 1337n, (1n << 64n) - 1n, (1n << 32n) + 1n, 0x9e3779b97f4a7c15n]) {
      for (let len = 0; len <= 1100; len++) {
        const input = bytes.subarray(0, len);
        if (wasm.xxh3(input, seed) !== xxh3_64(input, seed)) throw new Error(`mismatch at len ${len} seed ${seed}`);
      }
    }
  });

  it('hashes whole prompts exactly like the per-block library path, for many block sizes', async () => {
    const { loadWasmXxh3 } = await import('../../src/hashing/wasm-xxh3.js');
    const wasm = loadWasmXxh3()!;
    const tokens = Uint32Array.from({ length: 4100 }, (_, i) => (Math.imul(i + 1, 2654435761) >>> 0) % 152000);
    const space = hashSpace({ loraName: 'a', salt: 'b' });
    for (const bs of [1, 2, 3, 4, 5, 8, 15, 16, 17, 31, 32, 33, 59, 60, 61, 64, 128, 256, 1024]) {
      const locals: bigint[] = [];
      const seq: bigint[] = [];
      for (let b = 0; (b + 1) * bs <= tokens.length; b++) {
        const blk = new Uint8Array(tokens.buffer, b * bs * 4, bs * 4);
        const local = xxh3_64(blk, space.localSeed);
        locals.push(local);
        seq.push(b === 0 ? local : chainHash(seq[b - 1], local, space.chainSeed));
      }
      expect([...wasm.blocks(tokens, bs, space.localSeed, null, null)]).toEqual(locals);
      expect([...wasm.blocks(tokens, bs, space.localSeed, space.chainSeed, null)]).toEqual(seq);
      if (seq.length > 1)
        expect([...wasm.blocks(tokens.subarray(bs), bs, space.localSeed, space.chainSeed, seq[0])]).toEqual(
          seq.slice(1),
        );
      // Short prompts (the 64-byte block loop's first block and its end), alone and continued.
      for (const n of [1, 2, 3].filter((k) => k + 1 < seq.length)) {
        expect([...wasm.blocks(tokens.subarray(0, n * bs), bs, space.localSeed, space.chainSeed, null)]).toEqual(
          seq.slice(0, n),
        );
        expect([
          ...wasm.blocks(tokens.subarray(bs, (n + 1) * bs), bs, space.localSeed, space.chainSeed, seq[0]),
        ]).toEqual(seq.slice(1, n + 1));
      }
    }
  });
});
