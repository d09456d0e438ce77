// NATS killed and restarted: routing continues on local state, status and metrics say so, replica
// sync resumes (stale remote bookings reset through the sequence gap), and relayed events resync.
import { Registry as PromRegistry } from 'prom-client';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ClusterHandle, attachCluster } from '../../src/cluster/attach.js';
import { EventRelay } from '../../src/cluster/event-relay.js';
import { type LocalNats, startLocalNats } from '../../src/cluster/nats-server.js';
import { NatsLink } from '../../src/cluster/nats-link.js';
import { desiredRegistrations } from '../../src/router/registrations.js';
import { RelayTap } from '../../src/cluster/relay-taps.js';
import { KvIndexWriter } from '../../src/indexer/writer.js';
import { loadConfigText } from '../../src/config/load.js';
import { ListenerPool } from '../../src/events/listener-pool.js';
import { Registry } from '../../src/events/registry.js';
import { dumpIndex, type IndexSnapshot } from '../../src/indexer/snapshot.js';
import { TieredIndexer } from '../../src/indexer/namespaces.js';
import { type RouterHandle, startRouter } from '../../src/router/app.js';
import { type EngineProc, startEngineProc, waitFor } from '../helpers/procs.js';
import { routerYaml } from '../helpers/config.js';

const MODEL = 'Qwen/Qwen3-0.6B';
let nats: LocalNats;
let engines: EngineProc[] = [];
const routers: RouterHandle[] = [];
const clusters: ClusterHandle[] = [];
const proms: PromRegistry[] = [];
let relay: { relay: EventRelay; link: NatsLink; listeners: ListenerPool; indexer: TieredIndexer };

const yaml = (withEvents: boolean) =>
  routerYaml(engines, {
    events: withEvents ? 'replay' : 'none',
    routing: 'speculative_ttl_ms: 0, stale_booking_ms: 60000',
  });

async function post(base: string, path: string, body?: unknown) {
  const r = await request(`${base}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await r.body.text();
  return { status: r.statusCode, body: text ? JSON.parse(text) : null };
}

/** The relay as `kvrouter relay` composes it, in process. */
async function startRelay(): Promise<void> {
  const cfg = loadConfigText(yaml(true), 'relay');
  const indexer = new TieredIndexer({ defaultSeed: 1337n });
  const tap = new RelayTap(new KvIndexWriter(indexer));
  const link = new NatsLink({ url: nats.url, name: 'relay', reconnectWaitMs: 100 });
  const r = await EventRelay.start(link, tap, {
    relayId: 'relay-t',
    subject: 'kvrouter.events',
    stream: 'KVROUTER_EVENTS',
    bucket: 'kvrouter-snapshots',
    snapshotEvery: 50,
    snapshotIntervalMs: 300,
    streamMaxAgeMs: 3_600_000,
    resetState: true,
    publishTimeoutMs: 1000,
    maxBatchBytes: 256 * 1024,
  });
  const registry = new Registry();
  const listeners = new ListenerPool({ registry, writer: tap });
  for (const spec of desiredRegistrations(cfg)) listeners.add(registry.register(spec, Date.now()).registration);
  relay = { relay: r, link, listeners, indexer };
}

function canon(idx: TieredIndexer): string {
  const s: IndexSnapshot = dumpIndex(idx, Date.now());
  return s.namespaces
    .flatMap((ns) =>
      ns.holders
        .filter((h) => h.speculative_ttl_ms === undefined && h.seq_hashes.length > 0)
        .map((h) => `${h.backend_id}|${h.medium}|${h.seq_hashes.map(String).sort().join(',')}`),
    )
    .sort()
    .join('\n');
}

const prompt = (tag: number, n = 320) => Array.from({ length: n }, (_, k) => 10 + ((k * 13 + tag * 101) % 7000));
const load = (i: number, inst: string) => routers[i].scheduler.active.load(inst, 0);
const completion = (i: number, tag: number) =>
  post(routers[i].url, '/v1/completions', { model: MODEL, prompt: prompt(tag), max_tokens: 2 });

beforeAll(async () => {
  nats = await startLocalNats({ jetstream: true });
  engines = await Promise.all([0, 1].map(() => startEngineProc(['--speedup', '50'])));
  await startRelay();
  for (let i = 0; i < 2; i++) {
    const r = await startRouter(loadConfigText(yaml(false), 'test'), { log: () => {} });
    const prom = new PromRegistry();
    const c = attachCluster(
      { scheduler: r.scheduler, writer: r.writer, url: r.url, metrics: prom },
      {
        routerId: `n${i}`,
        nats: { url: nats.url, reconnectWaitMs: 100 },
        sync: { heartbeatMs: 200, peerTimeoutMs: 20_000 },
        events: { source: 'jetstream' },
        recovery: { timeoutMs: 10_000 },
      },
    );
    routers.push(r);
    clusters.push(c);
    proms.push(prom);
    await c.ready;
  }
  await waitFor('replicas meshed', () => clusters.every((c) => c.status().sync?.peers.length === 1), 60_000);
});

afterAll(async () => {
  await Promise.all(clusters.map((c) => c.close()));
  await Promise.all(routers.map((r) => r.close()));
  if (relay) {
    await relay.relay.close();
    await relay.listeners.close();
    await relay.link.close();
  }
  await Promise.all(engines.map((e) => e.kill()));
  await nats?.stop();
});

describe('NATS killed and restarted', () => {
  it('keeps routing on local state, reports the outage, then resumes sync and resets stale remote bookings', async () => {
    for (let t = 0; t < 4; t++) expect((await completion(0, t)).status).toBe(200);
    await waitFor(
      'relayed events reached both routers',
      () =>
        canon(routers[0].indexer) !== '' &&
        canon(routers[0].indexer) === canon(relay.indexer) &&
        canon(routers[1].indexer) === canon(relay.indexer),
      60_000,
    );

    // A booking B knows about, freed on A while NATS is down: B must not keep it forever.
    await post(routers[0].url, '/v1/route', {
      model: MODEL,
      token_ids: prompt(50),
      request_id: 'before-outage',
      router_config_override: { policy: 'direct', target: 'e0' },
    });
    await waitFor('B sees it', () => load(1, 'e0').activeRequests === 1, 60_000);

    await nats.kill();
    await waitFor('both report the outage', () => clusters.every((c) => !c.status().sync!.nats.connected), 60_000);
    const s = clusters[0].status().sync!;
    expect(s.nats.lastError).toMatch(/disconnect/i);
    expect(await proms[0].getSingleMetricAsString('kvrouter_cluster_connected')).toMatch(/link="sync"\} 0/);

    // Routing goes on: decisions, bookings and proxied requests, all on local state.
    expect((await post(routers[0].url, '/v1/route/before-outage/free')).status).toBe(200);
    for (let t = 4; t < 7; t++) expect((await completion(1, t)).status).toBe(200);
    const during = await post(routers[0].url, '/v1/route', {
      model: MODEL,
      token_ids: prompt(60),
      request_id: 'during-outage',
    });
    expect(during.status).toBe(200);
    await post(routers[0].url, '/v1/route/during-outage/free');
    expect(clusters[0].status().sync!.dropped).toBeGreaterThan(0);
    expect(load(1, 'e0').activeRequests).toBe(1); // B cannot know yet

    await nats.restart();
    await waitFor('both reconnected', () => clusters.every((c) => c.status().sync!.nats.connected), 60_000);
    // A's next message (a heartbeat) shows B the sequence gap: B frees everything it held for A.
    await waitFor('stale remote booking reset through the gap', () => load(1, 'e0').activeRequests === 0, 60_000);
    expect(await proms[1].getSingleMetricAsString('kvrouter_cluster_peer_resets_total')).toMatch(
      /reason="gap"\} [1-9]/,
    );

    // Sync resumes for new bookings.
    await post(routers[0].url, '/v1/route', {
      model: MODEL,
      token_ids: prompt(70),
      request_id: 'after-outage',
      router_config_override: { policy: 'direct', target: 'e1' },
    });
    await waitFor('B sees the new booking', () => load(1, 'e1').activeRequests === 1, 60_000);
    await post(routers[0].url, '/v1/route/after-outage/free');
    await waitFor('and its free', () => routers.every((r) => r.scheduler.active.size === 0), 60_000);
  });

  it('relayed events lost during the outage are recovered through a resync snapshot', async () => {
    // Events produced while NATS was down (the completions above) never reached the stream; the
    // relay noticed the failed publishes and, once reconnected, published a resync epoch.
    for (let t = 7; t < 10; t++) expect((await completion(0, t)).status).toBe(200);
    await waitFor(
      'routers converge on the relay index',
      () => canon(routers[0].indexer) === canon(relay.indexer) && canon(routers[1].indexer) === canon(relay.indexer),
      60_000,
    ).catch((err) => {
      const lines = (i: number) => canon(routers[i].indexer).split('\n').length;
      throw new Error(
        `${(err as Error).message}: relay ${canon(relay.indexer).split('\n').length} holders, routers ${lines(0)} / ${lines(1)}; relay ${JSON.stringify(relay.relay.status())}; consumers ${JSON.stringify(clusters.map((c) => c.status().events))}`,
      );
    });
    expect(relay.relay.status().failed_batches).toBeGreaterThan(0);
    expect(relay.relay.status().resyncs).toBeGreaterThan(0);
    for (const c of clusters) expect(c.status().events!.resyncs).toBeGreaterThan(0);
  });
});
