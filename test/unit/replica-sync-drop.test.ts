// Replica sync never throws into the scheduler's hooks: a message it cannot send is dropped and
// counted, and the booking, its release and the request go on (the cluster README's invariant).
import { describe, expect, it } from 'vitest';
import type { LinkStatus, SyncLink } from '../../src/cluster/nats-link.js';
import { ReplicaSync } from '../../src/cluster/replica-sync.js';
import { TieredIndexer } from '../../src/indexer/namespaces.js';
import type { CostWeights } from '../../src/scheduler/cost.js';
import { Scheduler } from '../../src/scheduler/scheduler.js';

const ns = { model: 'm', blockSize: 4, loraName: null, salt: null, tenant: 'default' };
const W: CostWeights = {
  model: 'time',
  overlapWeight: 1,
  medium: { cpu: 0.75, disk: 0.25, shared: 0.5 },
  trackActiveBlocks: true,
  decodeInterference: 0,
};

class ThrowingLink implements SyncLink {
  readonly connected = true;
  readonly binaryWire = true;
  attempts = 0;
  publish(): boolean {
    this.attempts++;
    throw new Error('the link broke');
  }
  subscribe(): void {}
  status(): LinkStatus {
    return { url: 'test://', connected: true, since: 0, lastError: null, connects: 1, disconnects: 0 };
  }
}

describe('replica sync, a message that cannot be sent', () => {
  it('is dropped and counted; booking, prefill and free still work', () => {
    const indexer = new TieredIndexer();
    const scheduler = new Scheduler(indexer, () => 0);
    const link = new ThrowingLink();
    const logs: string[] = [];
    const sync = new ReplicaSync(
      link,
      { scheduler, indexer, log: (l) => logs.push(l) },
      { routerId: 'r', subject: 's', heartbeatMs: 60_000, peerTimeoutMs: 120_000, advertiseUrl: null },
    );
    try {
      const d = scheduler.decide(
        {
          ns,
          candidates: [{ instance: 'a', dpRank: 0 }],
          tokens: [1, 2, 3, 4, 5, 6, 7, 8],
          policy: 'kv',
          weights: W,
          temperature: 0,
        },
        0,
      );
      expect(() => scheduler.book(d, ns, { requestId: 'b1', now: 0, speculativeTtlMs: 1000 })).not.toThrow();
      expect(scheduler.active.get('b1')).toBeDefined();
      expect(() => scheduler.prefillComplete('b1', 5)).not.toThrow();
      expect(() => scheduler.free('b1')).not.toThrow();
      expect(scheduler.active.get('b1')).toBeUndefined();
      expect(link.attempts).toBe(3);
      expect(sync.status()).toMatchObject({ published: 0, dropped: 3 });
      expect(logs.filter((l) => l.includes('could not be sent'))).toHaveLength(3);
    } finally {
      sync.close();
    }
  });
});
