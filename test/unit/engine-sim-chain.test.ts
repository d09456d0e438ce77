// The engine's block chain (chain.ts) against the hashing standard computed per block: the router
// seq hashes it continues in batches (from the last block's hash) equal one chain over the whole
// sequence, whatever the split points, with and without LoRA and salt.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ChunkArena } from '../../src/common/chunk-arena.js';
import { extendChain, type ChainContext } from '../../src/engine-sim/core/chain.js';
import { blockKey } from '../../src/engine-sim/core/block.js';
import { makeHasher, murmurHasher, sglangHasher, vllmHasher } from '../../src/engine-sim/core/engine-hash.js';
import { SimRequest } from '../../src/engine-sim/core/request.js';
import { Rng } from '../../src/engine-sim/core/rng.js';
import { chainHash, hashSpace, localBlockHashes } from '../../src/hashing/index.js';

/** The standard block by block: one local hash and one chain step per block (no batch call). */
function perBlock(tokens: Uint32Array, bs: number, seed: bigint, lora: string | null, salt: string | null): bigint[] {
  const space = hashSpace({ seed, loraName: lora, salt });
  const out: bigint[] = [];
  for (let i = 0; i < Math.floor(tokens.length / bs); i++) {
    const local = localBlockHashes(tokens.subarray(i * bs, (i + 1) * bs), bs, space)[0];
    out.push(i === 0 ? local : chainHash(out[i - 1], local, space.chainSeed));
  }
  return out;
}

function request(prompt: Uint32Array, lora: string | null, salt: string | null): SimRequest {
  const arena = new ChunkArena((n) => new Uint32Array(n), 1 << 12);
  return new SimRequest(
    { id: 'r', prompt, maxTokens: 1, loraName: lora, cacheSalt: salt },
    0,
    new Rng(1),
    arena.alloc(prompt.length + 1),
  );
}

describe('engine chain: router seq hashes', () => {
  it('equal the per-block standard for any split of the sequence into extensions', () => {
    fc.assert(
      fc.property(
        fc.constantFrom(1, 4, 16),
        fc.uint32Array({ minLength: 1, maxLength: 200 }),
        fc.array(fc.integer({ min: 0, max: 60 }), { maxLength: 6 }),
        fc.constantFrom(null, 'lora-a'),
        fc.constantFrom(null, 'salt-x'),
        fc.constantFrom(1337n, 7n),
        fc.constantFrom('murmur', 'vllm', 'sglang') as fc.Arbitrary<'murmur' | 'vllm' | 'sglang'>,
        (bs, prompt, steps, lora, salt, seed, flavor) => {
          const ctx: ChainContext = { hasher: makeHasher(flavor, '0'), blockSize: bs, routerSeed: seed };
          const req = request(prompt, lora, salt);
          let n = 0;
          for (const s of steps) extendChain(ctx, req, (n += s));
          const chain = extendChain(ctx, req, prompt.length);
          const want = perBlock(prompt, bs, seed, lora, salt);
          expect(chain.map((c) => c.routerHash)).toEqual(want);
          // The engine's own chain links and extra keys, block by block.
          for (let i = 0; i < chain.length; i++) {
            expect(chain[i].depth).toBe(i);
            expect(chain[i].parent).toBe(i === 0 ? null : chain[i - 1].hash);
            expect(blockKey(chain[i])).toBe(Number(chain[i].hash & 0x3fffffffn));
            const extra = [...(lora ? [lora] : []), ...(i === 0 && salt ? [salt] : [])];
            expect(chain[i].extraKeys).toEqual(extra.length > 0 ? extra : null);
          }
        },
      ),
      { numRuns: 300 },
    );
  });

  it('a second context with another seed does not reuse the first one space', () => {
    const prompt = Uint32Array.from({ length: 64 }, (_, i) => i * 7 + 1);
    const a = extendChain(
      { hasher: makeHasher('murmur', '0'), blockSize: 16, routerSeed: 1n },
      request(prompt, null, null),
      4,
    );
    const b = extendChain(
      { hasher: makeHasher('murmur', '0'), blockSize: 16, routerSeed: 2n },
      request(prompt, null, null),
      4,
    );
    expect(a.map((c) => c.routerHash)).toEqual(perBlock(prompt, 16, 1n, null, null));
    expect(b.map((c) => c.routerHash)).toEqual(perBlock(prompt, 16, 2n, null, null));
  });
});

describe('murmur engine hash: digests written in place', () => {
  /** The id as the bytes say, big-endian (the definition, computed apart from the hasher). */
  const idOf = (d: Uint8Array) => d.reduce((acc, b) => (acc << 8n) | BigInt(b), 0n);

  it('a digest written into an earlier one (even its parent) equals a fresh one, and its id is its bytes', () => {
    fc.assert(
      fc.property(
        fc.array(fc.uint32Array({ minLength: 16, maxLength: 16 }), { minLength: 1, maxLength: 8 }),
        fc.constantFrom<string[] | null>(null, ['lora-a'], ['lora-a', 'salt']),
        (blocks, extra) => {
          const h = murmurHasher();
          let fresh: Uint8Array | null = null;
          let inPlace: Uint8Array | null = null;
          const scratch = new Uint8Array(8);
          for (const t of blocks) {
            fresh = h.digest(fresh, t, extra);
            // The request's way: the previous digest is both the parent and where the next one goes.
            inPlace = h.digest(inPlace, t, extra, inPlace ?? scratch);
            expect([...inPlace]).toEqual([...fresh]);
            expect(h.id(inPlace)).toBe(idOf(fresh));
          }
          expect(inPlace).toBe(scratch);
        },
      ),
      { numRuns: 200 },
    );
  });
});

describe('engine hash over a range of tokens', () => {
  it('hashes tokens[at, at + len) as it hashes a copy of them, for every flavor', () => {
    fc.assert(
      fc.property(
        fc.uint32Array({ minLength: 1, maxLength: 40 }),
        fc.nat(),
        fc.nat(),
        fc.constantFrom<string[] | null>(null, ['lora-a']),
        (tokens, a, b, extra) => {
          const at = a % tokens.length;
          const len = 1 + (b % (tokens.length - at));
          for (const h of [murmurHasher(), vllmHasher('7'), sglangHasher()]) {
            for (const parent of [null, h.digest(null, tokens.slice(0, 1), null)]) {
              const copy = h.digest(parent, tokens.slice(at, at + len), extra);
              const inPlace = h.digest(parent, tokens, extra, null, at, len);
              expect([...inPlace]).toEqual([...copy]);
            }
          }
        },
      ),
      { numRuns: 200 },
    );
  });
});

describe('engine hash keys', () => {
  it("a digest's key is its id's low 30 bits (blockKey of the id), for every flavor", () => {
    fc.assert(
      fc.property(
        fc.array(fc.uint32Array({ minLength: 4, maxLength: 4 }), { minLength: 1, maxLength: 4 }),
        fc.constantFrom<string[] | null>(null, ['lora-a']),
        (blocks, extra) => {
          for (const h of [murmurHasher(), vllmHasher('7'), sglangHasher()]) {
            let d: Uint8Array | null = null;
            for (const t of blocks) {
              d = h.digest(d, t, extra);
              expect(h.key(d)).toBe(Number(h.id(d) & 0x3fffffffn));
              expect(blockKey({ hash: h.id(d) })).toBe(h.key(d));
            }
          }
        },
      ),
      { numRuns: 100 },
    );
  });
});
