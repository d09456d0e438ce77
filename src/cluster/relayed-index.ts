// Consumer side of the relay: applies RelayedOps to a router's index in stream order. Pure: the
// JetStream adapter (event-consumer.ts) feeds it. Speculative entries (this router's and its
// peers' bookings) are never touched by a clear; only event-confirmed blocks are relayed state.
import type { IndexWriter } from '../indexer/writer.js';
import type { RelayedOp } from './event-wire.js';
import type { RelaySnapshot } from './relay-snapshot.js';

export interface RelayedCounts {
  events: number;
  purges: number;
  binds: number;
  epochs: number;
  rejected: number;
}

export class RelayedIndex {
  readonly counts: RelayedCounts = { events: 0, purges: 0, binds: 0, epochs: 0, rejected: 0 };

  constructor(private readonly writer: IndexWriter) {}

  apply(op: RelayedOp): void {
    switch (op.op) {
      case 'event': {
        const out = this.writer.apply(op.event);
        if (out.status === 'rejected' || out.status === 'orphan') this.counts.rejected++;
        else this.counts.events++;
        return;
      }
      case 'remove_backend':
        this.writer.purge({
          backend: op.backend,
          ...(op.dpRank !== null ? { dpRank: op.dpRank } : {}),
          ...(op.tenant !== null ? { tenant: op.tenant } : {}),
        });
        this.counts.purges++;
        return;
      case 'remove_instance':
        this.writer.purgeInstance({
          instance: op.instance,
          ...(op.dpRank !== null ? { dpRank: op.dpRank } : {}),
          ...(op.tenant !== null ? { tenant: op.tenant } : {}),
        });
        this.counts.purges++;
        return;
      case 'bind':
        this.writer.bind(op.backend, op.instance);
        this.counts.binds++;
        return;
      case 'epoch':
        this.clear();
        this.counts.epochs++;
        return;
    }
  }

  /** Drop every event-confirmed block and all ordering state. Returns blocks removed. */
  clear(): number {
    return this.writer.clearConfirmed();
  }

  /** Clear, then load a relay snapshot (bindings first: events of shared pools depend on them). */
  restore(snap: RelaySnapshot, now: number): number {
    this.clear();
    for (const [backend, instance] of snap.bindings) this.writer.bind(backend, instance);
    return this.writer.restore(snap.index, now);
  }
}
