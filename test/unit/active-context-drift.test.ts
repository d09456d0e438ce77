// The time model's context counters (attention work of the prefill booked ahead, the decoding
// requests' context) go up at booking and prefill and down at prefill and free: after many random
// requests booked, prefilled, failed and freed on a worker that never went idle, they are exactly
// what the requests still in flight put there, and 0 once every request finished.
import { describe, expect, it } from 'vitest';
import { seqHashes } from '../../src/hashing/index.js';
import { TieredIndexer } from '../../src/indexer/namespaces.js';
import { attentionWork, type CostWeights } from '../../src/scheduler/cost.js';
import { Scheduler } from '../../src/scheduler/scheduler.js';
import { mulberry32 } from '../../src/common/prng.js';

const ns = { model: 'm', blockSize: 4, loraName: null, salt: null, tenant: 'default' };
// Fractional tier credits, so that a request's credited prefix is not a whole number of tokens.
const W: CostWeights = {
  model: 'time',
  overlapWeight: 1,
  medium: { cpu: 0.33, disk: 0.17, shared: 0.5 },
  trackActiveBlocks: true,
  decodeInterference: 0,
};

describe('context counters after many random requests', () => {
  it('return to what the requests in flight booked, and to 0 when all finished', () => {
    const rand = mulberry32(7);
    const indexer = new TieredIndexer();
    const scheduler = new Scheduler(indexer, mulberry32(1));
    const space = indexer.namespace(ns);
    indexer.bindBackend('x', 'x');
    const host = space.index.holder('x', 0, 'CPU');
    const disk = space.index.holder('x', 0, 'DISK');
    const book = (id: string, now: number) => {
      const tokens = Array.from({ length: 8 + Math.floor(rand() * 200) }, () => Math.floor(rand() * 50));
      // Some of its prefix on the host and disk tiers: partial credits.
      const seq = seqHashes(tokens, 4, space.space);
      const cut = Math.floor(rand() * seq.length);
      space.index.store(host, seq.subarray(0, cut), null);
      space.index.store(disk, seq.subarray(0, Math.floor(rand() * seq.length)), null);
      const d = scheduler.decide(
        { ns, candidates: [{ instance: 'x', dpRank: 0 }], tokens, policy: 'kv', weights: W, temperature: 0 },
        now,
      );
      return scheduler.book(d, ns, { requestId: id, now, speculativeTtlMs: 0 });
    };
    const anchor = book('anchor', 0);
    const live = new Set<string>();
    for (let i = 0; i < 3000; i++) {
      const id = `r${i}`;
      book(id, i);
      live.add(id);
      for (const other of [...live]) {
        const u = rand();
        if (u < 0.2) scheduler.prefillComplete(other, i);
        else if (u < 0.3) {
          scheduler.free(other, { failed: rand() < 0.5, now: i });
          live.delete(other);
        }
      }
    }
    for (const id of live) scheduler.free(id, { failed: false, now: 4000 });
    const load = scheduler.active.load('x', 0);
    expect(load.activeRequests).toBe(1);
    expect(load.activePrefillTokens).toBe(anchor.prefillTokens);
    expect(load.activeAttention).toBe(attentionWork(anchor.prefillTokens, anchor.contextTokens));
    expect(load.decodingContext).toBe(0);
    scheduler.prefillComplete('anchor', 4000);
    expect(scheduler.active.load('x', 0).activeAttention).toBe(0);
    expect(scheduler.active.load('x', 0).decodingContext).toBe(anchor.prefillTokens + anchor.contextTokens);
    scheduler.free('anchor');
    expect(scheduler.active.totals()).toEqual({
      activePrefillTokens: 0,
      activeAttention: 0,
      activeBlocks: 0,
      activeRequests: 0,
      decodingRequests: 0,
      decodingContext: 0,
    });
  });
});
