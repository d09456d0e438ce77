import { describe, expect, it } from 'vitest';
import { tokenBlock } from '../../src/bench/workloads/tokens.js';
import { traceTokens } from '../../src/bench/workloads/mooncake.js';
import type { ArenaSlice } from '../../src/common/chunk-arena.js';
import { payloadArena } from '../../src/fleet-sim/payload-arena.js';

describe('bench fleet allocations', () => {
  it('cuts payloads from recycled chunks, each intact until its delivery', () => {
    const arena = payloadArena();
    // Payloads in flight: written, then read back at "delivery" in FIFO order, a few at a time.
    const inflight: Array<ArenaSlice<Uint8Array> & { fill: number }> = [];
    const chunks = new Set<unknown>();
    let n = 0;
    for (let i = 0; i < 20_000; i++) {
      const size = 1 + ((i * 7919) % 3000);
      const a = arena.alloc(size);
      a.array.fill(i & 255);
      chunks.add(a.chunk);
      inflight.push({ ...a, fill: i & 255 });
      while (inflight.length > 40) {
        const p = inflight.shift()!;
        expect(p.array.every((b) => b === p.fill)).toBe(true);
        arena.release(p.chunk);
        n++;
      }
    }
    expect(n).toBe(20_000 - 40);
    // ~30 MB published through a handful of 1 MiB chunks.
    expect(chunks.size).toBeLessThanOrEqual(3);
    const big = arena.alloc(2 << 20);
    expect(big.chunk).toBeNull();
    expect(big.array.length).toBe(2 << 20);
  });

  it('writes Mooncake prompts in place, the same tokens as the per-block arrays', () => {
    const r = { timestamp: 0, input_length: 1300, output_length: 5, hash_ids: [7, 8, 9] };
    const want = new Uint32Array(1300);
    want.set(tokenBlock(3, 7, 512), 0);
    want.set(tokenBlock(3, 8, 512), 512);
    want.set(tokenBlock(3, 9, 512).subarray(0, 276), 1024);
    expect(traceTokens(r, 3)).toEqual(want);
  });
});
