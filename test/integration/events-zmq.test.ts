// ZMQ KV-event ingestion end to end: a PUB and a replay ROUTER driven by the test, a ListenerPool
// subscribing, and assertions on what the index answers. Loopback only; every socket is closed.
import { createServer } from 'node:net';
import { encode } from '@msgpack/msgpack';
import { Registry as PromRegistry } from 'prom-client';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Publisher, Router } from 'zeromq';
import { KvIndexWriter } from '../../src/indexer/writer.js';
import { ListenerPool } from '../../src/events/listener-pool.js';
import { type Registration, Registry, type RegistrationSpec } from '../../src/events/registry.js';
import type { ZmqClient } from '../../src/events/sub-transport.js';
import type { ListenerOptions } from '../../src/events/zmq-listener.js';
import { TieredIndexer } from '../../src/indexer/namespaces.js';

const BS = 4;
const NS = { model: 'm', blockSize: BS, loraName: null, salt: null, tenant: 'default' };
const FF8 = Buffer.alloc(8, 0xff);
const EMPTY = Buffer.alloc(0);

function seq8(n: number): Buffer {
  const b = Buffer.alloc(8);
  b.writeBigUInt64BE(BigInt(n));
  return b;
}

const range = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);
// Engine hashes: opaque, some above 2^63 like vLLM's truncated digests.
const eh = (tag: number, i: number) => (0x9000_0000_0000_0000n | (BigInt(tag) << 16n)) + BigInt(i);

function storedMap(tag: number, tokens: number[], parent: bigint | null = null, first = 0) {
  const n = tokens.length / BS;
  return {
    type: 'BlockStored',
    block_hashes: range(first, n).map((i) => eh(tag, i)),
    parent_block_hash: parent,
    token_ids: tokens,
    block_size: BS,
    lora_id: null,
    medium: 'GPU',
    lora_name: null,
    extra_keys: range(0, n).map(() => null),
    group_idx: 0,
    kv_cache_spec_kind: 'full_attention',
  };
}

function storedArray(tag: number, tokens: number[]) {
  const n = tokens.length / BS;
  return [
    'BlockStored',
    range(0, n).map((i) => eh(tag, i)),
    null,
    tokens,
    BS,
    null,
    'GPU',
    null,
    range(0, n).map(() => null),
    0,
    'full_attention',
    null,
  ];
}

const removedArray = (hashes: bigint[]) => ['BlockRemoved', hashes, 'GPU', 0];
const removedMap = (hashes: bigint[]) => ({ type: 'BlockRemoved', block_hashes: hashes, medium: 'GPU', group_idx: 0 });
const batch = (events: unknown[], rank = 0) =>
  Buffer.from(encode([Date.now() / 1000, events, rank], { useBigInt64: true }));

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      srv.close(() => resolve(typeof addr === 'object' && addr ? addr.port : 0));
    });
  });
}

async function waitFor(cond: () => boolean, what: string, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A vLLM-like publisher: PUB + optional replay ROUTER with a buffer of (seq, payload). */
class FakeEngine {
  pub = new Publisher({ linger: 0 });
  router: Router | null = null;
  readonly buffer: Array<{ seq: number; payload: Buffer }> = [];
  seq = 0;
  /** Replies omit the topic frame (older vLLM, SGLang) when false. */
  topicInReplay = true;
  /** Drop buffered batches below this seq (a replay window that moved on). */
  windowStart = 0;
  /** Never answer replay requests (a hung replay socket). */
  mute = false;
  replayRequests: number[] = [];
  private serving: Promise<void> = Promise.resolve();

  constructor(readonly topic = '') {}

  async start(opts: { replay: boolean; pubPort?: number; replayPort?: number }): Promise<void> {
    await this.pub.bind(`tcp://127.0.0.1:${opts.pubPort ?? '*'}`);
    if (opts.replay) {
      this.router = new Router({ linger: 0 });
      await this.router.bind(`tcp://127.0.0.1:${opts.replayPort ?? '*'}`);
      this.serving = this.serve(this.router);
    }
  }

  /** Replace the PUB socket on the same port (a network blip: same process, same seq and buffer). */
  async bouncePub(downMs: number, whileDown: () => Promise<void>): Promise<void> {
    const ep = this.endpoint;
    this.pub.close();
    await sleep(downMs);
    await whileDown();
    this.pub = new Publisher({ linger: 0 });
    await this.pub.bind(ep);
  }

  get endpoint(): string {
    return this.pub.lastEndpoint!;
  }

  get replayEndpoint(): string | null {
    return this.router?.lastEndpoint ?? null;
  }

  /** Publish one batch (or only buffer it, simulating a batch the subscriber never received). */
  async publish(events: unknown[], opts: { drop?: boolean } = {}): Promise<number> {
    const s = this.seq++;
    const payload = batch(events);
    this.buffer.push({ seq: s, payload });
    if (!opts.drop) await this.pub.send([this.topic, seq8(s), payload]);
    return s;
  }

  private async serve(router: Router): Promise<void> {
    for (;;) {
      let msg: Buffer[];
      try {
        msg = await router.receive();
      } catch {
        return;
      }
      const [id, , start] = msg;
      const from = Number(start.readBigUInt64BE());
      this.replayRequests.push(from);
      if (this.mute) continue;
      for (const b of this.buffer) {
        if (b.seq < from || b.seq < this.windowStart) continue;
        await router.send(
          this.topicInReplay ? [id, EMPTY, this.topic, seq8(b.seq), b.payload] : [id, EMPTY, seq8(b.seq), b.payload],
        );
      }
      await router.send(this.topicInReplay ? [id, EMPTY, EMPTY, FF8, EMPTY] : [id, EMPTY, FF8, EMPTY]);
    }
  }

  async close(): Promise<void> {
    this.pub.close();
    this.router?.close();
    await this.serving;
  }
}

interface Harness {
  indexer: TieredIndexer;
  writer: KvIndexWriter;
  registry: Registry;
  pool: ListenerPool;
  prom: PromRegistry;
  register(spec: Partial<RegistrationSpec> & { endpoint: string }): Registration;
  device(tokens: number[], instance?: string): number;
}

let zmqClient: ZmqClient = 'builtin';
const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

function harness(options: Partial<ListenerOptions> = {}): Harness {
  const indexer = new TieredIndexer();
  const writer = new KvIndexWriter(indexer);
  const registry = new Registry();
  const prom = new PromRegistry();
  const pool = new ListenerPool({
    registry,
    writer,
    metrics: prom,
    options: { replayTimeoutMs: 1_000, heartbeatMs: 0, tailCheckMs: 0, zmqClient, ...options },
  });
  cleanups.push(() => pool.close());
  return {
    indexer,
    writer,
    registry,
    pool,
    prom,
    register(spec) {
      const full: RegistrationSpec = {
        replayEndpoint: null,
        type: 'vLLM',
        model: 'm',
        loraName: null,
        tenant: 'default',
        instanceId: 'w0',
        blockSize: BS,
        dpRank: 0,
        additionalSalt: null,
        topic: '',
        backendId: spec.instanceId ?? 'w0',
        shared: false,
        ...spec,
      };
      const r = registry.register(full, Date.now());
      if (r.kind === 'conflict') throw new Error(r.reason);
      pool.add(r.registration);
      return r.registration;
    },
    device(tokens, instance = 'w0') {
      const q = indexer.queryTokens(NS, tokens, Date.now());
      return q.candidates.find((c) => c.instance === instance)?.device ?? 0;
    },
  };
}

async function engine(opts: {
  replay: boolean;
  pubPort?: number;
  replayPort?: number;
  topic?: string;
}): Promise<FakeEngine> {
  const e = new FakeEngine(opts.topic);
  await e.start(opts);
  cleanups.push(() => e.close());
  return e;
}

/** Wait until the listener is connected and its subscription has reached the PUB (slow joiner). */
async function subscribed(h: Harness, key: string): Promise<void> {
  await waitFor(() => h.pool.stat(key)?.status === 'active', 'listener active');
  await sleep(150);
}

/**
 * A publisher with a replay endpoint applies `batches` (until `applied`), goes away, and a new
 * incarnation binds the same ports before the listener reconnects.
 */
async function restartedPublisher(
  options: Partial<ListenerOptions>,
  batches: unknown[],
  applied: (h: Harness) => boolean,
): Promise<{ h: Harness; reg: Registration; e2: FakeEngine }> {
  const pubPort = await freePort();
  const replayPort = await freePort();
  const e1 = new FakeEngine();
  await e1.start({ replay: true, pubPort, replayPort });
  const h = harness({ reconnectMs: 50, reconnectMaxMs: 100, ...options });
  const reg = h.register({ endpoint: `tcp://127.0.0.1:${pubPort}`, replayEndpoint: `tcp://127.0.0.1:${replayPort}` });
  await subscribed(h, reg.key);
  for (const b of batches) await e1.publish([b]);
  await waitFor(() => applied(h), 'first incarnation applied');
  await e1.close();
  await waitFor(() => h.pool.stat(reg.key)!.status === 'paused', 'paused');
  const e2 = new FakeEngine();
  await e2.start({ replay: true, pubPort, replayPort });
  cleanups.push(() => e2.close());
  return { h, reg, e2 };
}

const A = range(1, 8); // 2 blocks
const B = range(101, 8);
const C = range(201, 12); // 3 blocks
const D = range(301, 4);

// Every listener test runs against both SUB implementations.
for (const client of ['builtin', 'libzmq'] as const) {
  describe(`ZMQ listener (${client} client): live stream`, () => {
    beforeAll(() => {
      zmqClient = client;
    });
    it('indexes map-form and array-form batches, removals and clears; status goes pending -> active', async () => {
      const e = await engine({ replay: false });
      const h = harness();
      const reg = h.register({ endpoint: e.endpoint });
      expect(['pending', 'active']).toContain(h.registry.get(reg.key)!.status);
      await subscribed(h, reg.key);
      expect(h.registry.get(reg.key)!.status).toBe('active');

      await e.publish([storedMap(1, A)]);
      await e.publish([storedArray(2, B)]);
      await waitFor(() => h.device(A) === 2 && h.device(B) === 2, 'A and B indexed');

      // One removal per evicted block (vLLM), in both forms; removal of A's second block cuts A to 1.
      await e.publish([removedArray([eh(1, 1)]), removedMap([eh(2, 0)])]);
      await waitFor(() => h.device(A) === 1 && h.device(B) === 0, 'removals applied');

      await e.publish([['AllBlocksCleared']]);
      await waitFor(() => h.device(A) === 0, 'cleared');
      const s = h.pool.stat(reg.key)!;
      expect(s.lastSeq).toBe(3);
      expect(s.gaps).toBe(0);
      expect(s.applied.ok).toBeGreaterThanOrEqual(5);
      const metrics = await h.prom.metrics();
      expect(metrics).toMatch(/kv_events_applied_total\{status="ok"\} [5-9]/);
      expect(metrics).toMatch(/kv_event_listeners\{status="active"\} 1/);
      expect(metrics).toMatch(/kv_events_lag_seconds_count [1-9]/);
    });

    it('filters by topic and follows a parent chain across batches (dual key)', async () => {
      const e = await engine({ replay: false, topic: 'kv@pod-1@m' });
      const other = await engine({ replay: false, topic: 'other' });
      const h = harness();
      const reg = h.register({ endpoint: e.endpoint, topic: 'kv@pod' });
      await subscribed(h, reg.key);
      await e.publish([storedMap(3, C.slice(0, 4))]);
      await e.publish([storedMap(3, C.slice(4), eh(3, 0), 1)]);
      await waitFor(() => h.device(C) === 3, 'chained blocks');
      expect(h.pool.stat(reg.key)!.applied.orphan).toBe(0);
      expect(other.endpoint).not.toBe(e.endpoint);
    });

    it('a listener whose publisher starts late goes active and indexes', async () => {
      const port = await freePort();
      const h = harness({ reconnectMs: 50, reconnectMaxMs: 200 });
      const reg = h.register({ endpoint: `tcp://127.0.0.1:${port}` });
      await sleep(300);
      expect(h.pool.stat(reg.key)!.status).toBe('pending');
      expect(h.registry.get(reg.key)!.status).toBe('pending');
      expect(h.registry.get(reg.key)!.lastError).toBe(
        `cannot connect to tcp://127.0.0.1:${port}: ${client === 'builtin' ? 'ECONNREFUSED' : 'not reachable yet'} (retrying)`,
      );
      const e = await engine({ replay: false, pubPort: port });
      await subscribed(h, reg.key);
      await e.publish([storedMap(4, D)]);
      await waitFor(() => h.device(D) === 1, 'late publisher indexed');
    });

    it('an invalid endpoint fails the listener without throwing', async () => {
      const h = harness();
      const reg = h.register({ endpoint: 'bogus://nowhere' });
      expect(h.pool.stat(reg.key)!.status).toBe('failed');
      expect(h.registry.get(reg.key)!.lastError).toMatch(/connect bogus/);
    });

    it('counts and skips malformed frames, then keeps applying', async () => {
      const e = await engine({ replay: false });
      const h = harness();
      const reg = h.register({ endpoint: e.endpoint });
      await subscribed(h, reg.key);
      await e.pub.send(['', seq8(0), Buffer.from([0xc1, 0x00])]); // 0xc1 is never valid msgpack
      await e.pub.send(['', Buffer.from([1, 2, 3]), batch([])]); // short seq frame
      e.seq = 1;
      await e.publish([storedMap(5, A)]);
      await waitFor(() => h.device(A) === 2, 'good batch after bad ones');
      const s = h.pool.stat(reg.key)!;
      expect(s.applied.decode_error).toBe(2);
      expect(h.registry.get(reg.key)!.lastError).toMatch(/decode_error/);
    });
  });

  describe(`ZMQ listener (${client} client): never stale`, () => {
    beforeAll(() => {
      zmqClient = client;
    });
    for (const topicInReplay of [true, false]) {
      it(`recovers a gap through replay (${topicInReplay ? '4-frame' : '3-frame'} replies), including a lost removal`, async () => {
        const e = await engine({ replay: true });
        e.topicInReplay = topicInReplay;
        const h = harness({ bootstrapReplay: false });
        const reg = h.register({ endpoint: e.endpoint, replayEndpoint: e.replayEndpoint });
        await subscribed(h, reg.key);
        await e.publish([storedMap(1, A)]); // 0
        await e.publish([storedMap(2, B)], { drop: true }); // 1: lost on the wire
        await e.publish([storedMap(3, C)]); // 2: reveals the gap
        await waitFor(() => h.device(B) === 2 && h.device(C) === 3, 'replayed B');
        await e.publish([removedMap([eh(3, 0)])], { drop: true }); // 3: a lost removal
        await e.publish([storedMap(4, D)]); // 4
        await waitFor(() => h.device(D) === 1, 'D after second gap');
        expect(h.device(C)).toBe(0); // the lost removal was recovered: not stale
        expect(h.device(A)).toBe(2);
        const s = h.pool.stat(reg.key)!;
        expect(e.replayRequests).toEqual([1, 3]);
        expect(s.gaps).toBe(2);
        expect(s.replays.ok).toBe(2);
        expect(s.applied.replayed).toBe(4); // seqs 1, 2 then 3, 4; the held live copies of 2 and 4 are skipped
        expect(s.purges).toBe(0);
        expect(s.lastSeq).toBe(4);
        expect(await h.prom.metrics()).toMatch(/kv_events_replays_total\{result="ok"\} 2/);
      });
    }

    it('recovers a batch dropped at the end of a burst (no later seq reveals it) with a tail check', async () => {
      const e = await engine({ replay: true });
      const h = harness({ bootstrapReplay: false, tailCheckMs: 200 });
      const reg = h.register({ endpoint: e.endpoint, replayEndpoint: e.replayEndpoint });
      await subscribed(h, reg.key);
      await e.publish([storedMap(1, A)]); // 0
      await e.publish([storedMap(2, B)], { drop: true }); // 1: lost, and nothing follows it
      await waitFor(() => h.device(B) === 2, 'the tail batch through replay');
      expect(e.replayRequests[0]).toBe(0); // re-read from the last applied batch
      expect(h.pool.stat(reg.key)!.purges).toBe(0);
    });

    it('keeps the stream when a tail check finds nothing new (regression: it purged as history_lost)', async () => {
      const e = await engine({ replay: true });
      const h = harness({ bootstrapReplay: false, tailCheckMs: 100 });
      const reg = h.register({ endpoint: e.endpoint, replayEndpoint: e.replayEndpoint });
      await subscribed(h, reg.key);
      await e.publish([storedMap(1, A)]);
      await waitFor(() => h.device(A) === 2, 'A');
      await waitFor(() => h.pool.stat(reg.key)!.replays.ok === 1 && !h.pool.stat(reg.key)!.replaying, 'the tail check');
      expect(e.replayRequests).toEqual([0]);
      expect(h.device(A)).toBe(2);
      const s = h.pool.stat(reg.key)!;
      expect([s.purges, s.replays.history_lost, s.lastSeq]).toEqual([0, 0, 0]);
    });

    it('a tail check whose replay endpoint does not answer keeps the stream and pauses the checks', async () => {
      const e = await engine({ replay: true });
      const h = harness({ bootstrapReplay: false, tailCheckMs: 100, replayTimeoutMs: 300 });
      const reg = h.register({ endpoint: e.endpoint, replayEndpoint: e.replayEndpoint });
      await subscribed(h, reg.key);
      e.mute = true;
      await e.publish([storedMap(1, A)]);
      await waitFor(
        () => h.pool.stat(reg.key)!.replays.timeout === 1 && !h.pool.stat(reg.key)!.replaying,
        'the tail check to time out',
      );
      expect(h.device(A)).toBe(2);
      expect(h.registry.get(reg.key)!.lastError).toMatch(/^tail check: replay from 0 timed out/);
      await e.publish([storedMap(2, B)]); // in order: applied, no gap, no purge
      await waitFor(() => h.device(B) === 2, 'B');
      await sleep(400); // a second tail check would be due by now, but checks are paused
      const s = h.pool.stat(reg.key)!;
      expect([s.purges, s.gaps, s.lastSeq, e.replayRequests.length]).toEqual([0, 0, 1, 1]);
    });

    it('purges on a gap when there is no replay endpoint', async () => {
      const e = await engine({ replay: false });
      const h = harness();
      const reg = h.register({ endpoint: e.endpoint });
      await subscribed(h, reg.key);
      await e.publish([storedMap(1, A)]);
      await waitFor(() => h.device(A) === 2, 'A');
      await e.publish([removedMap([eh(1, 0)])], { drop: true });
      await e.publish([storedMap(2, B)]);
      await waitFor(() => h.device(B) === 2, 'B');
      expect(h.device(A)).toBe(0);
      const s = h.pool.stat(reg.key)!;
      expect(s.purges).toBe(1);
      expect(s.lastPurge).toBe('gap_no_replay');
      expect(await h.prom.metrics()).toMatch(/kv_events_purges_total\{reason="gap_no_replay"\} 1/);
    });

    it('purges when the replay times out or the publisher lost the history', async () => {
      const e = await engine({ replay: true });
      const h = harness({ bootstrapReplay: false, replayTimeoutMs: 200 });
      const reg = h.register({ endpoint: e.endpoint, replayEndpoint: e.replayEndpoint });
      await subscribed(h, reg.key);
      await e.publish([storedMap(1, A)]); // 0
      await waitFor(() => h.device(A) === 2, 'A');
      e.mute = true;
      await e.publish([storedMap(2, B)], { drop: true }); // 1
      await e.publish([storedMap(3, C)]); // 2 -> replay times out -> purge, C applied as new baseline
      await waitFor(() => h.pool.stat(reg.key)!.replays.timeout === 1 && h.device(C) === 3, 'timeout handled');
      expect(h.device(A)).toBe(0);
      expect(h.device(B)).toBe(0);

      e.mute = false;
      e.windowStart = 5; // the publisher's buffer no longer holds seq 3
      await e.publish([storedMap(4, D)], { drop: true }); // 3
      await e.publish([storedMap(1, A)], { drop: true }); // 4
      await e.publish([storedMap(2, B)]); // 5 -> replay from 3 returns 5.. -> history lost
      await waitFor(() => h.pool.stat(reg.key)!.replays.history_lost === 1, 'history lost');
      await waitFor(() => h.device(B) === 2, 'B after history loss');
      expect(h.device(C)).toBe(0); // purged with the rest of the stream
      expect(h.device(D)).toBe(0); // never recovered, never claimed
      const s = h.pool.stat(reg.key)!;
      expect(s.purges).toBe(2);
      expect(s.lastPurge).toBe('history_lost');
    });

    it('a listener that subscribes mid-stream learns earlier blocks through a bootstrap replay', async () => {
      const e = await engine({ replay: true, topic: 'kv' });
      await e.publish([storedMap(1, A)]);
      await e.publish([storedMap(2, B)]);
      await e.publish([removedMap([eh(1, 1)])]);
      const h = harness();
      const reg = h.register({ endpoint: e.endpoint, replayEndpoint: e.replayEndpoint, topic: 'kv' });
      await waitFor(() => h.device(B) === 2, 'bootstrapped');
      expect(h.device(A)).toBe(1);
      expect(e.replayRequests).toEqual([0]);
      await sleep(150);
      await e.publish([storedMap(3, D)]);
      await waitFor(() => h.device(D) === 1, 'live after bootstrap');
      expect(h.pool.stat(reg.key)!).toMatchObject({ gaps: 0, purges: 0, lastSeq: 3 });
    });

    it('gives up on a replay when too many live batches pile up behind it', async () => {
      const e = await engine({ replay: true });
      const h = harness({ bootstrapReplay: false, replayTimeoutMs: 5_000, maxHeld: 3 });
      const reg = h.register({ endpoint: e.endpoint, replayEndpoint: e.replayEndpoint });
      await subscribed(h, reg.key);
      await e.publish([storedMap(1, A)]);
      await waitFor(() => h.device(A) === 2, 'A');
      e.mute = true;
      await e.publish([storedMap(2, B)], { drop: true }); // 1
      for (const t of [C, D, B, C]) await e.publish([storedMap(3, t.slice(0, 4))]); // 2..5 held, the 4th overflows
      await waitFor(() => h.pool.stat(reg.key)!.replays.overflow === 1, 'overflow');
      await waitFor(() => h.device(C) === 1, 'live resumes');
      expect(h.device(A)).toBe(0);
      expect(h.pool.stat(reg.key)!).toMatchObject({ lastPurge: 'held_overflow', replaying: false, lastSeq: 5 });
    });

    it('purges a silent stream when silencePurgeMs is set', async () => {
      const e = await engine({ replay: false });
      const h = harness({ silencePurgeMs: 300 });
      const reg = h.register({ endpoint: e.endpoint });
      await subscribed(h, reg.key);
      await e.publish([storedMap(1, A)]);
      await waitFor(() => h.device(A) === 2, 'A');
      await waitFor(() => h.device(A) === 0, 'purged after silence');
      expect(h.pool.stat(reg.key)!.lastPurge).toBe('silence');
      await e.publish([storedMap(2, B)]);
      await waitFor(() => h.device(B) === 2, 'new baseline after silence');
    });

    it('purges on a sequence regression (engine restart) and on AllBlocksCleared', async () => {
      const e = await engine({ replay: false });
      const h = harness();
      const reg = h.register({ endpoint: e.endpoint });
      await subscribed(h, reg.key);
      await e.publish([storedMap(1, A)]);
      await e.publish([storedMap(2, B)]);
      await e.publish([storedArray(3, C)]);
      await waitFor(() => h.device(C) === 3, 'C');
      e.seq = 0; // restarted engine
      await e.publish([storedMap(4, D)]);
      await waitFor(() => h.device(D) === 1, 'D after restart');
      expect(h.device(A) + h.device(B) + h.device(C)).toBe(0);
      expect(h.pool.stat(reg.key)!.lastPurge).toBe('seq_regression');
      await e.publish([{ type: 'AllBlocksCleared' }]);
      await waitFor(() => h.device(D) === 0, 'cleared');
    });

    it('detects a fast engine restart across a reconnect by re-reading the last batch, then bootstraps', async () => {
      const { h, reg, e2 } = await restartedPublisher({}, [storedMap(1, A), storedMap(2, B)], (x) => x.device(B) === 2);

      // The new incarnation published its first batches before the listener reconnected.
      await e2.publish([storedMap(3, C)], { drop: true });
      await e2.publish([storedMap(4, D)], { drop: true });
      await waitFor(() => h.device(C) === 3 && h.device(D) === 1, 'new incarnation bootstrapped');
      expect(h.device(A) + h.device(B)).toBe(0);
      const s = h.pool.stat(reg.key)!;
      expect(s.lastPurge).toBe('publisher_changed');
      expect(s.status).toBe('active');
    });

    it('with bootstrap_replay off, a restarted publisher is purged and followed from live batches only', async () => {
      const { h, reg, e2 } = await restartedPublisher(
        { bootstrapReplay: false },
        [storedMap(1, A)],
        (x) => x.device(A) === 2,
      );
      await e2.publish([storedMap(3, C)], { drop: true });
      await waitFor(
        () => h.pool.stat(reg.key)!.lastPurge === 'publisher_changed' && !h.pool.stat(reg.key)!.replaying,
        'the restart noticed',
      );
      expect(e2.replayRequests).toEqual([0]); // the re-read of our last batch (seq 0), no bootstrap after it
      expect([h.device(A), h.device(C)]).toEqual([0, 0]);
      await subscribed(h, reg.key);
      await e2.publish([storedMap(4, D)]);
      await waitFor(() => h.device(D) === 1, 'a live batch is the new baseline');
    });

    it('a reconnect to the same publisher catches up through replay without purging', async () => {
      const e = await engine({ replay: true });
      const h = harness({ reconnectMs: 50, reconnectMaxMs: 100 });
      const reg = h.register({ endpoint: e.endpoint, replayEndpoint: e.replayEndpoint });
      await subscribed(h, reg.key);
      await e.publish([storedMap(1, A)]);
      await waitFor(() => h.device(A) === 2, 'A');
      // Bounce the PUB socket on the same port; batches published while down are only buffered.
      await e.bouncePub(0, async () => {
        await waitFor(() => h.pool.stat(reg.key)!.status === 'paused', 'paused');
        await e.publish([removedMap([eh(1, 1)])], { drop: true });
        await e.publish([storedMap(2, B)], { drop: true });
      });
      await waitFor(() => h.device(B) === 2 && h.device(A) === 1, 'caught up');
      const s = h.pool.stat(reg.key)!;
      expect(s.purges).toBe(0);
      expect(s.lastSeq).toBe(2);
    });

    it('purges a stream disconnected longer than disconnectPurgeMs, and on remove()', async () => {
      const e = await engine({ replay: false });
      const h = harness({ disconnectPurgeMs: 200 });
      const reg = h.register({ endpoint: e.endpoint });
      await subscribed(h, reg.key);
      await e.publish([storedMap(1, A)]);
      await waitFor(() => h.device(A) === 2, 'A');
      e.pub.close();
      await waitFor(() => h.device(A) === 0, 'purged after disconnect');
      expect(h.pool.stat(reg.key)!.lastPurge).toBe('disconnected');
      expect(h.registry.get(reg.key)!.status).toBe('paused');

      const e2 = await engine({ replay: false });
      const h2 = harness();
      const reg2 = h2.register({ endpoint: e2.endpoint, dpRank: 1 });
      await subscribed(h2, reg2.key);
      await e2.publish([storedMap(2, B)], { drop: false }); // batch rank 0 overrides the registered 1
      await waitFor(() => h2.device(B) === 2, 'B');
      await h2.pool.remove(reg2.key);
      expect(h2.device(B)).toBe(0);
      expect(h2.pool.has(reg2.key)).toBe(false);
    });
  });
}
