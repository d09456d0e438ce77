// Consumer side of the relay: applies RelayedOps to a router's index in stream order. Pure: the
// JetStream adapter (event-consumer.ts) feeds it. Speculative entries (this router's and its
// peers' bookings) are never touched by a clear; only event-confirmed blocks are relayed state.
import { EventApplier } from '../events/apply.js';
import type { KvEvent } from '../events/model.js';
import { restoreIndex } from '../indexer/snapshot.js';
import type { TieredIndexer } from '../indexer/tiered-indexer.js';
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
  private applier: EventApplier;
  readonly counts: RelayedCounts = { events: 0, purges: 0, binds: 0, epochs: 0, rejected: 0 };

  constructor(private readonly indexer: TieredIndexer) {
    this.applier = new EventApplier(indexer);
  }

  apply(op: RelayedOp): void {
    switch (op.op) {
      case 'event':
        this.event(op.event);
        return;
      case 'remove_backend': {
        this.indexer.removeBackend(op.backend, { ...(op.dpRank !== null ? { dpRank: op.dpRank } : {}), ...(op.tenant !== null ? { tenant: op.tenant } : {}) });
        this.applier.resetStreams(op.backend, op.dpRank ?? undefined);
        this.counts.purges++;
        return;
      }
      case 'remove_instance':
        this.indexer.removeInstance(op.instance, { ...(op.dpRank !== null ? { dpRank: op.dpRank } : {}), ...(op.tenant !== null ? { tenant: op.tenant } : {}) });
        this.counts.purges++;
        return;
      case 'bind':
        this.indexer.bindBackend(op.backend, op.instance);
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
    let n = 0;
    for (const ns of this.indexer.namespaces()) {
      for (const h of ns.index.holderIds()) if (!ns.index.holderInfo(h).speculative) n += ns.index.clearHolder(h);
    }
    this.applier = new EventApplier(this.indexer);
    return n;
  }

  /** Clear, then load a relay snapshot (bindings first: events of shared pools depend on them). */
  restore(snap: RelaySnapshot, now: number): number {
    this.clear();
    for (const [backend, instance] of snap.bindings) this.indexer.bindBackend(backend, instance);
    return restoreIndex(this.indexer, snap.index, now);
  }

  private event(ev: KvEvent): void {
    const out = this.applier.apply(ev);
    if (out.status === 'rejected' || out.status === 'orphan') this.counts.rejected++;
    else this.counts.events++;
    // As the listener path does (listener-ingest.ts): a device-wide clear covers every namespace.
    if (ev.event_type === 'cleared' && ev.medium === null) {
      for (const ns of this.indexer.namespaces()) {
        if (ns.id.tenant !== ev.tenant_id) continue;
        for (const h of ns.index.holderIds()) {
          const info = ns.index.holderInfo(h);
          if (!info.speculative && info.backend === ev.backend_id && info.dpRank === ev.dp_rank) ns.index.clearHolder(h);
        }
      }
    }
  }
}
