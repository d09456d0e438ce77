// The GPU eviction queue with its links in the blocks: the same order as the keyed Lru it replaced.
import { describe, expect, it } from 'vitest';
import { GpuBlock } from '../../src/engine-sim/core/block.js';
import { BlockLru } from '../../src/engine-sim/core/block-lru.js';
import { Lru } from '../../src/engine-sim/core/lru.js';
import { mulberry32 } from '../../src/common/prng.js';

describe('BlockLru', () => {
  it('evicts in the keyed Lru order under random pushes, re-pushes, deletes and shifts', () => {
    const rand = mulberry32(11);
    const blocks = Array.from({ length: 40 }, () => new GpuBlock(null));
    const ref = new Lru<GpuBlock, GpuBlock>();
    const lru = new BlockLru();
    for (let step = 0; step < 5000; step++) {
      const b = blocks[Math.floor(rand() * blocks.length)];
      const op = rand();
      if (op < 0.5) {
        ref.push(b, b);
        lru.push(b);
      } else if (op < 0.8) expect(lru.delete(b)).toBe(ref.delete(b));
      else if (op < 0.99) expect(lru.shift()).toBe(ref.shift()?.[1]);
      else {
        ref.clear();
        lru.clear();
      }
      expect(lru.size).toBe(ref.size);
    }
    expect([...lru.values()]).toEqual([...ref.values()]);
    expect(lru.size).toBeGreaterThan(0);
  });
});
