// engine-sim --hybrid: the second KV-cache group (hybrid-cache.ts) inside the pure EngineCore,
// hand-worked: sliding-window blocks freed as the window moves and evicted before the
// full-attention prefix, Mamba checkpoints once per pass, and cached_tokens following the rules.
import { describe, expect, it } from 'vitest';
import { rangeVocab } from '../../src/engine-sim/core/config.js';
import { EngineCore, type StepOutput } from '../../src/engine-sim/core/engine-core.js';
import { parseHybrid } from '../../src/engine-sim/core/hybrid-cache.js';
import type { CoreKvEvent } from '../../src/engine-sim/core/kv-events.js';
import { vllmEncoder } from '../../src/engine-sim/events/vllm-format.js';

const VOCAB = rangeVocab(1000, 5000);
const tokens = (n: number, base = 1) => Uint32Array.from({ length: n }, (_, i) => base + i);

function drain(e: EngineCore): StepOutput[] {
  const out: StepOutput[] = [];
  for (let i = 0; i < 10_000 && e.hasWork(); i++) {
    const s = e.step(0);
    if (s) out.push(s);
  }
  expect(e.hasWork()).toBe(false);
  return out;
}

/** Run one request to completion; its cached tokens at admission and the pass outputs. */
function run(e: EngineCore, id: string, prompt: Uint32Array): { cached: number; steps: StepOutput[] } {
  e.add({ id, prompt, maxTokens: 1 }, 0);
  const steps = drain(e);
  const tok = steps.flatMap((s) => s.tokens).find((t) => t.requestId === id)!;
  return { cached: tok.cachedTokens, steps };
}

const groupEvents = (steps: StepOutput[]): CoreKvEvent[] =>
  steps.flatMap((s) => s.events).filter((ev) => ev.type !== 'cleared' && ev.group !== undefined);

describe('--hybrid flag', () => {
  it('parses swa:W and mamba, nothing else', () => {
    expect(parseHybrid('swa:4096')).toEqual({ kind: 'sliding_window', window: 4096 });
    expect(parseHybrid('mamba')).toEqual({ kind: 'mamba' });
    for (const bad of ['swa', 'swa:0', 'swa:-1', 'mamba:2', 'full']) expect(parseHybrid(bad)).toBeNull();
  });
});

describe('sliding window (W = 9 tokens, 4-token blocks: 2 blocks before a hit end)', () => {
  it('frees blocks behind the window, evicts them before the full-attention prefix, and reports the rule', () => {
    // Full attention never evicts (256 blocks); the window group has 8.
    const e = new EngineCore({
      blockSize: 4,
      numGpuBlocks: 256,
      outputVocab: VOCAB,
      hybrid: { kind: 'sliding_window', window: 9 },
      hybridBlocks: 8,
    });
    const a = tokens(24, 1); // blocks A0..A5
    const first = run(e, 'a', a);
    expect(first.cached).toBe(0);
    // A0..A5 stored in the group; after the 24-token prefill A0..A3 are behind the window (freed
    // first), A5 then A4 at the end: free order A0 A1 A2 A3 A5 A4.
    const stored = groupEvents(first.steps).filter((ev) => ev.type === 'stored');
    expect(stored.flatMap((ev) => (ev.type === 'stored' ? ev.blocks.map((b) => b.depth) : []))).toEqual([
      0, 1, 2, 3, 4, 5,
    ]);
    expect(stored[0].type === 'stored' && stored[0].group).toEqual({
      idx: 1,
      kind: 'sliding_window',
      window: 9,
      blockSize: 4,
    });
    // Still all there: the same conversation, one turn later, reuses all 6 blocks.
    // (B: 3 blocks; storing B2 evicts A0.) C: 4 blocks evict A1 A2 A3 A5.
    run(e, 'b', tokens(12, 500));
    const c = run(e, 'c', tokens(16, 900));
    const removed = groupEvents(c.steps).filter((ev) => ev.type === 'removed');
    expect(removed.map((ev) => (ev.type === 'removed' ? ev.blocks[0].depth : -1))).toEqual([1, 2, 3, 5]);
    // A's next turn: full attention holds A0..A5 (hit 6 blocks); the window group holds only A4:
    // ending at 6 needs A4 A5 (A5 gone), at 5 needs A3 A4 (A3 gone), ... no end works: 0.
    const next = new Uint32Array(32);
    next.set(a);
    next.set(tokens(8, 3000), 24);
    expect(run(e, 'a2', next).cached).toBe(0);
    expect(e.stats().cachedGpuBlocks).toBeGreaterThanOrEqual(6 + 3 + 4);
  });

  it('with room to spare the whole full-attention hit is reused', () => {
    const e = new EngineCore({
      blockSize: 4,
      numGpuBlocks: 256,
      outputVocab: VOCAB,
      hybrid: { kind: 'sliding_window', window: 9 },
    });
    const a = tokens(24, 1);
    run(e, 'a', a);
    const next = new Uint32Array(32);
    next.set(a);
    next.set(tokens(8, 3000), 24);
    expect(run(e, 'a2', next).cached).toBe(24);
  });
});

describe('Mamba (state checkpoints once per pass)', () => {
  it('a hit ends at a checkpoint the passes left', () => {
    // 10 tokens per pass: the 24-token prompt is computed to 10, 20, 24 tokens, leaving states at
    // block ends 2, 5 and 6.
    const e = new EngineCore({
      blockSize: 4,
      numGpuBlocks: 256,
      maxNumBatchedTokens: 10,
      outputVocab: VOCAB,
      hybrid: { kind: 'mamba' },
    });
    const a = tokens(24, 1);
    const first = run(e, 'a', a);
    const ends = groupEvents(first.steps).flatMap((ev) =>
      ev.type === 'stored' ? ev.blocks.map((b) => b.depth + 1) : [],
    );
    expect(ends).toEqual([2, 5, 6]);
    // A 19-token prefix: full attention may reuse 4 blocks (the last token is always recomputed);
    // no state ends at 4 or 3, one ends at 2.
    expect(run(e, 'p', a.slice(0, 19)).cached).toBe(8);
    // 23 tokens: 5 blocks, a state ends at 5.
    expect(run(e, 'q', a.slice(0, 23)).cached).toBe(20);
  });
});

describe('vLLM wire fields per group', () => {
  it('BlockStored names group_idx, kind and window; BlockRemoved the group', () => {
    const enc = vllmEncoder(
      { blockSize: 4, modelName: 'm', dpRank: 0, loraIds: new Map(), tenantId: 't', backendId: 'b' },
      'map',
    );
    const block = {
      hash: 7n,
      digest: new Uint8Array(32),
      parent: null,
      depth: 0,
      tokens: tokens(4),
      routerHash: 1n,
      loraName: null,
      cacheSalt: null,
      extraKeys: null,
    };
    const group = { idx: 1, kind: 'sliding_window' as const, window: 9, blockSize: 4 };
    const [st, rm, fa] = enc.render(
      [
        { type: 'stored', medium: 'GPU', blocks: [block], group },
        { type: 'removed', medium: 'GPU', blocks: [block], group },
        { type: 'stored', medium: 'GPU', blocks: [block] },
      ],
      0,
    ) as Array<Record<string, unknown>>;
    expect(st).toMatchObject({ group_idx: 1, kv_cache_spec_kind: 'sliding_window', kv_cache_spec_sliding_window: 9 });
    expect(rm).toMatchObject({ type: 'BlockRemoved', group_idx: 1 });
    expect(fa).toMatchObject({ group_idx: 0, kv_cache_spec_kind: 'full_attention' });
    expect('kv_cache_spec_sliding_window' in fa).toBe(false);
  });
});
