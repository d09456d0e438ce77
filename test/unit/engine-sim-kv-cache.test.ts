// The engine's KV cache keys its committed blocks by a 30-bit key (blockKey), not by their u64
// hash: blocks whose keys clash must still be found, committed, evicted and reset by hash alone.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { BlockContent, GpuBlock } from '../../src/engine-sim/core/block.js';
import type { CoreKvEvent } from '../../src/engine-sim/core/kv-events.js';
import { KvCache } from '../../src/engine-sim/core/kv-cache.js';

/** A few keys' low values. */
const LOWS = [0, 1, 15, 31];
/** Hashes of few keys: low 30 bits from LOWS, high bits from a handful more. */
const hashOf = (low: number, high: number): bigint => (BigInt(high) << 30n) | BigInt(LOWS[low]);

function content(hash: bigint): BlockContent {
  return {
    hash,
    parent: null,
    depth: 0,
    tokens: new Uint32Array([Number(hash & 0xffffn), 1]),
    routerHash: hash,
    loraName: null,
    cacheSalt: null,
    extraKeys: null,
  };
}

/** The GPU set as the events tell it (the reference: by hash). */
function applyEvents(set: Set<bigint>, events: readonly CoreKvEvent[]): void {
  for (const ev of events) {
    if (ev.type === 'cleared') set.clear();
    else if (ev.medium === 'GPU')
      for (const b of ev.blocks) ev.type === 'stored' ? set.add(b.hash) : set.delete(b.hash);
  }
}

describe('engine-sim KvCache with clashing keys', () => {
  it('finds, commits, evicts and resets blocks by hash as a map by hash would', () => {
    const op = fc.oneof(
      fc.record({
        kind: fc.constant('commit' as const),
        low: fc.integer({ min: 0, max: 3 }),
        high: fc.integer({ min: 0, max: 5 }),
      }),
      fc.record({ kind: fc.constant('release' as const), pick: fc.nat() }),
      fc.record({ kind: fc.constant('reset' as const) }),
    );
    fc.assert(
      fc.property(fc.array(op, { minLength: 1, maxLength: 120 }), fc.integer({ min: 2, max: 12 }), (ops, capacity) => {
        const cache = new KvCache(capacity, 0, 2);
        const cached = new Set<bigint>();
        const held: GpuBlock[] = [];
        for (const o of ops) {
          if (o.kind === 'commit') {
            const block = cache.allocate();
            if (block === null) continue;
            const hash = hashOf(o.low, o.high);
            const wasCached = cached.has(hash);
            applyEvents(cached, cache.drainEvents()); // an eviction by allocate
            const got = cache.commit(block, content(hash));
            held.push(got);
            expect(got.content?.hash).toBe(hash);
            // Committing a cached hash hands back the cached block (no event); else a stored event.
            const evs = cache.drainEvents();
            expect(evs.length).toBe(wasCached && cached.has(hash) ? 0 : 1);
            applyEvents(cached, evs);
          } else if (o.kind === 'release') {
            if (held.length === 0) continue;
            const [b] = held.splice(o.pick % held.length, 1);
            cache.release([b]);
          } else {
            cache.reset();
            held.length = 0;
            applyEvents(cached, cache.drainEvents());
          }
          // Every hash of the space: found exactly when cached, as the block holding it.
          for (let low = 0; low <= 3; low++)
            for (let high = 0; high <= 5; high++) {
              const hash = hashOf(low, high);
              const hits = cache.lookup([content(hash)], 1);
              expect(hits).toBe(cached.has(hash) ? 1 : 0);
              if (hits === 1) expect(cache.hitBlocks[0]?.content?.hash).toBe(hash);
            }
          expect(cache.cachedBlocks).toBe(cached.size);
          expect(new Set(cache.gpuContents().map((c) => c.hash))).toEqual(cached);
        }
      }),
      { numRuns: 300, seed: 5 },
    );
  });
});
