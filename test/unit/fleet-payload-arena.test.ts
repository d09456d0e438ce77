import { describe, expect, it } from 'vitest';
import { tokenBlock } from '../../src/bench/workloads/tokens.js';
import { traceTokens } from '../../src/bench/workloads/mooncake.js';
import { type ArenaSlice, PageReserve } from '../../src/common/chunk-arena.js';
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
  it('reserved pages: cut in order from one buffer, then buffers of their own; a refused reservation gives own pages', () => {
    const buffers: ArrayBufferLike[] = [];
    const make = (limit: number) => (n: number) => {
      if (n > limit) throw new RangeError('too large');
      const a = new Uint32Array(n);
      buffers.push(a.buffer);
      return a;
    };
    const r = new PageReserve(make(1 << 20), 64, 3);
    const pages = Array.from({ length: 5 }, () => r.take(64));
    expect(pages.map((p) => p.length)).toEqual([64, 64, 64, 64, 64]);
    expect(pages.slice(0, 3).map((p) => [p.buffer === buffers[0], p.byteOffset])).toEqual([
      [true, 0],
      [true, 256],
      [true, 512],
    ]);
    expect(pages.slice(3).every((p) => p.buffer !== buffers[0] && p.byteOffset === 0)).toBe(true);
    expect(r.take(10).buffer).not.toBe(buffers[0]); // another length: its own
    buffers.length = 0;
    const refused = new PageReserve(make(100), 64, 3);
    const own = [refused.take(64), refused.take(64)];
    expect(own[0].buffer).not.toBe(own[1].buffer);
    expect(own.every((p) => p.length === 64 && p.every((x) => x === 0))).toBe(true);
  });
});
