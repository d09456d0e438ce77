// The direct map-layout writer against the generic path (render + msgpack): same bytes, or null.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { type BlockContent, ChainContent } from '../../src/engine-sim/core/block.js';
import type { CoreKvEvent } from '../../src/engine-sim/core/kv-events.js';
import { vllmEncoder } from '../../src/engine-sim/events/vllm-format.js';
import { encodeMapBatch } from '../../src/engine-sim/events/vllm-map-writer.js';
import { encodeBatch, type WireContext } from '../../src/engine-sim/events/wire.js';

const ctx = (blockSize: number): WireContext => ({
  blockSize,
  modelName: 'm',
  dpRank: 0,
  loraIds: new Map([['ad', 3]]),
  tenantId: 't',
  backendId: 'b',
});

// Token ids across msgpack's integer widths (fixint, uint 8, 16, 32).
const token = fc.oneof(
  fc.integer({ min: 0, max: 0x7f }),
  fc.integer({ min: 0x80, max: 0xff }),
  fc.integer({ min: 0x100, max: 0xffff }),
  fc.integer({ min: 0x10000, max: 0xffffffff }),
);
const u64 = fc.bigInt({ min: 0n, max: 2n ** 64n - 1n });

function block(hash: bigint, parent: bigint | null, tokens: number[], lora: boolean): BlockContent {
  return {
    hash,
    parent,
    depth: 0,
    tokens: Uint32Array.from(tokens),
    routerHash: 1n,
    loraName: lora ? 'ad' : null,
    cacheSalt: null,
    extraKeys: lora ? ['ad'] : null,
  };
}

/** The engine's own content: its tokens a range (at `at`) of an array it shares with other blocks. */
function chained(hash: bigint, parent: bigint | null, tokens: number[], lora: boolean, at: number): BlockContent {
  const shared = new Uint32Array(at + tokens.length + 3).fill(0xdead);
  shared.set(tokens, at);
  return new ChainContent(
    hash,
    parent,
    0,
    shared,
    at,
    tokens.length,
    1n,
    lora ? 'ad' : null,
    null,
    lora ? ['ad'] : null,
    Number(hash & 0x3fffffffn),
  );
}

const event = (bs: number): fc.Arbitrary<CoreKvEvent> =>
  fc.oneof(
    fc.constant<CoreKvEvent>({ type: 'cleared' }),
    fc
      .record({
        medium: fc.constantFrom('GPU' as const, 'CPU' as const),
        hashes: fc.array(u64, { minLength: 1, maxLength: 20 }),
        parent: fc.option(u64),
        tokens: fc.array(token, { minLength: bs, maxLength: bs }),
        removed: fc.boolean(),
        lora: fc.integer({ min: 0, max: 4 }).map((n) => n === 0),
        // Engine contents (a range of a shared array, from this offset) or plain ones (-1).
        at: fc.integer({ min: -1, max: 40 }),
      })
      .map(({ medium, hashes, parent, tokens, removed, lora, at }) => {
        const blocks = hashes.map((h, i) =>
          at < 0
            ? block(h, i === 0 ? parent : hashes[i - 1], tokens, lora)
            : chained(h, i === 0 ? parent : hashes[i - 1], tokens, lora, at + i),
        );
        return { type: removed ? 'removed' : 'stored', medium, blocks } as CoreKvEvent;
      }),
  );

describe('vLLM map-layout writer', () => {
  it('writes the bytes of render + encodeBatch, or null for what only the generic path writes', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 300 }),
        fc.integer({ min: 0, max: 70_000 }),
        fc.double({ noNaN: true, noDefaultInfinity: true }),
        fc.integer({ min: 1, max: 8 }).chain((bs) => fc.tuple(fc.constant(bs), fc.array(event(bs), { maxLength: 12 }))),
        (blockSize, rank, ts, [, events]) => {
          const c = ctx(blockSize);
          const fast = encodeMapBatch(ts, events, blockSize, rank);
          const special = events.some((e) => e.type === 'stored' && e.blocks[0].loraName !== null);
          if (special) {
            expect(fast).toBeNull();
            return;
          }
          expect(fast).not.toBeNull();
          expect(Buffer.from(fast!).toString('hex')).toBe(
            Buffer.from(encodeBatch(ts, vllmEncoder(c, 'map').render(events, 0), rank)).toString('hex'),
          );
        },
      ),
      { numRuns: 400, seed: 11 },
    );
  });

  it('writes long token arrays (array 32) and leaves hybrid groups to the generic path', () => {
    const tokens = Array.from({ length: 16 }, (_, i) => 70_000 + i);
    const blocks = Array.from({ length: 4100 }, (_, i) =>
      block(BigInt(i + 1), i === 0 ? null : BigInt(i), tokens, false),
    );
    const events: CoreKvEvent[] = [{ type: 'stored', medium: 'GPU', blocks }];
    const fast = encodeMapBatch(12.5, events, 16, 0)!;
    expect(
      Buffer.from(fast).equals(Buffer.from(encodeBatch(12.5, vllmEncoder(ctx(16), 'map').render(events, 0), 0))),
    ).toBe(true);
    // A short batch after it (written over the long one's scratch bytes) is its own bytes alone.
    const short: CoreKvEvent[] = [{ type: 'stored', medium: 'CPU', blocks: blocks.slice(7, 9) }];
    const again = encodeMapBatch(3.25, short, 16, 2)!;
    expect(Buffer.from(again).toString('hex')).toBe(
      Buffer.from(encodeBatch(3.25, vllmEncoder(ctx(16), 'map').render(short, 0), 2)).toString('hex'),
    );
    const group = { idx: 1, kind: 'sliding_window' as const, window: 64, blockSize: 16 };
    expect(
      encodeMapBatch(1, [{ type: 'removed', medium: 'GPU', blocks: blocks.slice(0, 1), group }], 16, 0),
    ).toBeNull();
  });
});
