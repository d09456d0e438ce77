// Router replicas on worker threads (bench fleet --router-threads) against the same replicas inline:
// the same records and tallies, including the paths a quick run seldom takes: requests refused after
// waiting for capacity, an engine's rejection (a prompt larger than its cache) and the run deadline
// cutting requests booked and queued; and on rings small enough to wrap (64 MiB never wraps here).
import { describe, expect, it } from 'vitest';
import { ThreadedReplicas } from '../../src/bench/fleet/router-threads.js';
import { recordReserve, simulateFleet } from '../../src/fleet-sim/simulation.js';
import { prefixPrompts, smallFleet } from '../helpers/fleet.js';

const ids = ['e0', 'e1', 'e2', 'e3'];
const POLICY = 'kv[busy.max_active_prefill_tokens=1,busy.queue_size=3,busy.queue_timeout_ms=300]';

function fleet() {
  const prompts = prefixPrompts(7, 90, { prefixes: 3, prefixLen: 600, tailMin: 20, tailSpan: 200 });
  // Request 5's prompt is more than an engine's 300 blocks of 16 tokens: rejected by its engine.
  prompts[5] = Uint32Array.from({ length: 5200 }, (_, k) => 2000 + k);
  const { input } = smallFleet(POLICY, ids, prompts, {
    atMs: (i) => i * 4,
    maxTokens: 60,
    numGpuBlocks: 300,
    maxNumSeqs: 3,
  });
  return { ...input, routers: 3, drainTimeoutMs: 1_500, stopwatch: () => performance.now() };
}

/** A ring small enough to wrap many times in this run (its largest record, request 5's prompt, fits in half). */
const RING_SMALL = 48 << 10;

const strip = (o: ReturnType<typeof simulateFleet>) => JSON.stringify({ ...o, wallDecisions: null });

describe('fleet simulation: replicas on worker threads', () => {
  it('give the inline run: records, engine and router tallies', () => {
    const inline = simulateFleet(fleet());
    const statuses = new Set(inline.records.map((r) => r.error ?? String(r.status)));
    // The paths this test is about all happen.
    expect([...statuses].sort()).toEqual(
      [
        '200',
        'every instance is over its busy threshold; retry later',
        'request q5 needs more KV blocks than this engine has',
        'timeout (run deadline)',
      ].sort(),
    );
    // (A small ring, on one worker and on two: the rings wrap, and records land at their end.)
    // (catchUp false: the workers run a replica's queued calls only when it decides, so that every
    // decision first catches its replica up, past the batches its share's other replicas ran.)
    for (const [threads, ringBytes, catchUp] of [
      [1, undefined, true],
      [2, undefined, true],
      [1, RING_SMALL, true],
      [2, RING_SMALL, true],
      [1, undefined, false],
      [2, RING_SMALL, false],
    ] as const) {
      const input = fleet();
      const replicas = new ThreadedReplicas({
        policy: POLICY,
        ids,
        blockSize: 16,
        routers: 3,
        seed: input.seed,
        reserveRecords: recordReserve(input),
        threads,
        timed: true,
        oldSpaceMiB: 1024,
        youngMiB: 48,
        ...(ringBytes !== undefined ? { ringBytes } : {}),
        catchUp,
      });
      try {
        const out = simulateFleet({ ...input, replicas });
        expect(strip(out), `${threads} workers, ring ${ringBytes ?? 'default'}, catch up ${catchUp}`).toBe(
          strip(inline),
        );
        expect(out.wallDecisions.us.length).toBe(inline.wallDecisions.us.length);
        if (ringBytes !== undefined) expect(replicas.wraps).toBeGreaterThan(4);
      } finally {
        replicas.terminate();
      }
    }
  }, 120_000);
});
