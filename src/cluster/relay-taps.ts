// The relay's view of every change the listener path makes to its index: a wrapper around the
// IndexWriter that records each write as a RelayedOp after it is made, so the relay's index always
// equals what the recorded ops build. Everything that writes the relay's index goes through it.
import type { ApplyOutcome } from '../indexer/apply.js';
import type { KvEvent } from '../indexer/kv-event.js';
import type { IndexSnapshot } from '../indexer/snapshot.js';
import type { TieredIndexer } from '../indexer/namespaces.js';
import type { IndexWriter, InstanceScope, NamespaceRef, PurgeScope } from '../indexer/writer.js';
import type { RelayedOp } from './event-wire.js';

export interface OpSink {
  record(op: RelayedOp): void;
}

export class RelayTap implements IndexWriter {
  /** Where ops go; null while no relay is attached (writes still reach the index). */
  sink: OpSink | null = null;

  constructor(private readonly inner: IndexWriter) {}

  get indexer(): TieredIndexer {
    return this.inner.indexer;
  }

  apply(ev: KvEvent): ApplyOutcome {
    const out = this.inner.apply(ev);
    this.sink?.record({ op: 'event', event: ev });
    return out;
  }

  purge(scope: PurgeScope): number {
    const n = this.inner.purge(scope);
    this.sink?.record({
      op: 'remove_backend',
      backend: scope.backend,
      dpRank: scope.dpRank ?? null,
      tenant: scope.tenant ?? null,
    });
    return n;
  }

  purgeInstance(scope: InstanceScope): number {
    const n = this.inner.purgeInstance(scope);
    this.sink?.record({
      op: 'remove_instance',
      instance: scope.instance,
      dpRank: scope.dpRank ?? null,
      tenant: scope.tenant ?? null,
    });
    return n;
  }

  bind(backend: string, instance: string | null): void {
    this.inner.bind(backend, instance);
    this.sink?.record({ op: 'bind', backend, instance });
  }

  // Consumers start every epoch from a clear of their own; enrolments follow from the events.
  clearConfirmed(): number {
    return this.inner.clearConfirmed();
  }

  enroll(ns: NamespaceRef, instance: string): void {
    this.inner.enroll(ns, instance);
  }

  forget(instance: string, tenant: string): void {
    this.inner.forget(instance, tenant);
  }

  // A relay never restores: its index is built from its own listeners.
  restore(snap: IndexSnapshot, now: number): number {
    return this.inner.restore(snap, now);
  }
}
