// The fleet simulation's KV events reach every router replica: a batch is decoded once and applied
// by each replica's ingest of that engine's stream, so every replica holds the same index and counts
// the same outcomes, with the msgpack payloads and with the decoded values alike. The engines'
// deliveries: first and last tokens, rejections, and each engine's own counters.
import { describe, expect, it } from 'vitest';
import { routerPlan } from '../../src/bench/fleet.js';
import { variant } from '../../src/bench/cluster/policies.js';
import { mulberry32 } from '../../src/common/prng.js';
import { rangeVocab } from '../../src/engine-sim/core/config.js';
import { EngineCore } from '../../src/engine-sim/core/engine-core.js';
import { simulateFleet } from '../../src/fleet-sim/simulation.js';
import type { FleetOutput, FleetRequest } from '../../src/fleet-sim/types.js';

const ENGINES = 3;
const N = 60;
const ids = Array.from({ length: ENGINES }, (_, k) => `e${k}`);

const prompts: Uint32Array[] = (() => {
  const rand = mulberry32(11);
  const tok = () => 1000 + Math.floor(rand() * 30_000);
  const prefixes = Array.from({ length: 4 }, () => Array.from({ length: 256 }, tok));
  return Array.from({ length: N }, (_, i) => {
    const tail = Array.from({ length: 64 + Math.floor(rand() * 400) }, tok);
    return Uint32Array.from([...prefixes[i % 4], ...tail]);
  });
})();

function run(routers: number, eventWire: 'bytes' | 'values', prompt = (i: number) => prompts[i]): FleetOutput {
  const plan = routerPlan(variant('kv'), ids, 16);
  const engines = ids.map(
    (_, k) =>
      new EngineCore({
        blockSize: 16,
        // Small caches: blocks are evicted, so removals flow too.
        numGpuBlocks: 120,
        maxNumSeqs: 4,
        maxNumBatchedTokens: 512,
        seed: k,
        hashFlavor: 'murmur',
        routerHashSeed: BigInt(plan.cfg.hashing.seed),
        outputVocab: rangeVocab(100, 200),
      }),
  );
  const requests: FleetRequest[] = prompts.map((_, i) => ({
    atMs: i * 15,
    after: null,
    maxTokens: 20,
    sessionKey: null,
  }));
  return simulateFleet({
    requests,
    prompt,
    engines,
    ids,
    model: plan.cfg.models[0].name,
    blockSize: 16,
    routers,
    router: plan,
    seed: 3,
    requestLatencyMs: 0,
    kvEventDelayMs: 1,
    eventWire,
    syncDelayMs: null,
    scrapeIntervalMs: null,
    drainTimeoutMs: 600_000,
  });
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
