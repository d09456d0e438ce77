// The fleet simulation's replicas share a busy holder: a waiter held for it on one replica is tried
// when a peer's booking there ends (replica sync), as the server's onReleased does
// (CapacityQueue.notify() naming no instance: every waiter due), not only at its own 1 s timer.
import { describe, expect, it } from 'vitest';
import { routerPlan } from '../../src/bench/fleet.js';
import { variant } from '../../src/bench/cluster/policies.js';
import { mulberry32 } from '../../src/common/prng.js';
import { rangeVocab } from '../../src/engine-sim/core/config.js';
import { EngineCore } from '../../src/engine-sim/core/engine-core.js';
import { simulateFleet } from '../../src/fleet-sim/simulation.js';
import type { FleetRequest } from '../../src/fleet-sim/types.js';

const ids = ['e0', 'e1', 'e2'];
const N = 40;

describe('fleet simulation: the hold across replicas', () => {
  it("a waiter held for a busy holder is tried when a peer's booking there frees room", () => {
    // Busy while any prefill is queued; every prompt shares a 3,000-token prefix, cached by the
    // first two requests: later ones wait for its holder, on both replicas (requests alternate).
    const plan = routerPlan(variant('kv[busy.max_active_prefill_tokens=1,busy.queue_size=64]'), ids, 16);
    const rand = mulberry32(5);
    const tok = () => 1000 + Math.floor(rand() * 30_000);
    const prefix = Array.from({ length: 3000 }, tok);
    const prompts = Array.from({ length: N }, () => Uint32Array.from([...prefix, ...Array.from({ length: 32 }, tok)]));
    const engines = ids.map(
      (_, k) =>
        new EngineCore({
          blockSize: 16,
          numGpuBlocks: 2000,
          maxNumSeqs: 8,
          maxNumBatchedTokens: 512,
          seed: k,
          hashFlavor: 'murmur',
          routerHashSeed: BigInt(plan.cfg.hashing.seed),
          outputVocab: rangeVocab(100, 200),
        }),
    );
    const requests: FleetRequest[] = prompts.map((_, i) => ({
      atMs: i < 2 ? i * 3000 : 6000 + i * 7,
      after: null,
      maxTokens: 40,
      sessionKey: null,
    }));
    const decided = new Map<number, { at: number; held: string | null }[]>();
    const out = simulateFleet({
      requests,
      prompt: (i) => prompts[i],
      engines,
      ids,
      model: plan.cfg.models[0].name,
      blockSize: 16,
      routers: 2,
      router: plan,
      seed: 3,
      requestLatencyMs: 0,
      kvEventDelayMs: 1,
      eventWire: 'bytes',
      syncDelayMs: 1,
      scrapeIntervalMs: null,
      drainTimeoutMs: 600_000,
      onDecision: (i, d, now) => {
        const l = decided.get(i) ?? [];
        l.push({ at: now, held: d.held?.instance ?? null });
        decided.set(i, l);
      },
    });
    expect(out.records.every((r) => r.status === 200)).toBe(true);
    // Request 3 (replica 1) is held for the prefix's holder; replica 0's requests there reach their
    // first token within tens of ms, each a sync message that frees room on replica 1's view.
    const q3 = decided.get(3)!;
    expect(q3[0].held).not.toBeNull();
    expect(q3.length).toBeGreaterThan(1);
    expect(q3[1].at - q3[0].at).toBeLessThan(500);
  });
});
