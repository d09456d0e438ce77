import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { seqHashes, hashSpace } from '../../src/hashing/index.js';
import { rangeVocab } from '../../src/engine-sim/core/config.js';
import { ChunkArena, PageReserve } from '../../src/common/chunk-arena.js';
import { PAGE_SLOTS } from '../../src/engine-sim/core/kv-cache.js';
import { EngineCore, type StepOutput } from '../../src/engine-sim/core/engine-core.js';
import { sglangHasher, vllmHasher, vllmNoneHash, murmurHasher } from '../../src/engine-sim/core/engine-hash.js';
import type { CoreKvEvent } from '../../src/engine-sim/core/kv-events.js';
import type { SimRequestSpec } from '../../src/engine-sim/core/request.js';
import type { CoreConfig } from '../../src/engine-sim/core/config.js';

const VOCAB = rangeVocab(1000, 5000);

function core(cfg: Partial<CoreConfig> = {}): EngineCore {
  return new EngineCore({ blockSize: 4, numGpuBlocks: 64, outputVocab: VOCAB, ...cfg });
}

function tokens(n: number, base = 1): Uint32Array {
  return Uint32Array.from({ length: n }, (_, i) => base + i);
}

function spec(id: string, prompt: Uint32Array, maxTokens = 3, extra: Partial<SimRequestSpec> = {}): SimRequestSpec {
  return { id, prompt, maxTokens, ...extra };
}

/** Step until idle (bounded), collecting every pass. */
function drain(e: EngineCore, now = 0, limit = 10_000): StepOutput[] {
  const out: StepOutput[] = [];
  for (let i = 0; i < limit && e.hasWork(); i++) {
    const s = e.step(now);
    if (s) out.push(s);
  }
  expect(e.hasWork()).toBe(false);
  return out;
}

const events = (steps: StepOutput[]): CoreKvEvent[] => steps.flatMap((s) => s.events);
const firstTokenAt = (steps: StepOutput[], id: string): number =>
  steps.find((s) => s.tokens.some((t) => t.requestId === id && t.index === 0))!.endMs;

/** Apply events to per-tier sets of engine hashes. */
function replay(evts: CoreKvEvent[]): { GPU: Set<bigint>; CPU: Set<bigint> } {
  const tiers = { GPU: new Set<bigint>(), CPU: new Set<bigint>() };
  for (const ev of evts) {
    if (ev.type === 'cleared') {
      tiers.GPU.clear();
      tiers.CPU.clear();
    } else if (ev.type === 'stored') for (const b of ev.blocks) tiers[ev.medium].add(b.hash);
    else for (const b of ev.blocks) expect(tiers[ev.medium].delete(b.hash)).toBe(true);
  }
  return tiers;
}

describe('engine hashes', () => {
  it('vLLM sha256_cbor matches the reference vector (PYTHONHASHSEED=0, tokens 1..32)', () => {
    expect(Buffer.from(vllmNoneHash('0')).toString('hex')).toBe(
      '4e1195df020de59e0d65a33a4279f1183e7ae4e5d980e309f8b55adff2e61c3e',
    );
    const h = vllmHasher('0');
    const t = tokens(32);
    const d0 = h.digest(null, t.subarray(0, 16), null);
    const d1 = h.digest(d0, t.subarray(16, 32), null);
    expect(h.id(d0)).toBe(3236607068019569386n);
    expect(h.id(d1)).toBe(2758186210834249151n);
    expect(h.id(h.digest(null, t.subarray(0, 16), ['tenant-a']))).toBe(10934782661253773923n);
  });

  it('engine hashes are not the router standard', () => {
    const e = core({ blockSize: 16 });
    e.add(spec('a', tokens(32), 1), 0);
    drain(e);
    const snap = e.snapshot().gpu.sort((a, b) => a.depth - b.depth);
    const router = seqHashes(tokens(32), 16, hashSpace({ seed: 1337n }));
    expect(snap.map((b) => b.routerHash)).toEqual([router[0], router[1]]);
    expect(snap.map((b) => b.hash)).not.toEqual([router[0], router[1]]);
    expect(sglangHasher().id(sglangHasher().digest(null, tokens(16), null))).not.toBe(snap[0].hash);
  });

  it('the murmur flavor chains on the parent and extra keys, and is not the router standard either', () => {
    const h = murmurHasher();
    const t = tokens(32);
    const d0 = h.digest(null, t.subarray(0, 16), null);
    const d1 = h.digest(d0, t.subarray(16, 32), null);
    expect(h.id(h.digest(null, t.subarray(0, 16), null))).toBe(h.id(d0));
    expect(h.id(h.digest(null, t.subarray(16, 32), null))).not.toBe(h.id(d1));
    expect(h.id(h.digest(null, t.subarray(0, 16), ['tenant-a']))).not.toBe(h.id(d0));
    const router = seqHashes(t, 16, hashSpace({ seed: 1337n }));
    expect([h.id(d0), h.id(d1)]).not.toContain(router[0]);
    expect([h.id(d0), h.id(d1)]).not.toContain(router[1]);
    // A core with it caches and reuses blocks as with the vLLM hash (same timings, same hits).
    const run = (flavor: 'vllm' | 'murmur') => {
      const e = core({ blockSize: 16, hashFlavor: flavor });
      e.add(spec('a', tokens(40), 2), 0);
      e.add(spec('b', tokens(40), 2), 0);
      return drain(e).map((s) => [s.endMs, s.admitted.map((a) => a.gpuHitTokens)]);
    };
    expect(run('murmur')).toEqual(run('vllm'));
  });
});

describe('prefix cache', () => {
  it('a repeated prompt hits the cache and has a shorter TTFT than a cold prompt of the same length', () => {
    const e = core({ numGpuBlocks: 256 });
    const p = tokens(200);
    e.add(spec('cold', p), 0);
    const cold = drain(e, 0);
    const coldTtft = firstTokenAt(cold, 'cold') - 0;
    const t1 = e.stats().clockMs;
    e.add(spec('warm', p), t1);
    const warm = drain(e, t1);
    expect(warm[0].admitted[0]).toMatchObject({ queried: 200, gpuHitTokens: 196, hostHitTokens: 0, first: true });
    expect(firstTokenAt(warm, 'warm') - t1).toBeLessThan(coldTtft);
    const t2 = e.stats().clockMs;
    e.add(spec('other', tokens(200, 5000)), t2);
    const other = drain(e, t2);
    expect(other[0].admitted[0].gpuHitTokens).toBe(0);
    expect(firstTokenAt(other, 'other') - t2).toBeCloseTo(coldTtft, 6);
  });

  it('generates exactly max_tokens, caches output blocks and stores each block once', () => {
    const e = core();
    e.add(spec('a', tokens(10), 7), 0);
    const steps = drain(e);
    const out = steps.flatMap((s) => s.tokens);
    expect(out.map((t) => t.index)).toEqual([0, 1, 2, 3, 4, 5, 6]);
    expect(out.at(-1)!.finishReason).toBe('length');
    expect(out.slice(0, -1).every((t) => t.finishReason === null)).toBe(true);
    // 10 prompt + 6 tokens with KV = 16 = 4 full blocks (the last sampled token has no KV).
    const stored = events(steps)
      .filter((e) => e.type === 'stored')
      .flatMap((e) => (e.type === 'stored' ? e.blocks : []));
    expect(stored.map((b) => b.depth)).toEqual([0, 1, 2, 3]);
    expect(stored[0].parent).toBeNull();
    expect(stored[1].parent).toBe(stored[0].hash);
    expect(e.stats()).toMatchObject({ running: 0, waiting: 0, activeBlocks: 0, cachedGpuBlocks: 4 });
  });

  it('stop_token_ids end a request early, but not before min_tokens', () => {
    const e = new EngineCore({ blockSize: 4, numGpuBlocks: 64, outputVocab: Uint32Array.of(7, 8) });
    e.add(spec('a', tokens(5), 50, { stopTokenIds: [7, 8], minTokens: 3 }), 0);
    const out = drain(e).flatMap((s) => s.tokens);
    expect(out).toHaveLength(3);
    expect(out[2]).toMatchObject({ finishReason: 'stop' });
    expect([7, 8]).toContain(out[2].stopReason);
  });

  it('is deterministic for a seed and differs across seeds', () => {
    const run = (seed: number): number[] => {
      const e = core({ seed });
      e.add(spec('a', tokens(9), 20), 0);
      e.add(spec('b', tokens(9, 100), 20), 0);
      return drain(e).flatMap((s) => s.tokens.map((t) => t.token));
    };
    expect(run(1)).toEqual(run(1));
    expect(run(1)).not.toEqual(run(2));
  });
});

describe('eviction and tiers', () => {
  it('filling the cache evicts LRU blocks, deepest first, and emits removals', () => {
    const e = core({ numGpuBlocks: 8 });
    e.add(spec('a', tokens(16), 1), 0); // 4 blocks cached
    drain(e);
    const a = e.snapshot().gpu;
    e.add(spec('b', tokens(24, 1000), 1), 1e6); // needs 6 (+1 partial for sampling... 24 tokens = 6 blocks)
    const steps = drain(e, 1e6);
    const removed = events(steps).filter((x) => x.type === 'removed');
    expect(removed.length).toBeGreaterThan(0);
    const byHash = new Map(a.map((b) => [b.hash, b.depth]));
    const depths = removed.flatMap((x) => (x.type === 'removed' ? x.blocks.map((b) => byHash.get(b.hash)) : []));
    expect(depths).toEqual([...depths].sort((x, y) => (y ?? 0) - (x ?? 0)));
    expect(depths[0]).toBe(3);
    expect(e.stats().cachedGpuBlocks).toBeLessThanOrEqual(8);
  });

  it('with a host tier, eviction stores on CPU before removing from GPU, and a CPU hit loads back', () => {
    const e = core({ numGpuBlocks: 8, numCpuBlocks: 16 });
    const p = tokens(17);
    e.add(spec('a', p, 1), 0);
    drain(e);
    e.add(spec('b', tokens(28, 1000), 1), 1e6);
    const evicting = events(drain(e, 1e6));
    const order = evicting
      .filter((x) => x.type !== 'cleared')
      .map((x) => `${x.type}:${x.medium}:${x.blocks.map((b) => b.hash).join(',')}`);
    for (const x of evicting) {
      if (x.type !== 'removed' || x.medium !== 'GPU') continue;
      const h = x.blocks[0].hash;
      const storedAt = order.findIndex((o) => o.startsWith('stored:CPU:') && o.includes(String(h)));
      const removedAt = order.findIndex((o) => o.startsWith('removed:GPU:') && o.includes(String(h)));
      expect(storedAt).toBeGreaterThanOrEqual(0);
      expect(storedAt).toBeLessThan(removedAt);
    }
    expect(e.snapshot().cpu.length).toBeGreaterThan(0);
    e.add(spec('a2', p, 1), 2e6);
    const back = drain(e, 2e6);
    const adm = back[0].admitted[0];
    expect(adm.hostHitTokens).toBeGreaterThan(0);
    expect(adm.gpuHitTokens + adm.hostHitTokens).toBe(16);
    expect(back[0].loadedTokens).toBe(adm.hostHitTokens);
    expect(back[0].events.some((x) => x.type === 'stored' && x.medium === 'GPU')).toBe(true);
  });

  it('preempts when blocks run out and still finishes everything', () => {
    const e = core({ numGpuBlocks: 10, maxNumBatchedTokens: 64 });
    for (let i = 0; i < 4; i++) e.add(spec(`r${i}`, tokens(12, 100 * i + 1), 12), 0);
    const steps = drain(e);
    expect(steps.some((s) => s.preempted.length > 0)).toBe(true);
    const done = steps.flatMap((s) => s.tokens).filter((t) => t.finishReason);
    expect(done.map((t) => t.requestId).sort()).toEqual(['r0', 'r1', 'r2', 'r3']);
    expect(e.stats().activeBlocks).toBe(0);
  });

  it('rejects a request that can never fit', () => {
    const e = core({ numGpuBlocks: 2 });
    e.add(spec('big', tokens(40), 1), 0);
    const steps = drain(e);
    expect(steps[0].rejected).toEqual(['big']);
  });

  it('abort frees blocks; reset clears every tier and emits AllBlocksCleared', () => {
    const e = core({ numCpuBlocks: 4 });
    e.add(spec('a', tokens(20), 100), 0);
    e.step(0);
    e.step(0);
    expect(e.stats().activeBlocks).toBeGreaterThan(0);
    expect(e.abort('a')).toBe(true);
    expect(e.abort('a')).toBe(false);
    expect(e.stats().activeBlocks).toBe(0);
    expect(e.stats().cachedGpuBlocks).toBe(5);
    const evts = e.resetPrefixCache();
    expect(evts).toEqual([{ type: 'cleared' }]);
    expect(e.snapshot()).toEqual({ gpu: [], cpu: [] });
  });
});

/** Random workloads: requests sharing one of 4 prefixes, with steps between arrivals (the property tests'). */
const workloads = fc.array(
  fc.record({
    prefix: fc.integer({ min: 0, max: 3 }),
    len: fc.integer({ min: 1, max: 40 }),
    out: fc.integer({ min: 1, max: 12 }),
    gap: fc.integer({ min: 0, max: 3 }),
  }),
  { minLength: 1, maxLength: 25 },
);

describe('events describe the cache exactly', () => {
  it('replaying every event gives the snapshot, for random workloads', () => {
    fc.assert(
      fc.property(workloads, fc.integer({ min: 0, max: 12 }), fc.boolean(), (reqs, cpu, abortSome) => {
        const e = core({ numGpuBlocks: 12, numCpuBlocks: cpu, maxNumBatchedTokens: 32, maxNumSeqs: 4 });
        const all: CoreKvEvent[] = [];
        let now = 0;
        reqs.forEach((r, i) => {
          const p = Uint32Array.from({ length: r.len }, (_, k) => (k < 8 ? r.prefix * 1000 + k : i * 1000 + k));
          e.add(spec(`q${i}`, p, r.out), now);
          for (let s = 0; s < r.gap; s++) {
            const o = e.step(now);
            if (o) all.push(...o.events);
          }
          if (abortSome && i % 3 === 0) e.abort(`q${i}`);
          if (i === 10) all.push(...e.resetPrefixCache());
          now += 1;
        });
        for (let s = 0; s < 5000 && e.hasWork(); s++) all.push(...(e.step(now)?.events ?? []));
        expect(e.hasWork()).toBe(false);
        const tiers = replay(all);
        const snap = e.snapshot();
        expect([...tiers.GPU].sort()).toEqual(snap.gpu.map((b) => b.hash).sort());
        expect([...tiers.CPU].sort()).toEqual(snap.cpu.map((b) => b.hash).sort());
        expect(snap.gpu.length).toBeLessThanOrEqual(12);
        expect(snap.cpu.length).toBeLessThanOrEqual(cpu);
        expect(e.stats().activeBlocks).toBe(0);
      }),
      { numRuns: 150, seed: 42 },
    );
  });
});

describe('token storage', () => {
  it("a block's tokens stay its own after its slot or its request's tokens are reused, for random workloads", () => {
    fc.assert(
      fc.property(workloads, fc.integer({ min: 0, max: 12 }), (reqs, cpu) => {
        // A small shared arena: requests' tokens are recycled within the run.
        const arena = new ChunkArena((n) => new Uint32Array(n), 64);
        const e = new EngineCore(
          {
            blockSize: 4,
            numGpuBlocks: 12,
            numCpuBlocks: cpu,
            maxNumBatchedTokens: 32,
            maxNumSeqs: 4,
            outputVocab: VOCAB,
          },
          arena,
        );
        // Tokens of each block as its stored event carried them right after its pass.
        const seen = new Map<bigint, number[]>();
        const stored: Array<{ hash: bigint; tokens: Uint32Array }[]> = [];
        const take = (evs: readonly CoreKvEvent[] = []) => {
          for (const ev of evs) {
            if (ev.type !== 'stored') continue;
            stored.push(ev.blocks);
            for (const b of ev.blocks) {
              const t = [...b.tokens];
              expect(seen.get(b.hash) ?? t).toEqual(t);
              seen.set(b.hash, t);
            }
          }
        };
        let now = 0;
        reqs.forEach((r, i) => {
          const p = Uint32Array.from({ length: r.len }, (_, k) => (k < 8 ? r.prefix * 1000 + k : i * 1000 + k));
          e.add(spec(`q${i}`, p, r.out), now);
          for (let s = 0; s < r.gap; s++) take(e.step(now)?.events);
          if (i === 10) take(e.resetPrefixCache());
          now += 1;
        });
        for (let s = 0; s < 5000 && e.hasWork(); s++) take(e.step(now)?.events);
        // Every event's blocks (evicted since, their slots and requests' tokens reused) and every cached block read the same tokens.
        for (const blocks of stored) for (const b of blocks) expect([...b.tokens]).toEqual(seen.get(b.hash));
        const snap = e.snapshot();
        for (const b of [...snap.gpu, ...snap.cpu]) expect([...b.tokens]).toEqual(seen.get(b.hash));
      }),
      { numRuns: 150, seed: 7 },
    );
  });

  it("engines whose token pages come from one PageReserve keep their blocks' tokens apart", () => {
    fc.assert(
      fc.property(workloads, (reqs) => {
        // Two pages reserved for three engines: two get adjacent pages of one buffer, the third its own.
        let made = 0;
        const reserve = new PageReserve(
          (n) => {
            made++;
            return new Uint32Array(n);
          },
          PAGE_SLOTS * 4,
          2,
        );
        const engines = [0, 1, 2].map(
          () =>
            new EngineCore(
              { blockSize: 4, numGpuBlocks: 12, maxNumBatchedTokens: 32, maxNumSeqs: 4, outputVocab: VOCAB },
              undefined,
              (n) => reserve.take(n),
            ),
        );
        const seen = engines.map(() => new Map<bigint, number[]>());
        const take = (k: number, evs: readonly CoreKvEvent[] = []) => {
          for (const ev of evs)
            if (ev.type === 'stored')
              for (const b of ev.blocks) {
                const t = [...b.tokens];
                expect(seen[k].get(b.hash) ?? t).toEqual(t);
                seen[k].set(b.hash, t);
              }
        };
        let now = 0;
        const stepAll = () => {
          for (let k = 0; k < engines.length; k++) take(k, engines[k].step(now)?.events);
        };
        reqs.forEach((r, i) => {
          engines.forEach((e, k) => {
            // The same shapes on every engine, other token ids: a shared page would mix them.
            const p = Uint32Array.from(
              { length: r.len },
              (_, j) => k * 1_000_000 + (j < 8 ? r.prefix * 1000 + j : i * 1000 + j),
            );
            e.add(spec(`q${i}`, p, r.out), now);
          });
          for (let s = 0; s < r.gap; s++) stepAll();
          now += 1;
        });
        for (let s = 0; s < 5000 && engines.some((e) => e.hasWork()); s++) stepAll();
        engines.forEach((e, k) => {
          for (const b of e.snapshot().gpu) expect([...b.tokens]).toEqual(seen[k].get(b.hash));
        });
        // The reservation, and one page of the engine past it.
        expect(made).toBeLessThanOrEqual(2);
      }),
      { numRuns: 60, seed: 11 },
    );
  });

  it("gives requests' tokens back to the arena when they end", () => {
    let chunks = 0;
    const arena = new ChunkArena((n) => {
      chunks++;
      return new Uint32Array(n);
    }, 256);
    const e = new EngineCore({ blockSize: 4, numGpuBlocks: 64, outputVocab: VOCAB }, arena);
    for (let i = 0; i < 200; i++) {
      e.add(spec(`q${i}`, tokens(40, i * 100), 8), i);
      if (i % 3 === 0) e.abort(`q${i}`);
      drain(e, i);
    }
    // 200 x 48 tokens through 256-token chunks: without the releases, 40 chunks.
    expect(chunks).toBeLessThanOrEqual(2);
  });

  it('holds exactly the blocks its requests fill, pass by pass (a block is added when a decode crosses into it)', () => {
    // Two requests, one preempted and re-admitted on the way (24 blocks for up to 2 x 10 needed).
    const e = core({ numGpuBlocks: 12, maxNumBatchedTokens: 64 });
    e.add(spec('a', tokens(21, 1), 19), 0);
    e.add(spec('b', tokens(14, 500), 23), 0);
    const sampled = new Map<string, number>();
    const prompt = new Map([
      ['a', 21],
      ['b', 14],
    ]);
    const running = new Set<string>();
    for (let i = 0; i < 1000 && e.hasWork(); i++) {
      const out = e.step(0)!;
      for (const a of out.admitted) running.add(a.req.id);
      for (const id of out.preempted) running.delete(id);
      for (const t of out.tokens) {
        sampled.set(t.requestId, t.index + 1);
        if (t.finishReason) running.delete(t.requestId);
      }
      // A running request's KV covers all its tokens but the last sampled one: ceil(that / 4) blocks.
      let want = 0;
      for (const id of running) want += Math.ceil((prompt.get(id)! + (sampled.get(id) ?? 0) - 1) / 4);
      expect(e.stats().activeBlocks).toBe(want);
    }
    expect(e.stats().activeBlocks).toBe(0);
    expect([...sampled.values()]).toEqual([19, 23]);
  });
});
