// The socket-free cores of src/cluster: wire codecs (u64 exact), remote booking bookkeeping, and
// relayed ops rebuilding exactly the index their source built.
import { describe, expect, it } from 'vitest';
import { waitFor } from '../helpers/procs.js';
import { mulberry32 } from '../../src/common/prng.js';
import { decodeBatch, encodeBatch, encodeOp, type RelayedOp } from '../../src/cluster/event-wire.js';
import { RemoteBookings, isRemoteId } from '../../src/cluster/remote-bookings.js';
import { type TenantUse, TenantUsage } from '../../src/auth/tenant-usage.js';
import { RelayedIndex } from '../../src/cluster/relayed-index.js';
import { decodeRelaySnapshot, encodeRelaySnapshot } from '../../src/cluster/relay-snapshot.js';
import { RelayTap } from '../../src/cluster/relay-taps.js';
import { KvIndexWriter } from '../../src/indexer/writer.js';
import { decodeSync, encodeSync, type SyncMessage } from '../../src/cluster/sync-wire.js';
import { packU64, unpackU64 } from '../../src/cluster/codec.js';
import type { KvEvent } from '../../src/indexer/kv-event.js';
import { dumpIndex } from '../../src/indexer/snapshot.js';
import { TieredIndexer } from '../../src/indexer/namespaces.js';
import { ActiveSequences } from '../../src/scheduler/active-sequences.js';
import { PrefillRates } from '../../src/scheduler/rates.js';

const BIG = (1n << 64n) - 3n;
const NS = { model: 'm', blockSize: 4, loraName: null, salt: null, tenant: 'default' };

describe('sync wire', () => {
  it('round-trips every message with u64 hashes intact', () => {
    const msgs: SyncMessage[] = [
      {
        router: 'a',
        incarnation: 'i1',
        seq: 1,
        kind: 'add',
        id: 'r1',
        instance: 'e0',
        dpRank: 2,
        ns: NS,
        blocks: BigUint64Array.of(1n, BIG, 1n << 53n),
        prefillTokens: 12,
        speculativeTtlMs: 2000,
      },
      {
        router: 'a',
        incarnation: 'i1',
        seq: 8,
        kind: 'add',
        id: 'r3',
        instance: 'e0',
        dpRank: 0,
        ns: NS,
        blocks: BigUint64Array.of(5n, 6n),
        prefillTokens: 0,
        speculativeTtlMs: 0,
        touchedBlocks: 2,
      },
      { router: 'a', incarnation: 'i1', seq: 2, kind: 'prefill', id: 'r1' },
      { router: 'a', incarnation: 'i1', seq: 3, kind: 'free', id: 'r1' },
      { router: 'a', incarnation: 'i1', seq: 4, kind: 'heartbeat', url: 'http://x:1', bookings: 3 },
      { router: 'a', incarnation: 'i1', seq: 5, kind: 'resend', target: 'b' },
      {
        router: 'a',
        incarnation: 'i1',
        seq: 6,
        kind: 'tenants',
        uses: [
          ['acme', 2, 17],
          ['__proto__', 0, 1],
        ],
        full: true,
      },
      {
        router: 'a',
        incarnation: 'i1',
        seq: 7,
        kind: 'free',
        id: 'r2',
        rate: { workTokens: 2048, decoding: 3, ttftMs: 41.5, pool: 'm' },
      },
      { router: 'a', incarnation: 'i1', seq: 9, kind: 'free', id: 'r4', failed: true },
    ];
    for (const m of msgs) expect(decodeSync(encodeSync(m))).toEqual(m);
    expect(() => decodeSync(new TextEncoder().encode('{"v":2}'))).toThrow(/version/);
    const bad = (uses: unknown) => () =>
      decodeSync(
        new TextEncoder().encode(
          JSON.stringify({ v: 1, router: 'a', inc: 'i', seq: 1, t: 'tenants', uses, full: false }),
        ),
      );
    expect(bad([['acme', -1, 0]])).toThrow(/tenant use/);
    expect(bad([['acme', 1.5, 0]])).toThrow(/tenant use/);
    expect(bad([['acme', 1]])).toThrow(/tenant use/);
    expect(bad({ acme: 1 })).toThrow(/array/);
    // A sample the receiver cannot use (a sender's clock stepped back, a NaN written as null) is
    // left out; the free itself still applies, so no sequence gap resets the sender's bookings.
    const withRate = (rate: unknown) =>
      decodeSync(
        new TextEncoder().encode(JSON.stringify({ v: 1, router: 'a', inc: 'i', seq: 1, t: 'free', id: 'r', rate })),
      );
    for (const rate of [
      { work_tokens: -1, decoding: 0, ttft_ms: 1, pool: '' },
      { work_tokens: 1, decoding: 0, ttft_ms: 1 },
      { work_tokens: 1, decoding: 0, ttft_ms: null, pool: '' },
      null,
      [1, 2],
    ]) {
      expect(withRate(rate)).toEqual({ router: 'a', incarnation: 'i', seq: 1, kind: 'free', id: 'r' });
    }
    // A free without a sample is what senders before the field send, and stays one.
    expect(
      decodeSync(new TextEncoder().encode(JSON.stringify({ v: 1, router: 'a', inc: 'i', seq: 1, t: 'free', id: 'r' }))),
    ).not.toHaveProperty('rate');
  });
});

describe('u64 packing', () => {
  // The reference: every value written as little-endian bytes, one at a time (the wire's definition).
  const reference = (values: readonly bigint[]) => {
    const buf = Buffer.alloc(values.length * 8);
    values.forEach((v, i) => {
      buf.writeBigUInt64LE(v, i * 8);
    });
    return buf.toString('base64');
  };

  it('packs typed arrays, views into larger buffers and plain arrays to the same bytes, and unpacks them', () => {
    const rand = mulberry32(18);
    const big = () => (BigInt(Math.floor(rand() * 2 ** 32)) << 32n) | BigInt(Math.floor(rand() * 2 ** 32));
    for (const n of [0, 1, 2, 7, 64, 1000]) {
      const values = Array.from({ length: n }, big);
      values[0] ??= 0n;
      if (n > 1) values[1] = 0xffffffffffffffffn;
      const typed = BigUint64Array.from(values.slice(0, n));
      const padded = new BigUint64Array(n + 3);
      padded.set(typed, 2);
      const view = padded.subarray(2, 2 + n);
      const want = reference(values.slice(0, n));
      expect(packU64(typed)).toBe(want);
      expect(packU64(view)).toBe(want);
      expect(packU64(values.slice(0, n))).toBe(want);
      expect([...unpackU64(want)]).toEqual(values.slice(0, n));
    }
    expect(() => unpackU64(Buffer.alloc(12).toString('base64'))).toThrow(/multiple of 8/);
  });
});

describe('RemoteBookings', () => {
  const setup = () => {
    const active = new ActiveSequences();
    const indexer = new TieredIndexer();
    const rates = new PrefillRates();
    return {
      active,
      indexer,
      rates,
      rb: new RemoteBookings({ active, indexer, rates }, { router: 'me', incarnation: 'x' }),
    };
  };
  const add = (router: string, inc: string, seq: number, id: string, ttl = 0): SyncMessage => ({
    router,
    incarnation: inc,
    seq,
    kind: 'add',
    id,
    instance: 'e0',
    dpRank: 0,
    ns: NS,
    blocks: BigUint64Array.of(7n, 8n),
    prefillTokens: 8,
    contextTokens: 24,
    speculativeTtlMs: ttl,
  });

  it('applies adds (with the speculative insert), prefill and free; ignores its own', () => {
    const { active, indexer, rb } = setup();
    expect(rb.handle(add('me', 'x', 1, 'own'), 0).outcome).toBe('own');
    expect(rb.handle(add('me', 'other', 1, 'dup-id'), 0).outcome).toBe('conflict');
    expect(rb.handle(add('p', 'i', 1, 'r1', 1000), 0).outcome).toBe('applied');
    // 8 tokens after the sender's 24 cached: their attention work, 8 x (24 + 4), as the sender counts it.
    expect(active.load('e0', 0)).toEqual({
      activePrefillTokens: 8,
      activeAttention: 8 * 28,
      activeBlocks: 2,
      activeRequests: 1,
      decodingRequests: 0,
      decodingContext: 0,
    });
    expect(indexer.queryHashes(NS, BigUint64Array.of(7n, 8n), 10).candidates[0]).toMatchObject({
      instance: 'e0',
      device: 2,
    });
    expect(rb.handle({ router: 'p', incarnation: 'i', seq: 2, kind: 'prefill', id: 'r1' }, 0).released).toBe(true);
    expect(active.load('e0', 0).activePrefillTokens).toBe(0);
    expect(rb.handle({ router: 'p', incarnation: 'i', seq: 3, kind: 'free', id: 'r1' }, 0).released).toBe(true);
    expect(active.size).toBe(0);
    expect(rb.handle(add('p', 'i', 3, 'late'), 0).outcome).toBe('stale');
  });

  it("withdraws a failed attempt's speculative insert as its sender did; a served one's stays", () => {
    const { indexer, rb } = setup();
    const device = (now: number) => indexer.queryHashes(NS, BigUint64Array.of(7n, 8n), now).candidates[0]?.device ?? 0;
    rb.handle(add('p', 'i', 1, 'served', 1000), 0);
    rb.handle({ router: 'p', incarnation: 'i', seq: 2, kind: 'free', id: 'served' }, 5);
    expect(device(10)).toBe(2);
    const other = setup();
    other.rb.handle(add('p', 'i', 1, 'cut', 1000), 0);
    expect(
      other.rb.handle({ router: 'p', incarnation: 'i', seq: 2, kind: 'free', id: 'cut', failed: true }, 5).released,
    ).toBe(true);
    expect(other.indexer.queryHashes(NS, BigUint64Array.of(7n, 8n), 10).candidates).toEqual([]);
    expect(other.active.size).toBe(0);
  });

  it("repeats the sender's touch of the cached prefix in the LRU model (eviction-aware scoring)", () => {
    // The block-index eviction scenario: A stored first (oldest), then B, two evicted; five more
    // allocations leave 5 of A's 10 blocks, unless A was just routed to (touched).
    const seqA = BigUint64Array.from({ length: 10 }, (_, i) => BigInt(100 + i));
    const seqB = BigUint64Array.from({ length: 10 }, (_, i) => BigInt(200 + i));
    const surviving = (touchedBlocks: number | undefined) => {
      const { indexer, rb } = setup();
      const idx = indexer.namespace(NS).index;
      const h = idx.holder('e0', 0, 'GPU');
      idx.store(h, seqA);
      idx.store(h, seqB);
      idx.remove(h, BigUint64Array.of(208n, 209n));
      const m = { ...add('p', 'i', 1, 'r1'), blocks: seqA, ...(touchedBlocks === undefined ? {} : { touchedBlocks }) };
      expect(rb.handle(m, 0).outcome).toBe('applied');
      return idx.survivingPrefix('e0', 0, seqA, 10, 5);
    };
    expect(surviving(undefined)).toBe(5); // a sender from before the field
    expect(surviving(10)).toBe(10);
    expect(surviving(3)).toBe(5); // only the touched prefix is renewed: the tail still goes first
  });

  it("learns prefill rates from peers' samples, as the peer itself learned them", () => {
    const { rates, rb } = setup();
    const own = new PrefillRates();
    const samples = [
      { workTokens: 1024, decoding: 0, ttftMs: 60, pool: 'm' },
      { workTokens: 4096, decoding: 2, ttftMs: 230, pool: 'm' },
      { workTokens: 512, decoding: 1, ttftMs: 35, pool: 'm' },
    ];
    samples.forEach((rate, i) => {
      rb.handle(add('p', 'i', 2 * i + 1, `r${i}`), 0);
      rb.handle({ router: 'p', incarnation: 'i', seq: 2 * i + 2, kind: 'free', id: `r${i}`, rate }, 0);
      own.observe('e0', 0, rate.workTokens, rate.decoding, rate.ttftMs, rate.pool);
    });
    expect(rates.rate('e0', 0, undefined, 'm')).toEqual(own.rate('e0', 0, undefined, 'm'));
    expect(rates.rate('e0', 0, undefined, 'm')).not.toEqual(new PrefillRates().rate('e0', 0, undefined, 'm'));
    // A free for a booking it never saw teaches nothing.
    rb.handle(
      {
        router: 'p',
        incarnation: 'i',
        seq: 7,
        kind: 'free',
        id: 'unknown',
        rate: { workTokens: 1, decoding: 0, ttftMs: 9999, pool: 'm' },
      },
      0,
    );
    expect(rates.rate('e0', 0, undefined, 'm')).toEqual(own.rate('e0', 0, undefined, 'm'));
  });

  it("says when it may have missed a peer's bookings: first heard mid-stream, or after a gap", () => {
    const { rb } = setup();
    expect(rb.handle(add('p', 'i', 1, 'a'), 0).missed).toBe(false); // from the start
    expect(rb.handle(add('p', 'i', 2, 'b'), 0).missed).toBe(false);
    expect(rb.handle(add('p', 'i', 4, 'c'), 0)).toMatchObject({ reset: 'gap', missed: true });
    expect(rb.handle(add('q', 'k', 7, 'd'), 0)).toMatchObject({ reset: null, missed: true }); // joined late
    expect(rb.handle(add('q', 'k', 8, 'e'), 0).missed).toBe(false);
    expect(rb.handle(add('p', 'j', 1, 'f'), 0)).toMatchObject({ reset: 'restarted', missed: false }); // new incarnation from seq 1
    expect(rb.handle({ router: 'q', incarnation: 'k', seq: 9, kind: 'resend', target: 'me' }, 0)).toMatchObject({
      outcome: 'applied',
      released: false,
      missed: false,
    });
    // What a heartbeat's count is compared with: the bookings held for that peer.
    expect([rb.heldFor('q'), rb.heldFor('p'), rb.heldFor('nobody')]).toEqual([2, 1, 0]);
  });

  it('frees a peer on a sequence gap, a restart, and silence', () => {
    const { active, rb } = setup();
    rb.handle(add('p', 'i', 1, 'a'), 0);
    rb.handle(add('p', 'i', 2, 'b'), 0);
    const gap = rb.handle(add('p', 'i', 5, 'c'), 0);
    expect(gap).toMatchObject({ reset: 'gap', freed: 2 });
    expect(active.size).toBe(1);
    const restart = rb.handle(add('p', 'j', 1, 'd'), 0);
    expect(restart).toMatchObject({ reset: 'restarted', freed: 1 });
    expect(active.get('peer/p/j/d')).toBeDefined();
    expect(isRemoteId('peer/p/j/d')).toBe(true);
    expect(rb.expire(1000, 5000)).toEqual([]);
    expect(rb.expire(6001, 5000)).toEqual([{ router: 'p', freed: 1 }]);
    expect(active.size).toBe(0);
    expect(rb.list()).toEqual([]);
  });

  it("applies peers' tenant use, and forgets it on a restart, silence or close", () => {
    const active = new ActiveSequences();
    const tenants = new TenantUsage();
    const rb = new RemoteBookings(
      { active, indexer: new TieredIndexer(), tenants },
      { router: 'me', incarnation: 'x' },
    );
    const use = (router: string, inc: string, seq: number, uses: TenantUse[]): SyncMessage => ({
      router,
      incarnation: inc,
      seq,
      kind: 'tenants',
      uses,
      full: true,
    });
    tenants.acquire('acme');
    rb.handle(use('p', 'i', 1, [['acme', 2, 5]]), 0);
    rb.handle(
      use('q', 'k', 1, [
        ['acme', 1, 1],
        ['beta', 4, 4],
      ]),
      0,
    );
    expect([tenants.inflightOf('acme'), tenants.inflightOf('beta')]).toEqual([4, 4]);
    rb.handle(use('p', 'i', 2, [['acme', 0, 6]]), 0); // absolute: replaces p's count
    expect(tenants.inflightOf('acme')).toBe(2);
    rb.handle(use('q', 'k2', 1, []), 0); // q restarted: its old counts are gone
    expect([tenants.inflightOf('acme'), tenants.inflightOf('beta')]).toEqual([1, 0]);
    rb.handle(use('p', 'i', 3, [['acme', 3, 9]]), 0);
    expect(
      rb
        .expire(10_000, 5000)
        .map((g) => g.router)
        .sort(),
    ).toEqual(['p', 'q']);
    expect(tenants.inflightOf('acme')).toBe(1); // only this router's own request
    rb.handle(use('p', 'i2', 1, [['acme', 3, 9]]), 0);
    rb.clear();
    expect(tenants.inflightOf('acme')).toBe(1);
  });
});

describe('relayed ops', () => {
  const events: KvEvent[] = [
    {
      event_type: 'stored',
      model_name: 'm',
      block_size: 4,
      additional_salt: null,
      lora_name: null,
      tenant_id: 'default',
      backend_id: 'e0',
      medium: null,
      dp_rank: 0,
      event_id: 1n,
      timestamp: 1,
      seq_hashes: [11n, BIG],
      base_block_idx: 0,
      parent_hash: null,
      token_ids: null,
    },
    {
      event_type: 'stored',
      model_name: 'm',
      block_size: 4,
      additional_salt: null,
      lora_name: null,
      tenant_id: 'default',
      backend_id: 'e1',
      medium: 'CPU',
      dp_rank: 1,
      event_id: null,
      timestamp: null,
      seq_hashes: [21n, 22n],
      base_block_idx: null,
      parent_hash: null,
      token_ids: [1, 2, 3, 4, 5, 6, 7, 8],
    },
    {
      event_type: 'stored',
      model_name: 'm',
      block_size: 4,
      additional_salt: null,
      lora_name: null,
      tenant_id: 'default',
      backend_id: 'e1',
      medium: 'CPU',
      dp_rank: 1,
      event_id: null,
      timestamp: null,
      seq_hashes: [23n],
      base_block_idx: 2,
      parent_hash: 22n,
      token_ids: [9, 10, 11, 12],
    },
    {
      event_type: 'removed',
      model_name: 'm',
      block_size: 4,
      additional_salt: null,
      lora_name: null,
      tenant_id: 'default',
      backend_id: 'e0',
      medium: null,
      dp_rank: 0,
      event_id: 2n,
      timestamp: 2,
      seq_hashes: [BIG],
      base_block_idx: null,
    },
  ];

  it('round-trip through the wire and rebuild the source index exactly', () => {
    const recorded: RelayedOp[] = [];
    const tap = new RelayTap(new KvIndexWriter(new TieredIndexer()));
    const source = tap.indexer;
    tap.sink = { record: (op) => recorded.push(op) };
    tap.bind('pool', null);
    for (const ev of events) tap.apply(ev);
    tap.purge({ backend: 'e9' });
    const wire = decodeBatch(encodeBatch('r', recorded.map(encodeOp)));
    // Decoded hashes are a BigUint64Array (no bigint per value): compare them as values.
    const plain = (op: RelayedOp) =>
      op.op === 'event' && op.event.event_type !== 'cleared'
        ? { ...op, event: { ...op.event, seq_hashes: [...op.event.seq_hashes] } }
        : op;
    expect(wire.ops.map(plain)).toEqual(recorded.map(plain));
    expect(
      wire.ops.some(
        (op) => op.op === 'event' && op.event.event_type !== 'cleared' && [...op.event.seq_hashes].includes(BIG),
      ),
    ).toBe(true);

    const target = new TieredIndexer();
    const relayed = new RelayedIndex(new KvIndexWriter(target));
    for (const op of wire.ops) relayed.apply(op);
    expect(dumpIndex(target, 0)).toEqual(dumpIndex(source, 0));
    expect(relayed.counts).toMatchObject({ events: 4, binds: 1, purges: 1 });

    // A snapshot restores the same index; an epoch clears event-confirmed blocks only.
    const snap = decodeRelaySnapshot(
      encodeRelaySnapshot({
        version: 1,
        relay: 'r',
        stream_seq: 9,
        created_at: 0,
        bindings: [...source.bindings()],
        index: dumpIndex(source, 0),
      }),
    );
    const other = new TieredIndexer();
    const spec = other.namespace(NS);
    spec.index.store(spec.index.speculativeHolder('e0', 0, 1000), BigUint64Array.of(99n), null, 30_000);
    const r2 = new RelayedIndex(new KvIndexWriter(other));
    r2.restore(snap, 0);
    expect(dumpIndex(other, 0).namespaces[0].holders.filter((h) => h.speculative_ttl_ms === undefined)).toEqual(
      dumpIndex(source, 0).namespaces[0].holders,
    );
    r2.apply({ op: 'epoch', reason: 'start' });
    expect(other.queryHashes(NS, BigUint64Array.of(11n), 0).candidates).toEqual([]);
    expect(other.queryHashes(NS, BigUint64Array.of(99n), 0).candidates[0]?.instance).toBe('e0');
  });
});

describe('cluster config section', () => {
  it('fills defaults that match the module defaults, and rejects bad values', async () => {
    const { validate } = await import('../../src/common/schema-dsl.js');
    const { CLUSTER_SCHEMA, clusterEnabled, clusterOptionsFromConfig } = await import('../../src/cluster/config.js');
    const { clusterOptions } = await import('../../src/cluster/options.js');
    const errors: Array<{ path: string; message: string }> = [];
    const c = validate(CLUSTER_SCHEMA, {}, 'cluster', errors) as Parameters<typeof clusterOptionsFromConfig>[0];
    expect(errors).toEqual([]);
    expect(clusterEnabled(c)).toBe(false);
    expect(clusterOptions(clusterOptionsFromConfig(c))).toEqual(clusterOptions());
    const bad = validate(
      CLUSTER_SCHEMA,
      { nats: { url: 'http://x' }, peers: ['ftp://y'], events: { source: 'kafka' } },
      'cluster',
      errors,
    );
    expect(bad).toBeDefined();
    expect(errors.map((e) => e.path).sort()).toEqual(['cluster.events.source', 'cluster.nats.url', 'cluster.peers[0]']);
  });
});

describe('attachCluster without a reachable NATS', () => {
  it('is ready at once, books locally, reports the connection problem, and closes promptly', async () => {
    const { attachCluster } = await import('../../src/cluster/attach.js');
    const { Scheduler } = await import('../../src/scheduler/scheduler.js');
    const indexer = new TieredIndexer();
    const scheduler = new Scheduler(indexer);
    const c = attachCluster(
      { scheduler, writer: new KvIndexWriter(indexer), url: 'http://127.0.0.1:1' },
      { routerId: 'lonely', nats: { url: 'nats://127.0.0.1:9', reconnectWaitMs: 50 } },
    );
    await c.ready;
    const d = scheduler.decide(
      {
        ns: NS,
        candidates: [{ instance: 'e0', dpRank: 0 }],
        seq: BigUint64Array.of(1n, 2n),
        policy: 'kv',
        weights: {
          model: 'time',
          overlapWeight: 1,
          medium: { cpu: 0.75, disk: 0.25, shared: 0.5 },
          trackActiveBlocks: true,
          decodeInterference: 0.1,
        },
        temperature: 0,
      },
      0,
    );
    scheduler.book(d, NS, { requestId: 'r', now: 0, speculativeTtlMs: 0 });
    expect(scheduler.free('r')).toBe(true);
    // Both messages are dropped at once; the connection error arrives with the first failed attempt.
    const st = await waitFor(
      'the NATS connection error',
      () => (c.status().sync!.nats.lastError ? c.status().sync! : false),
      30_000,
    );
    expect(st.nats.connected).toBe(false);
    expect(st.nats.lastError).toMatch(/connect nats:\/\/127\.0\.0\.1:9/);
    expect(st.dropped).toBe(2);
    const t0 = Date.now();
    await c.close();
    expect(Date.now() - t0).toBeLessThan(2000);
  });
});
