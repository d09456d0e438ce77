// Peer recovery: a replica started late fetches GET /dump from the first peer that answers and
// then answers /query exactly like it; the peer routes manage the list.
import { Hono } from 'hono';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { installErrorHandling } from '../../src/api/errors.js';
import { type ClusterHandle, attachCluster } from '../../src/cluster/attach.js';
import { mountPeerRoutes } from '../../src/api/peer-routes.js';
import { PeerList, recoverFromPeers } from '../../src/cluster/peers.js';
import { loadConfigText } from '../../src/config/load.js';
import { TieredIndexer } from '../../src/indexer/namespaces.js';
import { KvIndexWriter } from '../../src/indexer/writer.js';
import { type RouterHandle, startRouter } from '../../src/router/app.js';
import { type Proc, spawnCli, waitFor } from '../helpers/procs.js';
import { routerYaml } from '../helpers/config.js';

const MODEL = 'Qwen/Qwen3-0.6B';
type Engine = Proc & { url: string; zmq: string };
let engines: Engine[] = [];
const LINE = /^engine-sim \S+ (http:\/\/\S+) zmq (tcp:\/\/\S+) replay none/;

async function engine(): Promise<Engine> {
  const p = await spawnCli(
    ['engine-sim', '--port', '0', '--zmq-port', '0', '--replay-port', 'none', '--speedup', '50'],
    LINE,
  );
  const m = LINE.exec(p.lines.find((l) => LINE.test(l))!)!;
  return { ...p, url: m[1], zmq: m[2] };
}
const routers: RouterHandle[] = [];
const clusters: ClusterHandle[] = [];

// No replay endpoint: a listener that joins late cannot read the past from the engines.
const yaml = () => routerYaml(engines, { events: 'live', routing: 'speculative_ttl_ms: 0' });

async function router(): Promise<RouterHandle> {
  const r = await startRouter(loadConfigText(yaml(), 'test'), { log: () => {} });
  routers.push(r);
  await waitFor('listeners active', () => r.registry.all().every((x) => x.status === 'active'), 60_000);
  return r;
}

async function post(base: string, path: string, body: unknown) {
  const r = await request(`${base}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: r.statusCode, text: await r.body.text() };
}

const prompts = [0, 1, 2, 3].map((g) =>
  Array.from({ length: 200 + g * 40 }, (_, k) => 100 + ((k * 31 + g * 977) % 9000)),
);
const query = (base: string, tokens: number[]) =>
  post(base, '/query', { model: MODEL, block_size: 16, token_ids: tokens }).then((r) => r.text);

beforeAll(async () => {
  engines = await Promise.all([0, 1].map(engine));
  const a = await router();
  for (const p of prompts) {
    for (let i = 0; i < 2; i++) {
      const r = await post(a.url, '/v1/completions', { model: MODEL, prompt: [...p, 5000 + i], max_tokens: 2 });
      expect(r.status, r.text).toBe(200);
    }
  }
  await waitFor(
    'A indexed every prompt',
    async () =>
      (await Promise.all(prompts.map((p) => query(a.url, p)))).every(
        (t) => /"gpu":[1-9]/.test(t) || /"longest_matched":[1-9]/.test(t),
      ),
    60_000,
  );
});

afterAll(async () => {
  await Promise.all(clusters.map((c) => c.close()));
  await Promise.all(routers.map((r) => r.close()));
  await Promise.all(engines.map((e) => e.kill()));
});

describe('peer recovery', () => {
  it('a replica started late recovers the index from a peer and answers /query identically', async () => {
    const a = routers[0];
    const b = await router();
    const c = attachCluster(
      { scheduler: b.scheduler, writer: b.writer, url: b.url },
      { peers: ['http://127.0.0.1:9', a.url], recovery: { delayMs: 100, timeoutMs: 5000 } },
    );
    clusters.push(c);
    expect(c.isReady()).toBe(false);
    await c.ready;
    const st = c.status().recovery;
    expect(st.state).toBe('done');
    expect(st.result!.peer).toBe(a.url);
    expect(st.result!.errors.map((e) => e.peer)).toEqual(['http://127.0.0.1:9']);
    expect(st.result!.blocks).toBeGreaterThan(0);
    for (const p of prompts) expect(await query(b.url, p)).toBe(await query(a.url, p));

    // Control: a replica started late without peers knows nothing of the past.
    const lone = await router();
    expect(await query(lone.url, prompts[0])).not.toBe(await query(a.url, prompts[0]));
  });

  it('starts empty and ready when no peer answers', async () => {
    const idx = new TieredIndexer();
    const r = await recoverFromPeers(['http://127.0.0.1:9'], new KvIndexWriter(idx), Date.now, { timeoutMs: 1000 });
    expect(r.peer).toBeNull();
    expect(r.errors).toHaveLength(1);
    expect(idx.stats().blocks).toBe(0);
  });

  it('serves /register_peer, /deregister_peer and /peers', async () => {
    const app = new Hono();
    const peers = new PeerList(['http://a:8090/']);
    mountPeerRoutes(app, { peers });
    installErrorHandling(app);
    const call = async (method: string, path: string, body?: unknown) => {
      const r = await app.request(path, {
        method,
        headers: { 'content-type': 'application/json' },
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      });
      return { status: r.status, body: (await r.json()) as { status?: string } & Record<string, unknown> };
    };
    expect(await call('GET', '/peers')).toEqual({ status: 200, body: ['http://a:8090'] });
    expect((await call('POST', '/register_peer', { url: 'http://b:8091' })).body.status).toBe('registered');
    expect((await call('POST', '/register_peer', { url: 'http://b:8091/' })).body.status).toBe('already_registered');
    expect((await call('GET', '/peers')).body).toEqual(['http://a:8090', 'http://b:8091']);
    expect((await call('POST', '/register_peer', { url: 'ftp://x' })).status).toBe(400);
    expect((await call('POST', '/register_peer', {})).status).toBe(400);
    expect((await call('POST', '/deregister_peer', { url: 'http://a:8090' })).body).toEqual({
      status: 'deregistered',
      peers: ['http://b:8091'],
    });
    expect((await call('POST', '/deregister_peer', { url: 'http://a:8090' })).body.status).toBe('not_registered');
    expect((await call('GET', '/register_peer')).status).toBe(405);
  });
});
