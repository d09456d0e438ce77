// Replica sync over a real nats-server: bookings on one replica raise the others' load view and
// leave it on completion; a silent replica's bookings are freed; NATS restarts do not stop routing.
import { request } from 'undici';
import { Registry as PromRegistry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ClusterHandle, attachCluster } from '../../src/cluster/attach.js';
import { type LocalNats, startLocalNats } from '../../src/cluster/nats-server.js';
import { loadConfigText } from '../../src/config/load.js';
import { type RouterHandle, startRouter } from '../../src/router/app.js';
import { type EngineProc, startEngineProc, waitFor } from '../helpers/procs.js';
import { routerYaml } from '../helpers/config.js';

const MODEL = 'Qwen/Qwen3-0.6B';
let nats: LocalNats;
let engines: EngineProc[] = [];
const routers: RouterHandle[] = [];
const clusters: ClusterHandle[] = [];
const proms: PromRegistry[] = [];

const yaml = (es: EngineProc[]) =>
  routerYaml(es, { events: 'none', routing: 'speculative_ttl_ms: 5000, stale_booking_ms: 60000' });

async function call(base: string, path: string, body?: unknown) {
  const r = await request(`${base}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await r.body.text();
  return { status: r.statusCode, body: text ? JSON.parse(text) : null };
}

async function replica(i: number, opts: { peerTimeoutMs?: number } = {}): Promise<void> {
  const r = await startRouter(loadConfigText(yaml(engines), 'test'), { log: () => {} });
  const prom = new PromRegistry();
  const c = attachCluster(
    { scheduler: r.scheduler, writer: r.writer, url: r.url, metrics: prom },
    {
      routerId: `replica-${i}`,
      nats: { url: nats.url, reconnectWaitMs: 100 },
      sync: { heartbeatMs: 200, peerTimeoutMs: opts.peerTimeoutMs ?? 1500 },
    },
  );
  routers[i] = r;
  clusters[i] = c;
  proms[i] = prom;
  await c.ready;
}

const prompt = (topic: string) => Array.from({ length: 640 }, (_, k) => (k * 7 + topic.length * 13) % 5000);
const load = (i: number, inst: string) => routers[i].scheduler.active.load(inst, 0);
const connected = () => clusters.every((c) => c.status().sync?.nats.connected);
const meshed = () => clusters.every((c) => (c.status().sync?.peers.length ?? 0) === clusters.length - 1);

beforeAll(async () => {
  nats = await startLocalNats();
  engines = await Promise.all([0, 1].map(() => startEngineProc(['--speedup', '50'])));
  await Promise.all([0, 1, 2].map((i) => replica(i)));
  await waitFor('replicas connected and heard from each other', () => connected() && meshed(), 60_000);
});

afterAll(async () => {
  await Promise.all(clusters.map((c) => c?.close()));
  await Promise.all(routers.map((r) => r?.close()));
  await Promise.all(engines.map((e) => e.kill()));
  await nats?.stop();
});

describe('replica sync', () => {
  it('a booking on replica A raises B and C load views, and is freed everywhere on completion', async () => {
    const r = await call(routers[0].url, '/v1/route', {
      model: MODEL,
      token_ids: prompt('a'),
      request_id: 'sync-1',
      router_config_override: { policy: 'direct', target: 'e0' },
    });
    expect(r.status).toBe(200);
    const local = load(0, 'e0');
    expect(local).toEqual({
      activePrefillTokens: 640,
      activeAttention: 640 * 320,
      activeBlocks: 40,
      activeRequests: 1,
      decodingRequests: 0,
      decodingContext: 0,
    });
    await waitFor(
      'B and C see the booking',
      () => load(1, 'e0').activeRequests === 1 && load(2, 'e0').activeRequests === 1,
      60_000,
    );
    expect(load(1, 'e0')).toEqual(local);
    // The speculative insert travels too: B finds the prompt's blocks on e0 before any KV event.
    const overlap = routers[1].indexer.queryTokens(
      { model: MODEL, blockSize: 16, loraName: null, salt: null, tenant: 'default' },
      prompt('a'),
      Date.now(),
    );
    expect(overlap.candidates.find((c) => c.instance === 'e0')?.device).toBe(40);

    // B now routes a different prompt away from e0 (least cost: e0 carries A's load).
    const d = await call(routers[1].url, '/v1/route', { model: MODEL, token_ids: prompt('different prompt') });
    expect(d.body.instance_id).toBe('e1');

    await call(routers[0].url, '/v1/route/sync-1/prefill_complete');
    await waitFor(
      'prefill completed remotely',
      () => load(1, 'e0').activePrefillTokens === 0 && load(2, 'e0').activePrefillTokens === 0,
      60_000,
    );
    expect(load(1, 'e0').activeBlocks).toBe(40);
    await call(routers[0].url, '/v1/route/sync-1/free');
    await waitFor('freed everywhere', () => routers.every((x) => x.scheduler.active.size === 0), 60_000);
    for (let i = 0; i < 3; i++)
      expect(routers[i].scheduler.active.totals()).toEqual({
        activePrefillTokens: 0,
        activeAttention: 0,
        activeBlocks: 0,
        activeRequests: 0,
        decodingRequests: 0,
        decodingContext: 0,
      });
  });

  it('proxied completions are booked on every replica while in flight and freed after', async () => {
    const body = {
      model: MODEL,
      max_tokens: 40,
      stream: true,
      messages: [{ role: 'user', content: 'Tell me a long story about replicas. '.repeat(20) }],
    };
    const res = await request(`${routers[1].url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    const seen = { 0: false, 2: false };
    for await (const _chunk of res.body) {
      if (routers[0].scheduler.active.size > 0) seen[0] = true;
      if (routers[2].scheduler.active.size > 0) seen[2] = true;
    }
    expect(seen).toEqual({ 0: true, 2: true });
    await waitFor('freed everywhere', () => routers.every((x) => x.scheduler.active.size === 0), 60_000);
    const m = await proms[1].getSingleMetricAsString('kvrouter_cluster_messages_published_total');
    expect(m).toMatch(/kind="add"\} [1-9]/);
    expect(m).toMatch(/kind="free"\} [1-9]/);
  });

  it('ignores its own messages and counts received ones', async () => {
    const s = clusters[0].status().sync!;
    expect(s.remote_bookings).toBe(0);
    expect(s.peers.map((p) => p.router).sort()).toEqual(['replica-1', 'replica-2']);
    // A peer first heard from by another message (a resend) has its URL from its next heartbeat.
    await waitFor(
      'every peer heard in a heartbeat',
      () => clusters[0].status().sync!.peers.every((p) => p.url !== null),
      60_000,
    );
    expect(clusters[0].status().sync!.peers.every((p) => p.url?.startsWith('http://127.0.0.1:'))).toBe(true);
    const m = await proms[0].metrics();
    expect(m).toMatch(/kvrouter_cluster_connected\{link="sync"\} 1/);
    expect(m).toMatch(/kvrouter_cluster_messages_received_total\{kind="add"\} [1-9]/);
  });

  it('frees the bookings of a replica that goes silent', async () => {
    await call(routers[2].url, '/v1/route', {
      model: MODEL,
      token_ids: prompt('silent'),
      request_id: 'silent-1',
      router_config_override: { policy: 'direct', target: 'e1' },
    });
    await waitFor('A sees C booking', () => load(0, 'e1').activeRequests === 1, 60_000);
    // C disappears without freeing (crash): its NATS link closes, heartbeats stop.
    await clusters[2].close();
    await waitFor(
      'A frees C bookings after the peer timeout',
      () => load(0, 'e1').activeRequests === 0 && load(1, 'e1').activeRequests === 0,
      60_000,
    );
    expect(clusters[0].status().sync!.peers.map((p) => p.router)).toEqual(['replica-1']);
    expect(await proms[0].getSingleMetricAsString('kvrouter_cluster_peer_resets_total')).toMatch(
      /reason="expired"\} 1/,
    );
    routers[2].scheduler.free('route:silent-1');
  });

  it('a replica that joins late learns the in-flight bookings of the others (they re-announce them)', async () => {
    const r = await call(routers[0].url, '/v1/route', {
      model: MODEL,
      token_ids: prompt('before join'),
      request_id: 'early-1',
      router_config_override: { policy: 'direct', target: 'e0' },
    });
    expect(r.status).toBe(200);
    await call(routers[0].url, '/v1/route/early-1/prefill_complete');
    await waitFor(
      'B sees it',
      () => load(1, 'e0').activeRequests === 1 && load(1, 'e0').activePrefillTokens === 0,
      60_000,
    );
    await replica(3); // joins now: it never saw the add
    await waitFor(
      'the late replica sees the earlier booking, prefill done',
      () => load(3, 'e0').activeRequests === 1 && load(3, 'e0').activePrefillTokens === 0,
      60_000,
    );
    expect(load(3, 'e0')).toEqual(load(0, 'e0'));
    expect(await proms[3].getSingleMetricAsString('kvrouter_cluster_messages_published_total')).toMatch(
      /kind="resend"\} [1-9]/,
    );
    expect(load(1, 'e0').activeRequests).toBe(1); // B got the re-announce too and did not count it twice
    await call(routers[0].url, '/v1/route/early-1/free');
    await waitFor('freed everywhere', () => [0, 1, 3].every((i) => routers[i].scheduler.active.size === 0), 60_000);
  });
});
