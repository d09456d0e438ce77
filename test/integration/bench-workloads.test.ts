// The benchmark workloads and their oracle: equal trace ids give equal tokens, the infinite-cache
// bound is exact on small hand-made traces, seeded workloads are reproducible.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { cov, dist, unionLength } from '../../src/bench/stats.js';
import { barChart, lineChart, niceTicks } from '../../src/bench/svg.js';
import { mooncakeWorkload, parseTrace, traceTokens } from '../../src/bench/workloads/mooncake.js';
import { oracle } from '../../src/bench/workloads/oracle.js';
import { sharedPrefixWorkload } from '../../src/bench/workloads/shared-prefix.js';
import { agenticPrompt, agenticWorkload } from '../../src/bench/workloads/agentic.js';
import { sizeFleet } from '../../src/bench/cluster/sizing.js';

const dir = mkdtempSync(join(tmpdir(), 'bench-workloads-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function trace(lines: object[]): string {
  const f = join(dir, `t${Math.random().toString(36).slice(2)}.jsonl`);
  writeFileSync(f, lines.map((l) => JSON.stringify(l)).join('\n') + '\n');
  return f;
}

describe('mooncake workload', () => {
  it('maps equal hash ids to equal tokens and cuts the last block', () => {
    const a = traceTokens({ timestamp: 0, input_length: 1100, output_length: 1, hash_ids: [0, 1, 2] }, 7);
    const b = traceTokens({ timestamp: 0, input_length: 700, output_length: 1, hash_ids: [0, 5] }, 7);
    expect(a.length).toBe(1100);
    expect(b.length).toBe(700);
    expect(a.subarray(0, 512)).toEqual(b.subarray(0, 512));
    expect(a.subarray(512, 700)).not.toEqual(b.subarray(512, 700));
    expect(traceTokens({ timestamp: 0, input_length: 1100, output_length: 1, hash_ids: [0, 1, 2] }, 8)).not.toEqual(a);
  });

  it('rejects records whose hash ids do not match ceil(input_length / 512)', () => {
    expect(() =>
      parseTrace(JSON.stringify({ timestamp: 0, input_length: 1024, output_length: 1, hash_ids: [0, 1, 2] }), 'x'),
    ).toThrow(/ceil/);
  });

  it('has an exact infinite-cache oracle', async () => {
    // r0: blocks 0,1 (1024 tokens) -> 0 hits; r1: 0,1,2 -> 1024 hits; r2: 0,3 -> 512 hits.
    const f = trace([
      { timestamp: 0, input_length: 1024, output_length: 4, hash_ids: [0, 1] },
      { timestamp: 10, input_length: 1536, output_length: 4, hash_ids: [0, 1, 2] },
      { timestamp: 20, input_length: 1000, output_length: 4, hash_ids: [0, 3] },
    ]);
    const w = mooncakeWorkload({
      file: f,
      seed: 1,
      maxRequests: 10,
      maxModelLen: 4096,
      maxOutputTokens: null,
      sample: 1,
    });
    const o = await oracle(w, 64);
    expect(o.promptTokens).toBe(1024 + 1536 + 1000);
    expect(o.hitTokens).toBe(1024 + 512);
    // Distinct full 64-token blocks: 16 + 8 (block 2) + 7 (block 3's 488 tokens hold 7 full blocks).
    expect(o.distinctBlocks).toBe(16 + 8 + 7);
    expect(o.maxSequence).toBe(1540);
    expect(w.requests.map((r) => r.atMs)).toEqual([0, 10, 20]);
    expect(w.requests[1].sessionKey).toBe(w.requests[0].sessionKey);
  });

  it('caps the engine-side hit like the engine: the last prompt token is always recomputed', async () => {
    const f = trace([
      { timestamp: 0, input_length: 1024, output_length: 1, hash_ids: [0, 1] },
      { timestamp: 1, input_length: 1024, output_length: 1, hash_ids: [0, 1] },
    ]);
    const o = await oracle(
      mooncakeWorkload({ file: f, seed: 1, maxRequests: 10, maxModelLen: 4096, maxOutputTokens: null, sample: 1 }),
      64,
    );
    expect(o.hitTokens).toBe(1024 - 64);
  });

  it('skips requests beyond max_model_len, caps output, keeps whole conversations when sampling', () => {
    const f = trace([
      { timestamp: 0, input_length: 600, output_length: 900, hash_ids: [0, 1] },
      { timestamp: 1, input_length: 5000, output_length: 10, hash_ids: Array.from({ length: 10 }, (_, i) => 10 + i) },
    ]);
    const w = mooncakeWorkload({
      file: f,
      seed: 1,
      maxRequests: 10,
      maxModelLen: 2048,
      maxOutputTokens: 100,
      sample: 1,
    });
    expect(w.skipped).toBe(1);
    expect(w.requests.map((r) => r.maxTokens)).toEqual([100]);
    const lines = Array.from({ length: 400 }, (_, i) => ({
      timestamp: i,
      input_length: 1024,
      output_length: 1,
      hash_ids: [0, i % 40],
    }));
    const s = mooncakeWorkload({
      file: trace(lines),
      seed: 3,
      maxRequests: 1000,
      maxModelLen: 4096,
      maxOutputTokens: null,
      sample: 0.25,
    });
    const keys = new Set(s.requests.map((r) => r.sessionKey));
    expect(keys.size).toBeGreaterThan(2);
    expect(keys.size).toBeLessThan(25);
    expect(s.requests.length).toBe(keys.size * 10);
  });
});

describe('mooncake tiling', () => {
  it("superimposes copies that share only block 0, each with the trace's reuse", async () => {
    const lines = [
      { timestamp: 0, input_length: 1024, output_length: 4, hash_ids: [0, 1] },
      { timestamp: 10, input_length: 1536, output_length: 4, hash_ids: [0, 1, 2] },
    ];
    const f = trace(lines);
    const one = mooncakeWorkload({
      file: f,
      seed: 1,
      maxRequests: 2,
      maxModelLen: 4096,
      maxOutputTokens: null,
      sample: 1,
      tile: true,
    });
    const three = mooncakeWorkload({
      file: f,
      seed: 1,
      maxRequests: 6,
      maxModelLen: 4096,
      maxOutputTokens: null,
      sample: 1,
      tile: true,
    });
    expect(one.copies).toBe(1);
    expect(three.copies).toBe(3);
    expect(three.requests).toHaveLength(6);
    // Sorted by arrival, every copy's turns in order; tokensNow is promptTokens.
    const at = three.requests.map((r) => r.atMs);
    expect([...at].sort((a, b) => a - b)).toEqual(at);
    for (let i = 0; i < 6; i++) expect(three.tokensNow!(i)).toEqual(await three.promptTokens(i));
    // Per copy: 512 hits on the 2nd request (block 0 is shared across copies, so later copies' first requests hit it too).
    const o1 = await oracle(one, 64);
    const o3 = await oracle(three, 64);
    expect(o1.hitTokens).toBe(1024);
    expect(o3.hitTokens).toBe(3 * 1024 + 2 * 512);
    expect(o1.distinctBlocks).toBe(24);
    expect(o3.distinctBlocks).toBe(8 + 3 * 16);
    // Without tile the trace is not extended.
    expect(
      mooncakeWorkload({ file: f, seed: 1, maxRequests: 6, maxModelLen: 4096, maxOutputTokens: null, sample: 1 })
        .requests,
    ).toHaveLength(2);
  });
});

describe('agentic workload', () => {
  it('grows each session by reply + tool result per turn over a shared system prompt', async () => {
    const o = {
      sessions: 3,
      turns: 4,
      systemLen: 256,
      taskLen: 64,
      replyLen: 16,
      toolLen: 48,
      thinkMs: 1000,
      rate: 2,
      seed: 9,
    };
    const w = agenticWorkload(o);
    expect(w.requests).toHaveLength(12);
    expect(w.requests.filter((r) => r.after === null)).toHaveLength(3);
    for (let i = 0; i < 12; i++) {
      const r = w.requests[i];
      expect(r.maxTokens).toBe(16);
      if (i % 4 > 0) {
        expect(r.after!.index).toBe(i - 1);
        expect(r.after!.thinkMs).toBeGreaterThanOrEqual(500);
        expect(r.after!.thinkMs).toBeLessThan(1500);
      }
    }
    const t1 = agenticPrompt(o, 1, 1);
    const t2 = agenticPrompt(o, 1, 2);
    expect(t2.length).toBe(256 + 64 + 2 * 64);
    expect(t2.subarray(0, t1.length)).toEqual(t1);
    expect(agenticPrompt(o, 2, 0).subarray(0, 256)).toEqual(t1.subarray(0, 256));
    expect(agenticPrompt(o, 2, 0).subarray(256, 320)).not.toEqual(t1.subarray(256, 320));
    expect(w.tokensNow!(5)).toEqual(t1);
    // The oracle: sessions share the system prompt, each turn hits its session's history.
    const orc = await oracle(w, 16);
    expect(orc.hitRate).toBeGreaterThan(0.5);
    expect(agenticWorkload(o).requests.map((r) => [r.atMs, r.after?.thinkMs])).toEqual(
      w.requests.map((r) => [r.atMs, r.after?.thinkMs]),
    );
  });
});

describe('shared-prefix workload', () => {
  it('is reproducible and shares system prompts within a group only', async () => {
    const o = { groups: 3, promptsPerGroup: 4, systemLen: 256, questionLen: 64, outputLen: 8, rate: 10, seed: 5 };
    const a = sharedPrefixWorkload(o);
    const b = sharedPrefixWorkload(o);
    expect(a.requests.map((r) => [r.atMs, r.sessionKey])).toEqual(b.requests.map((r) => [r.atMs, r.sessionKey]));
    const orc = await oracle(a, 64);
    // Each group's first prompt misses; the others hit the 256-token system prompt.
    expect(orc.hitTokens).toBe(3 * 3 * 256);
    expect(orc.distinctBlocks).toBe(3 * 4 + 12 * 1);
  });
});

describe('stats, sizing and charts', () => {
  it('computes distributions, CoV and busy time', () => {
    expect(dist([5, 1, 3]).p50).toBe(3);
    expect(cov([2, 2, 2])).toBe(0);
    expect(cov([1, 3])).toBeCloseTo(0.5);
    expect(
      unionLength([
        [0, 2],
        [1, 3],
        [5, 6],
      ]),
    ).toBe(4);
  });

  it('sizes engines below the working set but above two of the longest sequences', () => {
    const s = sizeFleet(
      {
        requests: 100,
        promptTokens: 100 * 640,
        hitTokens: 0,
        hitRate: 0,
        distinctBlocks: 100_000,
        maxPromptTokens: 4000,
        maxSequence: 4100,
      },
      4,
      64,
      0.2,
      2,
    );
    expect(s.numGpuBlocks).toBe(5000);
    expect(s.numCpuBlocks).toBe(10_000);
    expect(s.perEngineRatio).toBe(20);
    expect(s.maxModelLen).toBe(4160);
  });

  it('draws well-formed SVG', () => {
    expect(niceTicks(0, 1)).toEqual([0, 0.2, 0.4, 0.6, 0.8, 1]);
    const l = lineChart({
      title: 'a <b>',
      xLabel: 'x',
      yLabel: 'y',
      xLog: true,
      series: [
        {
          name: 's',
          points: [
            [1, 0],
            [100, 1],
          ],
        },
      ],
    });
    expect(l).toMatch(/^<svg [\s\S]*<\/svg>\n$/);
    expect(l).toContain('a &lt;b&gt;');
    const b = barChart({
      title: 't',
      yLabel: 'y',
      categories: ['a', 'b'],
      series: [
        { name: 'g', values: [1, 2] },
        { name: 'h', values: [1, NaN] },
      ],
      stacked: true,
      refs: [{ value: 3, label: 'oracle' }],
    });
    expect(b.match(/<rect x=/g)?.length).toBeGreaterThanOrEqual(3);
  });
});
