// A booking whose prefill the host tier credits only in part (a fractional weight such as 0.33)
// still reaches the replicas: its prefill is a whole token count where the booking is made, so the
// add message is not refused ("prefill_tokens must be an integer") and the peers see its load.
// A peer's release names the instance whose load went down (the capacity queue's wake-up tries only
// the waiters it may let go), or none when a peer's reset freed several.
import { describe, expect, it } from 'vitest';
import type { LinkStatus, SyncLink } from '../../src/cluster/nats-link.js';
import { ReplicaSync } from '../../src/cluster/replica-sync.js';
import { seqHashes } from '../../src/hashing/index.js';
import { TieredIndexer } from '../../src/indexer/namespaces.js';
import type { CostWeights } from '../../src/scheduler/cost.js';
import { Scheduler } from '../../src/scheduler/scheduler.js';

const ns = { model: 'm', blockSize: 4, loraName: null, salt: null, tenant: 'default' };
const W: CostWeights = {
  model: 'time',
  overlapWeight: 1,
  medium: { cpu: 0.33, disk: 0.25, shared: 0.5 },
  trackActiveBlocks: true,
  decodeInterference: 0,
};
const TOKENS = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10];

/** A shared in-memory bus: what one router publishes, every other subscriber of the subject gets. */
class Bus {
  readonly handlers: Array<{ link: BusLink; subject: string; h: (d: Uint8Array, s: string) => void }> = [];
}
class BusLink implements SyncLink {
  readonly connected = true;
  constructor(
    private readonly bus: Bus,
    readonly binaryWire: boolean,
  ) {}
  publish(subject: string, data: Uint8Array): boolean {
    for (const x of this.bus.handlers) if (x.link !== this && x.subject === subject) x.h(data, subject);
    return true;
  }
  subscribe(subject: string, h: (d: Uint8Array, s: string) => void): void {
    this.bus.handlers.push({ link: this, subject, h });
  }
  status(): LinkStatus {
    return { url: 'bus://', connected: true, since: 0, lastError: null, connects: 1, disconnects: 0 };
  }
}

function router(bus: Bus, id: string, binary: boolean, onReleased?: (instance?: string) => void) {
  const indexer = new TieredIndexer();
  const scheduler = new Scheduler(indexer, () => 0);
  const logs: string[] = [];
  const sync = new ReplicaSync(
    new BusLink(bus, binary),
    { scheduler, indexer, log: (l) => logs.push(l), onReleased },
    { routerId: id, subject: 's', heartbeatMs: 60_000, peerTimeoutMs: 120_000, advertiseUrl: null },
  );
  return { indexer, scheduler, sync, logs };
}

describe('replica sync of a booking credited in part by the host tier', () => {
  for (const binary of [false, true])
    it(`carries it to the peer (${binary ? 'binary' : 'JSON'} wire)`, () => {
      const bus = new Bus();
      const a = router(bus, 'ra', binary);
      const b = router(bus, 'rb', binary);
      try {
        // Instance x holds the prompt's first block on its host tier only: 0.33 of a block credited.
        const space = a.indexer.namespace(ns);
        a.indexer.bindBackend('x', 'x');
        space.index.store(space.index.holder('x', 0, 'CPU'), seqHashes(TOKENS, 4, space.space).subarray(0, 1), null);
        const d = a.scheduler.decide(
          { ns, candidates: [{ instance: 'x', dpRank: 0 }], tokens: TOKENS, policy: 'kv', weights: W, temperature: 0 },
          0,
        );
        expect(d.chosen!.creditedBlocks).toBeCloseTo(0.33, 6);
        a.scheduler.book(d, ns, { requestId: 'q1', now: 0, speculativeTtlMs: 0 });
        const own = a.scheduler.active.get('q1')!;
        expect(Number.isInteger(own.prefillTokens)).toBe(true);
        expect(own.prefillTokens).toBe(Math.round(10 - 0.33 * 4));
        // The peer booked it with the same prefill and context.
        expect(b.logs.filter((l) => /prefill_tokens/.test(l))).toEqual([]);
        const seen = b.scheduler.active.load('x', 0);
        expect(seen.activeRequests).toBe(1);
        expect(seen.activePrefillTokens).toBe(own.prefillTokens);
        expect(b.scheduler.active.totals().activeAttention).toBe(a.scheduler.active.totals().activeAttention);
        a.scheduler.free('q1');
        expect(b.scheduler.active.totals().activeRequests).toBe(0);
      } finally {
        a.sync.close();
        b.sync.close();
      }
    });
});

describe("a peer's release", () => {
  for (const binary of [false, true])
    it(`names the instance whose load went down, and none for a reset (${binary ? 'binary' : 'JSON'} wire)`, () => {
      const bus = new Bus();
      const released: Array<string | undefined> = [];
      const a = router(bus, 'ra', binary);
      const b = router(bus, 'rb', binary, (instance) => released.push(instance));
      let a2: ReturnType<typeof router> | null = null;
      try {
        const book = (r: ReturnType<typeof router>, instance: string, id: string) => {
          const d = r.scheduler.decide(
            { ns, candidates: [{ instance, dpRank: 0 }], tokens: TOKENS, policy: 'kv', weights: W, temperature: 0 },
            0,
          );
          r.scheduler.book(d, ns, { requestId: id, now: 0, speculativeTtlMs: 0 });
        };
        book(a, 'x', 'q1');
        book(a, 'y', 'q2');
        expect(released).toEqual([]);
        a.scheduler.prefillComplete('q1', 5);
        a.scheduler.free('q2');
        expect(released).toEqual(['x', 'y']);
        expect(b.scheduler.active.load('x', 0).activeRequests).toBe(1);
        // ra restarts (a new incarnation): its old booking on x is dropped, with no one instance to name.
        a2 = router(bus, 'ra', binary);
        book(a2, 'z', 'q3');
        expect(released).toEqual(['x', 'y', undefined]);
        expect(b.scheduler.active.load('x', 0).activeRequests).toBe(0);
        expect(b.scheduler.active.load('z', 0).activeRequests).toBe(1);
      } finally {
        a.sync.close();
        b.sync.close();
        a2?.sync.close();
      }
    });
});
