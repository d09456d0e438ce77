// `kvrouter indexer` (the compiled CLI) as Dynamo's standalone indexer: a replica started with
// --peers recovers a running peer's index before it is ready and answers /query identically; the
// peer routes, /ready, Dynamo's /unregister scopes and /workers shape.
import { createServer, type Socket } from 'node:net';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseJson, stringifyJson } from '../../src/common/json.js';
import { hashSpace, seqHashes } from '../../src/hashing/index.js';
import { type Proc, spawnCli, waitFor } from '../helpers/procs.js';

const LISTENING = /kvrouter indexer listening on (http:\/\/\S+)/;
const BS = 4;
const procs: Proc[] = [];
afterAll(async () => {
  await Promise.all(procs.map((p) => p.kill()));
});

async function indexer(args: string[]): Promise<string> {
  const p = await spawnCli(['indexer', '--port', '0', ...args], LISTENING);
  procs.push(p);
  return LISTENING.exec(p.lines.find((l) => LISTENING.test(l))!)![1];
}

async function call(
  base: string,
  method: string,
  path: string,
  body?: unknown,
): Promise<{ status: number; body: any }> {
  const r = await request(`${base}${path}`, {
    method: method as 'GET',
    ...(body !== undefined ? { body: stringifyJson(body), headers: { 'content-type': 'application/json' } } : {}),
  });
  return { status: r.statusCode, body: parseJson(await r.body.text()) };
}

const tokens = (seed: number) => Array.from({ length: 12 }, (_, i) => seed * 100 + i + 1);
const hashes = (seed: number) => [...seqHashes(tokens(seed), BS, hashSpace({ seed: 1337n }))];
const stored = (backend: string, seed: number, medium = 'GPU', tenant = 'default') => ({
  event_type: 'stored',
  model_name: 'm',
  block_size: BS,
  tenant_id: tenant,
  backend_id: backend,
  medium,
  dp_rank: 0,
  seq_hashes: hashes(seed),
});

let a: string;

beforeAll(async () => {
  a = await indexer([]);
  // A's index: two instances, two media, two tenants (what a peer must carry over exactly).
  const ev = await call(a, 'POST', '/events', [
    stored('i0', 1),
    stored('i1', 1, 'CPU'),
    stored('i1', 2),
    stored('i0', 3, 'GPU', 'acme'),
  ]);
  expect(ev.body.applied).toBe(4);
});

describe('kvrouter indexer --peers', () => {
  it('recovers from the first peer that answers, is ready only after, and answers /query like the peer', async () => {
    // The first peer accepts and never answers: B is recovering for as long as we hold it.
    const held: Socket[] = [];
    const silent = createServer((s) => held.push(s));
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
    const silentUrl = `http://127.0.0.1:${(silent.address() as { port: number }).port}`;
    const b = await indexer(['--peers', `${silentUrl},${a}`, '--recovery-delay-ms', '0']);
    await waitFor('B asks the silent peer', () => held.length > 0);
    expect((await call(b, 'GET', '/ready')).status).toBe(503);
    for (const s of held) s.destroy();
    silent.close();
    await waitFor('B ready', async () => (await call(b, 'GET', '/ready')).status === 200);
    for (const q of [
      { model: 'm', block_size: BS, token_ids: tokens(1) },
      { model: 'm', block_size: BS, token_ids: tokens(2) },
      { model: 'm', block_size: BS, token_ids: tokens(3), tenant_id: 'acme' },
    ]) {
      const fromA = await call(a, 'POST', '/query', q);
      const fromB = await call(b, 'POST', '/query', q);
      expect(fromB).toEqual(fromA);
      expect(fromA.status).toBe(200);
    }
    // And the values are the real ones, not two empty answers.
    expect(
      (await call(b, 'POST', '/query', { model: 'm', block_size: BS, token_ids: tokens(1) })).body.default.i1,
    ).toMatchObject({ GPU: 0, CPU: 12 });
    expect(
      (await call(b, 'POST', '/query', { model: 'm', block_size: BS, token_ids: tokens(1) })).body.default.i0,
    ).toMatchObject({ GPU: 12 });
    expect((await call(b, 'GET', '/peers')).body).toEqual([silentUrl, a]);
  });

  it('starts empty and ready when no peer answers', async () => {
    const c = await indexer([
      '--peers',
      'http://127.0.0.1:9',
      '--recovery-delay-ms',
      '0',
      '--recovery-timeout-ms',
      '2000',
    ]);
    await waitFor('C ready', async () => (await call(c, 'GET', '/ready')).status === 200);
    const q = await call(c, 'POST', '/query', { model: 'm', block_size: BS, token_ids: tokens(1) });
    expect(q.body).toEqual({ default: {} });
  });

  it('serves the peer routes and /ready waits for --min-initial-workers', async () => {
    const d = await indexer(['--min-initial-workers', '1']);
    expect((await call(d, 'GET', '/ready')).status).toBe(503);
    expect((await call(d, 'POST', '/register_peer', { url: a })).body).toEqual({ status: 'registered', peers: [a] });
    expect((await call(d, 'GET', '/peers')).body).toEqual([a]);
    expect((await call(d, 'POST', '/deregister_peer', { url: a })).body).toEqual({ status: 'deregistered', peers: [] });
    expect((await call(d, 'GET', '/register_peer')).status).toBe(405);
    // One registration opens the gate.
    const reg = { instance_id: 7, endpoint: 'tcp://127.0.0.1:1', model_name: 'm', block_size: BS, type: 'vLLM' };
    expect((await call(d, 'POST', '/register', reg)).status).toBe(200);
    expect((await call(d, 'GET', '/ready')).status).toBe(200);
  });

  it("unregisters with Dynamo's scopes and lists workers in its shape", async () => {
    const e = await indexer([]);
    const reg = (instance: number, tenant: string, rank: number) => ({
      instance_id: instance,
      endpoint: `tcp://127.0.0.1:${10 + rank}`,
      model_name: 'm',
      block_size: BS,
      type: 'vLLM',
      tenant_id: tenant,
      dp_rank: rank,
    });
    for (const r of [reg(1, 'default', 0), reg(1, 'default', 1), reg(1, 'acme', 0), reg(2, 'default', 0)])
      expect((await call(e, 'POST', '/register', r)).status).toBe(200);
    const workers = (await call(e, 'GET', '/workers?format=dynamo')).body as Array<{
      instance_id: number;
      endpoints: Record<string, string>;
      source: string;
    }>;
    expect(workers.map((w) => [w.instance_id, w.source, w.endpoints])).toEqual([
      [1, 'zmq', { '0': 'tcp://127.0.0.1:10', '1': 'tcp://127.0.0.1:11' }],
      [2, 'zmq', { '0': 'tcp://127.0.0.1:10' }],
    ]);
    // One rank of one tenant, then every tenant and rank of an instance.
    expect(
      (await call(e, 'POST', '/unregister', { instance_id: 1, model_name: 'm', tenant_id: 'default', dp_rank: 1 })).body
        .removed_instances,
    ).toEqual(['1|default|1']);
    expect(
      (await call(e, 'POST', '/unregister', { instance_id: 1, model_name: 'm' })).body.removed_instances.sort(),
    ).toEqual(['1|acme|0', '1|default|0']);
    expect((await call(e, 'POST', '/unregister', { instance_id: 1 })).status).toBe(404);
    expect(
      (await call(e, 'GET', '/workers?format=dynamo')).body.map((w: { instance_id: number }) => w.instance_id),
    ).toEqual([2]);
  });
});
