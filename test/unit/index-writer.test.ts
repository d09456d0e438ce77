// The one write path into the index: scopes of purges and clears, ordering state, registrations,
// and the relay tap as a wrapper that records exactly what it writes.
import { describe, expect, it } from 'vitest';
import type { RelayedOp } from '../../src/cluster/event-wire.js';
import { RelayTap } from '../../src/cluster/relay-taps.js';
import type { KvEvent } from '../../src/indexer/kv-event.js';
import { dumpIndex } from '../../src/indexer/snapshot.js';
import { TieredIndexer } from '../../src/indexer/namespaces.js';
import {
  KvIndexWriter,
  type IndexedRegistration,
  registerInIndex,
  unregisterFromIndex,
} from '../../src/indexer/writer.js';

const BS = 4;
const ns = (tenant = 'default', loraName: string | null = null) => ({
  model: 'm',
  blockSize: BS,
  loraName,
  salt: null,
  tenant,
});

function stored(hashes: bigint[], o: Partial<KvEvent> = {}): KvEvent {
  return {
    event_type: 'stored',
    model_name: 'm',
    block_size: BS,
    additional_salt: null,
    lora_name: null,
    tenant_id: 'default',
    backend_id: 'e0',
    medium: 'GPU',
    dp_rank: 0,
    event_id: null,
    timestamp: null,
    seq_hashes: hashes,
    base_block_idx: null,
    parent_hash: null,
    token_ids: null,
    ...o,
  } as KvEvent;
}
const cleared = (o: Partial<KvEvent> = {}): KvEvent =>
  ({
    event_type: 'cleared',
    model_name: 'm',
    block_size: BS,
    additional_salt: null,
    lora_name: null,
    tenant_id: 'default',
    backend_id: 'e0',
    medium: null,
    dp_rank: 0,
    event_id: null,
    timestamp: null,
    ...o,
  }) as KvEvent;

/** Overlap of a query: per candidate its prefix on each tier, and the shared pool's. */
function hits(ix: TieredIndexer, id: ReturnType<typeof ns>, hashes: bigint[]): unknown {
  const r = ix.queryHashes(id, BigUint64Array.from(hashes), 0);
  return { candidates: r.candidates.map((c) => [c.instance, c.device, c.host, c.disk]), shared: r.sharedBlocks };
}
const blocksOf = (ix: TieredIndexer) => ix.stats().blocks;

describe('IndexWriter', () => {
  it('a device-wide clear empties the backend on every medium in every namespace of its tenant only', () => {
    const w = new KvIndexWriter(new TieredIndexer());
    w.apply(stored([1n, 2n]));
    w.apply(stored([1n, 2n], { medium: 'CPU' }));
    w.apply(stored([7n], { lora_name: 'ad' })); // another namespace of the same engine
    w.apply(stored([1n], { tenant_id: 'other' }));
    w.apply(stored([1n], { dp_rank: 1 }));
    expect(blocksOf(w.indexer)).toBe(4); // distinct blocks per namespace: {1,2}, {7}, {1}
    const out = w.apply(cleared());
    expect(out).toEqual({ status: 'ok', blocks: 5 }); // (block, holder) pairs: 2 GPU + 2 CPU + 1 LoRA
    expect(
      w.indexer
        .find(ns())!
        .index.holderInfos()
        .map((h) => [h.dpRank, h.medium, h.blocks]),
    ).toEqual([[1, 'GPU', 1]]);
    expect(w.indexer.find(ns('default', 'ad'))!.index.holderInfos()).toEqual([]);
    expect(
      w.indexer
        .find(ns('other'))!
        .index.holderInfos()
        .map((h) => h.blocks),
    ).toEqual([1]);
  });

  it('a purge is scoped by tenant, for blocks and for ordering state', () => {
    const w = new KvIndexWriter(new TieredIndexer());
    w.apply(stored([1n], { event_id: 1n }));
    w.apply(stored([1n], { event_id: 1n, tenant_id: 'other' }));
    expect(w.purge({ backend: 'e0', tenant: 'default' })).toBe(1);
    expect(
      w.indexer
        .find(ns('other'))!
        .index.holderInfos()
        .map((h) => h.blocks),
    ).toEqual([1]);
    // The other tenant's stream keeps its ordering: skipping ids there is still a gap.
    expect(w.apply(stored([2n], { event_id: 3n, tenant_id: 'other' })).status).toBe('gap');
    // The purged stream starts from a clean baseline: any id is accepted.
    expect(w.apply(stored([3n], { event_id: 9n })).status).toBe('ok');
    expect(w.apply(stored([4n], { event_id: 11n })).status).toBe('gap');
  });

  it('clearConfirmed keeps bookings and forgets every stream order', () => {
    const w = new KvIndexWriter(new TieredIndexer());
    w.apply(stored([1n, 2n], { event_id: 5n }));
    const space = w.indexer.namespace(ns());
    space.index.store(space.index.speculativeHolder('e1', 0, 1000), BigUint64Array.of(1n), null, 10_000);
    expect(w.clearConfirmed()).toBe(2);
    expect(space.index.holderInfos().map((h) => [h.instance, h.speculative, h.blocks])).toEqual([['e1', true, 1]]);
    expect(w.apply(stored([1n], { event_id: 1n })).status).toBe('ok'); // id 1 after 5: no regression purge
  });

  it('registrations bind shared pools, enrol instances, and unregister purges and forgets on the last rank', () => {
    const w = new KvIndexWriter(new TieredIndexer());
    const reg = (o: Partial<IndexedRegistration>): IndexedRegistration => ({
      model: 'm',
      blockSize: BS,
      loraName: null,
      additionalSalt: null,
      tenant: 'default',
      instanceId: 'i0',
      backendId: 'i0',
      dpRank: 0,
      shared: false,
      ...o,
    });
    registerInIndex(w, reg({}));
    registerInIndex(w, reg({ instanceId: 'pool', backendId: 'store', shared: true }));
    registerInIndex(w, reg({ instanceId: 'i1', backendId: 'b1' }));
    expect([...w.indexer.find(ns())!.instances].sort()).toEqual(['i0', 'i1']);
    expect(w.indexer.ownerOf('store')).toBeNull();
    expect(w.indexer.ownerOf('b1')).toBe('i1');
    w.apply(stored([1n], { backend_id: 'b1' }));
    w.apply(stored([1n], { backend_id: 'b1', dp_rank: 1 }));
    expect(unregisterFromIndex(w, reg({ instanceId: 'i1', backendId: 'b1' }), false)).toBe(1);
    expect(w.indexer.find(ns())!.instances.has('i1')).toBe(true);
    expect(unregisterFromIndex(w, reg({ instanceId: 'i1', backendId: 'b1', dpRank: 1 }), true)).toBe(1);
    expect(w.indexer.find(ns())!.instances.has('i1')).toBe(false);
    expect(blocksOf(w.indexer)).toBe(0);
  });

  it('the relay tap records each write after making it, and the ops rebuild the same index', () => {
    const ops: RelayedOp[] = [];
    const tap = new RelayTap(new KvIndexWriter(new TieredIndexer()));
    tap.bind('early', null); // before a relay attaches: written, not recorded
    expect(tap.indexer.ownerOf('early')).toBeNull();
    tap.sink = { record: (op) => ops.push(op) };
    tap.apply(stored([1n]));
    tap.bind('store', null);
    tap.apply(stored([2n], { backend_id: 'store', medium: 'EXTERNAL' }));
    tap.purge({ backend: 'e0', dpRank: 0 });
    tap.purgeInstance({ instance: 'e9', tenant: 'default' });
    expect(ops.map((o) => o.op)).toEqual(['event', 'bind', 'event', 'remove_backend', 'remove_instance']);
    expect(ops[3]).toEqual({ op: 'remove_backend', backend: 'e0', dpRank: 0, tenant: null });

    const replica = new KvIndexWriter(new TieredIndexer());
    replica.bind('early', null);
    for (const op of ops) {
      if (op.op === 'bind') replica.bind(op.backend, op.instance);
      else if (op.op === 'event') replica.apply(op.event);
      else if (op.op === 'remove_backend')
        replica.purge({ backend: op.backend, ...(op.dpRank !== null ? { dpRank: op.dpRank } : {}) });
      else if (op.op === 'remove_instance') replica.purgeInstance({ instance: op.instance });
    }
    expect(dumpIndex(replica.indexer, 0)).toEqual(dumpIndex(tap.indexer, 0));
    expect(hits(tap.indexer, ns(), [2n])).toEqual({ candidates: [], shared: 1 });
    expect(hits(replica.indexer, ns(), [2n])).toEqual({ candidates: [], shared: 1 });
  });
});
