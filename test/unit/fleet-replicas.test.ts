// The fleet simulation's KV events reach every router replica: a batch is decoded once and applied
// by each replica's ingest of that engine's stream, so every replica holds the same index and counts
// the same outcomes, with the msgpack payloads and with the decoded values alike. The engines'
// deliveries: first and last tokens, rejections, and each engine's own counters.
import { describe, expect, it } from 'vitest';
import { simulateFleet } from '../../src/fleet-sim/simulation.js';
import type { FleetOutput } from '../../src/fleet-sim/types.js';
import { prefixPrompts, smallFleet } from '../helpers/fleet.js';

const ENGINES = 3;
const N = 60;
const ids = Array.from({ length: ENGINES }, (_, k) => `e${k}`);

const prompts = prefixPrompts(11, N, { prefixes: 4, prefixLen: 256, tailMin: 64, tailSpan: 400 });

function run(routers: number, eventWire: 'bytes' | 'values', prompt = (i: number) => prompts[i]): FleetOutput {
  // Small caches: blocks are evicted, so removals flow too.
  const { input } = smallFleet('kv', ids, prompts, { atMs: (i) => i * 15, maxTokens: 20, numGpuBlocks: 120 });
  return simulateFleet({ ...input, prompt, routers, eventWire });
}

describe('fleet simulation: KV events and replicas', () => {
  it('every replica applies every batch once: the same outcomes and the same index', () => {
    for (const wire of ['bytes', 'values'] as const) {
      const out = run(3, wire);
      expect(out.records.every((r) => r.status === 200)).toBe(true);
      const [a, ...rest] = out.routers;
      expect(a.applied.ok).toBeGreaterThan(0);
      expect(a.index.blocks).toBeGreaterThan(0);
      for (const r of rest) {
        expect(r.applied).toEqual(a.applied);
        expect(r.index).toEqual(a.index);
      }
    }
  });

  it("delivers each request's first and last token and its engine's rejection; counts per engine", () => {
    // Request 7 cannot fit any engine (120 blocks of 16 tokens): its engine rejects it.
    const big = Uint32Array.from({ length: 2500 }, (_, i) => 7 + i);
    const out = run(2, 'bytes', (i) => (i === 7 ? big : prompts[i]));
    const failed = out.records.filter((r) => r.status !== 200);
    expect(failed.map((r) => [r.index, r.error])).toEqual([
      [7, `request q7 needs more KV blocks than this engine has`],
    ]);
    for (const r of out.records.filter((x) => x.status === 200)) {
      expect(r.completionTokens).toBe(20);
      expect(r.ttftMs).toBeGreaterThan(0);
      expect(r.e2eMs).toBeGreaterThan(r.ttftMs!);
    }
    // Each engine's counters are its own: its requests and tokens are those of the records it served.
    for (const [k, t] of out.engines.entries()) {
      const mine = out.records.filter((r) => r.instance === `e${k}` && r.status === 200);
      expect(t.id).toBe(`e${k}`);
      expect(t.requests).toBe(mine.length);
      expect(t.generationTokens).toBe(mine.length * 20);
      // (Prompt tokens of first admissions: the rejected request was admitted once, in a chunk.)
      const sent = out.records.filter((r) => r.instance === `e${k}`);
      expect(t.promptTokens).toBe(sent.reduce((a, r) => a + r.promptTokens, 0));
      expect(t.passes).toBeGreaterThanOrEqual(20);
      expect(t.busyMs).toBeGreaterThan(0);
      expect(t.batches).toBeGreaterThan(0);
    }
  });
});
