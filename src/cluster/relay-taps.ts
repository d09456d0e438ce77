// Decorators that let `kvrouter relay` observe every change the listener path makes to its index,
// as RelayedOps, without touching the events code: the applier's events, and the indexer's
// purges and backend bindings. Recorded after the change, so the relay's index always equals
// what the recorded ops build.
import { EventApplier, type ApplyOutcome } from '../events/apply.js';
import type { KvEvent } from '../events/model.js';
import { TieredIndexer, type TieredIndexerOptions } from '../indexer/tiered-indexer.js';
import type { RelayedOp } from './event-wire.js';

export interface OpSink {
  record(op: RelayedOp): void;
}

export class TapIndexer extends TieredIndexer {
  /** Backend owners declared so far (snapshots carry them: consumers need them before events). */
  readonly bindings = new Map<string, string | null>();
  sink: OpSink | null = null;

  constructor(opts: TieredIndexerOptions = {}) {
    super(opts);
  }

  override bindBackend(backend: string, instance: string | null): void {
    super.bindBackend(backend, instance);
    this.bindings.set(backend, instance);
    this.sink?.record({ op: 'bind', backend, instance });
  }

  override removeBackend(backend: string, opts: { dpRank?: number; tenant?: string } = {}): number {
    const n = super.removeBackend(backend, opts);
    this.sink?.record({ op: 'remove_backend', backend, dpRank: opts.dpRank ?? null, tenant: opts.tenant ?? null });
    return n;
  }

  override removeInstance(instance: string, opts: { dpRank?: number; tenant?: string } = {}): number {
    const n = super.removeInstance(instance, opts);
    this.sink?.record({ op: 'remove_instance', instance, dpRank: opts.dpRank ?? null, tenant: opts.tenant ?? null });
    return n;
  }
}

export class TapApplier extends EventApplier {
  constructor(
    indexer: TieredIndexer,
    private readonly sink: OpSink,
  ) {
    super(indexer);
  }

  override apply(ev: KvEvent): ApplyOutcome {
    const out = super.apply(ev);
    this.sink.record({ op: 'event', event: ev });
    return out;
  }
}
