// Event fan-in through JetStream: `kvrouter relay` subscribes to the engines once; two routers
// consuming the stream hold identical indexes; a router restarted mid-way resumes from the
// snapshot plus the stream tail; --reset-state starts everyone over.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ClusterHandle, attachCluster } from '../../src/cluster/attach.js';
import { type LocalNats, startLocalNats } from '../../src/cluster/nats-server.js';
import { parseJson } from '../../src/common/json.js';
import { loadConfigText } from '../../src/config/load.js';
import { dumpIndex, type IndexSnapshot } from '../../src/indexer/snapshot.js';
import { type RouterHandle, startRouter } from '../../src/router/app.js';
import { type EngineProc, ROOT, startEngineProc, waitFor } from '../helpers/procs.js';
import { routerYaml } from '../helpers/config.js';

const MODEL = 'Qwen/Qwen3-0.6B';
const dir = mkdtempSync(join(tmpdir(), 'kvrouter-relay-'));
let nats: LocalNats;
let engines: EngineProc[] = [];
type RelayProc = { proc: ChildProcess; url: string; lines: string[] };
let relay: RelayProc | null = null;
const nodes: Record<string, { router: RouterHandle; cluster: ClusterHandle }> = {};

const yaml = (withEvents: boolean) =>
  routerYaml(engines, { events: withEvents ? 'replay' : 'none', routing: 'speculative_ttl_ms: 0' });

async function startRelay(extra: string[] = []): Promise<void> {
  relay = await spawnRelay(extra, 'relay-test');
}

async function spawnRelay(extra: string[], id: string): Promise<RelayProc> {
  const script = `import(${JSON.stringify(`${ROOT}dist/cli/relay.js`)}).then((m) => m.run(process.argv.slice(1))).then((c) => process.exit(c))`;
  const args = [
    '--config',
    join(dir, 'relay.yaml'),
    '--nats',
    nats.url,
    '--port',
    '0',
    '--snapshot-every',
    '20',
    '--snapshot-interval-ms',
    '300',
    '--relay-id',
    id,
    ...extra,
  ];
  const proc = spawn(process.execPath, ['--input-type=module', '-e', script, '--', ...args], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: string[] = [];
  let err = '';
  proc.stderr!.on('data', (d: Buffer) => (err += d.toString()));
  const url = await new Promise<string>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`relay did not start:\n${lines.join('\n')}\n${err}`)), 20_000);
    proc.stdout!.on('data', (d: Buffer) => {
      for (const l of d.toString().split('\n')) {
        if (l) lines.push(l);
        const m = /publishing to .* http (http:\/\/\S+)/.exec(l);
        if (m) {
          clearTimeout(t);
          resolve(m[1]);
        }
      }
    });
    proc.once('exit', (code) => reject(new Error(`relay exited with ${code}\n${err}`)));
  });
  proc.removeAllListeners('exit');
  return { proc, url, lines };
}

async function stopRelay(): Promise<void> {
  const r = relay;
  relay = null;
  if (r) await killRelay(r, 'SIGTERM');
}

async function killRelay(r: RelayProc, signal: NodeJS.Signals): Promise<void> {
  const p = r.proc;
  if (p.exitCode !== null || p.signalCode !== null) return;
  await new Promise<void>((resolve) => {
    p.once('exit', () => resolve());
    p.kill(signal);
  });
}

async function startNode(id: string): Promise<void> {
  const router = await startRouter(loadConfigText(yaml(false), 'test'), { log: () => {} });
  const cluster = attachCluster(
    { scheduler: router.scheduler, writer: router.writer, url: router.url },
    {
      routerId: id,
      nats: { url: nats.url, reconnectWaitMs: 100 },
      events: { source: 'jetstream' },
      recovery: { timeoutMs: 15_000 },
    },
  );
  nodes[id] = { router, cluster };
  await cluster.ready;
}

async function stopNode(id: string): Promise<void> {
  const n = nodes[id];
  delete nodes[id];
  await n?.cluster.close();
  await n?.router.close();
}

/** Event-confirmed blocks per holder, as comparable strings (speculative holders excluded). */
function canon(s: IndexSnapshot): string[] {
  const out: string[] = [];
  for (const ns of s.namespaces) {
    for (const h of ns.holders) {
      if (h.speculative_ttl_ms !== undefined || h.seq_hashes.length === 0) continue;
      out.push(`${ns.model}|${h.backend_id}|${h.dp_rank}|${h.medium}|${h.seq_hashes.map(String).sort().join(',')}`);
    }
  }
  return out.sort();
}

const local = (id: string) => canon(dumpIndex(nodes[id].router.indexer, Date.now()));
async function relayIndex(): Promise<string[]> {
  const r = await request(`${relay!.url}/dump`);
  return canon(parseJson(await r.body.text()) as unknown as IndexSnapshot);
}
interface RelayStatusBody {
  role: 'leader' | 'standby';
  leaderships: number;
  last_seq: number;
  last_snapshot: { stream_seq: number } | null;
  resyncs: number;
}
async function relayStatus(r: RelayProc = relay!): Promise<RelayStatusBody> {
  const res = await request(`${r.url}/relay`);
  return (await res.body.json()) as RelayStatusBody;
}

async function traffic(via: string, n: number, tag: string): Promise<void> {
  for (let i = 0; i < n; i++) {
    const sys = `System prompt ${tag}-${i % 3}: you answer questions about distributed caches. `.repeat(12);
    const r = await request(`${nodes[via].router.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: MODEL,
        max_tokens: 4,
        messages: [
          { role: 'system', content: sys },
          { role: 'user', content: `question ${tag} ${i}` },
        ],
      }),
    });
    expect(r.statusCode).toBe(200);
    await r.body.text();
  }
}

async function converged(ids: string[]): Promise<string[]> {
  return waitFor(
    `indexes of ${ids.join(', ')} equal the relay's`,
    async () => {
      const want = await relayIndex();
      if (want.length === 0) return false;
      return ids.every((id) => JSON.stringify(local(id)) === JSON.stringify(want)) ? want : false;
    },
    15_000,
    100,
  );
}

beforeAll(async () => {
  nats = await startLocalNats({ jetstream: true });
  engines = await Promise.all([0, 1].map(() => startEngineProc(['--speedup', '50'])));
  writeFileSync(join(dir, 'relay.yaml'), yaml(true));
  await startRelay(['--reset-state']);
  await Promise.all(['A', 'B'].map(startNode));
});

const extraRelays: RelayProc[] = [];

afterAll(async () => {
  await Promise.all(Object.keys(nodes).map(stopNode));
  await stopRelay();
  await Promise.all(extraRelays.map((r) => killRelay(r, 'SIGKILL')));
  await Promise.all(engines.map((e) => e.kill()));
  await nats?.stop();
});

describe('relay', () => {
  it('two routers consuming the stream hold the relay index, with no ZMQ listener of their own', async () => {
    expect(nodes.A.router.listeners.size).toBe(0);
    await traffic('A', 12, 'first');
    const idx = await converged(['A', 'B']);
    expect(idx.length).toBeGreaterThanOrEqual(1);
    const st = nodes.B.cluster.status().events!;
    expect(st.state).toBe('live');
    expect(st.applied.events).toBeGreaterThan(0);
  });

  it('a router restarted mid-way resumes from snapshot + stream tail, not from the start', async () => {
    await waitFor(
      'a snapshot after the first traffic',
      async () => ((await relayStatus()).last_snapshot?.stream_seq ?? 0) > 2,
      60_000,
    );
    await stopNode('B');
    await traffic('A', 9, 'while-b-was-down');
    const before = await relayStatus();
    await startNode('B');
    await converged(['A', 'B']);
    const st = nodes.B.cluster.status().events!;
    expect(st.restored).not.toBeNull();
    expect(st.restored!.stream_seq).toBeGreaterThan(2);
    expect(st.started_at_seq).toBe(st.restored!.stream_seq + 1);
    // Only the tail after the snapshot was read.
    expect(st.messages).toBeLessThan(before.last_seq);
    expect(nodes.B.cluster.status().recovery.state).toBe('done');
  });

  it('--reset-state purges stream and snapshot; routers follow the new relay', async () => {
    const old = (await relayStatus()).last_seq;
    await stopRelay();
    await startRelay(['--reset-state']);
    // The new relay re-reads the engines' replay buffers into an index built from scratch.
    await converged(['A', 'B']);
    for (const id of ['A', 'B']) expect(nodes[id].cluster.status().events!.applied.epochs).toBeGreaterThanOrEqual(1);
    expect((await relayStatus()).last_seq).toBeGreaterThan(old);
    await traffic('B', 3, 'after-reset');
    await converged(['A', 'B']);
  });

  it('--ha: one relay leads, a standby takes over when it dies or stops', async () => {
    await stopRelay();
    const ha = async (id: string) => {
      const r = await spawnRelay(['--ha', '--lease-ms', '600'], id);
      extraRelays.push(r);
      return r;
    };
    const a = await ha('ha-a');
    await waitFor('ha-a leads', async () => (await relayStatus(a)).role === 'leader', 60_000);
    const b = await ha('ha-b');
    relay = a;
    await traffic('A', 4, 'ha-first');
    await converged(['A', 'B']);
    expect(await relayStatus(b)).toMatchObject({ role: 'standby', leaderships: 0, last_seq: 0 });
    const leaderGauge = async (r: RelayProc) =>
      /^kvrouter_relay_leader (\d)$/m.exec(await (await request(`${r.url}/metrics`)).body.text())?.[1];
    expect([await leaderGauge(a), await leaderGauge(b)]).toEqual(['1', '0']);
    const resyncs = nodes.A.cluster.status().events!.resyncs;

    await killRelay(a, 'SIGKILL'); // no goodbye: the lease expires
    await waitFor('ha-b takes over', async () => (await relayStatus(b)).role === 'leader', 60_000);
    relay = b;
    await converged(['A', 'B']); // the routers loaded ha-b's snapshot
    expect(nodes.A.cluster.status().events!.resyncs).toBeGreaterThan(resyncs);
    await traffic('B', 4, 'ha-after-failover');
    await converged(['A', 'B']);

    const c = await ha('ha-c');
    expect((await relayStatus(c)).role).toBe('standby');
    await killRelay(b, 'SIGTERM'); // a clean stop deletes the lease
    await waitFor('ha-c takes over', async () => (await relayStatus(c)).role === 'leader', 60_000);
    relay = c;
    await traffic('A', 2, 'ha-after-handover');
    await converged(['A', 'B']);
  });
});
