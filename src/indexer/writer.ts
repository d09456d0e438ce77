// The one write path into the index. Listener ingest, the relay consumer, /register, /unregister,
// /events, config reload and peer recovery all write through an IndexWriter; reads go to the
// TieredIndexer directly. Observers (the relay's tap, metrics) wrap an IndexWriter instead of
// subclassing the index, as llm-d's instrumented index wraps its index. Pure: no I/O, no timers.
import { type ApplyOptions, type ApplyOutcome, EventApplier } from './apply.js';
import type { KvEvent } from './kv-event.js';
import type { normalizeNamespace } from './namespace.js';
import { type IndexSnapshot, restoreIndex } from './snapshot.js';
import type { TieredIndexer } from './namespaces.js';

/** A namespace by its identity; unset LoRA, salt and tenant take their defaults. */
export type NamespaceRef = Parameters<typeof normalizeNamespace>[0];

/** What a purge reaches: one backend, optionally one dp rank and one tenant (else all of them). */
export interface PurgeScope {
  backend: string;
  dpRank?: number;
  tenant?: string;
}

/** Which of an instance's holders a purge reaches (dp rank and tenant optional, as in PurgeScope). */
export interface InstanceScope {
  instance: string;
  dpRank?: number;
  tenant?: string;
}

export interface IndexWriter {
  /** The index written to (for reads). */
  readonly indexer: TieredIndexer;
  /** Apply one normalized event; a device-wide clear empties the backend in every namespace of its tenant. */
  apply(ev: KvEvent): ApplyOutcome;
  /**
   * Optional hint before applying events [from, to) of a batch one by one: load what they will read
   * (their cache misses overlap). Changes nothing; a wrapper that leaves it out only loses speed.
   */
  prefetch?(events: readonly KvEvent[], from: number, to: number): void;
  /** Drop every block a backend published (in scope) and forget its streams' ordering. */
  purge(scope: PurgeScope): number;
  /** Drop everything readable through an instance (its backends and bookings) in scope. */
  purgeInstance(scope: InstanceScope): number;
  /** Declare which instance reads a backend's blocks (null: a shared pool every instance reads). */
  bind(backend: string, instance: string | null): void;
  /** Drop every event-confirmed block and all ordering state (a relay epoch); bookings stay. */
  clearConfirmed(): number;
  /** Count an instance as serving a namespace (queries report it even before it caches anything). */
  enroll(ns: NamespaceRef, instance: string): void;
  /** Stop counting an instance in every namespace of a tenant. */
  forget(instance: string, tenant: string): void;
  /** Load a dump (GET /dump of a peer, a relay snapshot) on top of what is indexed; returns blocks added. */
  restore(snap: IndexSnapshot, now: number): number;
}

/** The implementation: a TieredIndexer and the event applier that orders each stream. */
export class KvIndexWriter implements IndexWriter {
  private applier: EventApplier;

  constructor(
    readonly indexer: TieredIndexer,
    private readonly opts: ApplyOptions = {},
  ) {
    this.applier = new EventApplier(indexer, opts);
  }

  /** Outcome counts since start, the labels of kv_events_applied_total. */
  get counts(): EventApplier['counts'] {
    return this.applier.counts;
  }

  apply(ev: KvEvent): ApplyOutcome {
    return this.applier.apply(ev);
  }

  prefetch(events: readonly KvEvent[], from: number, to: number): void {
    this.applier.prefetch(events, from, to);
  }

  purge(scope: PurgeScope): number {
    const n = this.indexer.removeBackend(scope.backend, {
      ...(scope.dpRank !== undefined ? { dpRank: scope.dpRank } : {}),
      ...(scope.tenant !== undefined ? { tenant: scope.tenant } : {}),
    });
    this.applier.resetStreams(scope.backend, scope.dpRank, scope.tenant);
    this.indexer.dropEmptyNamespaces();
    return n;
  }

  purgeInstance(scope: InstanceScope): number {
    const n = this.indexer.removeInstance(scope.instance, {
      ...(scope.dpRank !== undefined ? { dpRank: scope.dpRank } : {}),
      ...(scope.tenant !== undefined ? { tenant: scope.tenant } : {}),
    });
    this.indexer.dropEmptyNamespaces();
    return n;
  }

  bind(backend: string, instance: string | null): void {
    this.indexer.bindBackend(backend, instance);
  }

  clearConfirmed(): number {
    const n = this.indexer.clearConfirmed();
    this.applier.resetAllStreams();
    return n;
  }

  enroll(ns: NamespaceRef, instance: string): void {
    this.indexer.namespace(ns).instances.add(instance);
  }

  forget(instance: string, tenant: string): void {
    for (const ns of this.indexer.namespaces()) if (ns.id.tenant === tenant) ns.instances.delete(instance);
    this.indexer.dropEmptyNamespaces();
  }

  restore(snap: IndexSnapshot, now: number): number {
    return restoreIndex(this.indexer, snap, now);
  }
}

/** What the index needs to know of a KV-event publisher's registration. */
export interface IndexedRegistration {
  model: string;
  blockSize: number;
  loraName: string | null;
  additionalSalt: string | null;
  tenant: string;
  instanceId: string;
  backendId: string;
  dpRank: number;
  /** A shared pool (Mooncake store) that every instance reads. */
  shared: boolean;
}

/** A new registration: bind its backend and count its instance in its namespace. */
export function registerInIndex(w: IndexWriter, reg: IndexedRegistration): void {
  if (reg.shared) w.bind(reg.backendId, null);
  else {
    if (reg.backendId !== reg.instanceId) w.bind(reg.backendId, reg.instanceId);
    w.enroll(
      {
        model: reg.model,
        blockSize: reg.blockSize,
        loraName: reg.loraName,
        salt: reg.additionalSalt,
        tenant: reg.tenant,
      },
      reg.instanceId,
    );
  }
}

/**
 * A registration went away: purge its backend's rank and, unless it is a shared pool, what its
 * instance's rank can read; forget the instance when it has no rank left (`lastRank`).
 */
export function unregisterFromIndex(w: IndexWriter, reg: IndexedRegistration, lastRank: boolean): number {
  let n = w.purge({ backend: reg.backendId, dpRank: reg.dpRank, tenant: reg.tenant });
  if (!reg.shared) {
    n += w.purgeInstance({ instance: reg.instanceId, dpRank: reg.dpRank, tenant: reg.tenant });
    if (lastRank) w.forget(reg.instanceId, reg.tenant);
  }
  return n;
}
