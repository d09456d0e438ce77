// The fleet simulation's replicas share a busy holder: a waiter held for it on one replica is tried
// when a peer's booking there ends (replica sync), as the server's onReleased does
// (CapacityQueue.notify(instance): the waiters held for that instance), not only at its own 1 s timer.
import { describe, expect, it } from 'vitest';
import { simulateFleet } from '../../src/fleet-sim/simulation.js';
import { prefixPrompts, smallFleet } from '../helpers/fleet.js';

const ids = ['e0', 'e1', 'e2'];
const N = 40;

describe('fleet simulation: the hold across replicas', () => {
  it("a waiter held for a busy holder is tried when a peer's booking there frees room", () => {
    // Busy while any prefill is queued; every prompt shares a 3,000-token prefix, cached by the
    // first two requests: later ones wait for its holder, on both replicas (requests alternate).
    const prompts = prefixPrompts(5, N, { prefixes: 1, prefixLen: 3000, tailMin: 32, tailSpan: 0 });
    const { input } = smallFleet('kv[busy.max_active_prefill_tokens=1,busy.queue_size=64]', ids, prompts, {
      atMs: (i) => (i < 2 ? i * 3000 : 6000 + i * 7),
      maxTokens: 40,
      numGpuBlocks: 2000,
      maxNumSeqs: 8,
    });
    const decided = new Map<number, { at: number; held: string | null }[]>();
    const out = simulateFleet({
      ...input,
      routers: 2,
      syncDelayMs: 1,
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
