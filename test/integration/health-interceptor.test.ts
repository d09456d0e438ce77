// The upstream pool's health interceptor against a real HTTP server on loopback: 5xx, refused
// connections, timeouts and broken streams are failures; answers below 500 are successes; a request
// we abort ourselves counts as nothing. One bookkeeping path for proxied requests and probes.
import { createServer, type Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InstanceHealth } from '../../src/proxy/health.js';
import type { HealthEvent } from '../../src/proxy/health-interceptor.js';
import { createUpstream } from '../../src/proxy/upstreams.js';
import { freePort } from '../../src/common/net.js';

let server: Server;
let url: string;

beforeAll(async () => {
  server = createServer((req, res) => {
    if (req.url === '/500') return res.writeHead(500).end('no');
    if (req.url === '/slow') return void setTimeout(() => res.end('late'), 2_000);
    if (req.url === '/break') {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('data: 1\n\n');
      return void setTimeout(() => res.socket?.destroy(), 20);
    }
    res.end('ok');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
});
afterAll(() => new Promise<void>((r) => server.close(() => r())));

function upstream(target = url) {
  const health = new InstanceHealth({ failureThreshold: 2, ejectionBaseMs: 60_000, ejectionMaxMs: 60_000 });
  const events: HealthEvent[] = [];
  const u = createUpstream(
    'e0',
    target,
    { connectTimeoutMs: 1_000, headersTimeoutMs: 300, bodyTimeoutMs: 300, connections: 4 },
    { health, now: Date.now, onChange: (e) => events.push(e) },
  );
  const get = (path: string, signal?: AbortSignal) =>
    u.pool.request({ path, method: 'GET', ...(signal ? { signal } : {}) }).then(
      (r) =>
        r.body.text().then(
          () => r.statusCode,
          () => -1,
        ),
      () => -1,
    );
  return { health, events, get, close: () => u.pool.close() };
}

describe('health interceptor', () => {
  it('ejects after repeated 5xx and readmits on the first success after the ejection', async () => {
    const u = upstream();
    expect(await u.get('/500')).toBe(500);
    expect(u.health.available(Date.now())).toBe(true);
    expect(await u.get('/500')).toBe(500);
    expect(u.events).toEqual(['ejected']);
    expect(u.health.available(Date.now())).toBe(false);
    // A probe after the ejection period (simulated by the clock) readmits.
    expect(u.health.available(Date.now() + 61_000)).toBe(true);
    expect(await u.get('/ok')).toBe(200);
    expect(u.events).toEqual(['ejected', 'readmitted']);
    await u.close();
  });

  it('counts timeouts and streams that break mid-way, not requests we abort', async () => {
    const u = upstream();
    const ac = new AbortController();
    const aborted = u.get('/slow', ac.signal);
    setTimeout(() => ac.abort(), 20);
    expect(await aborted).toBe(-1);
    expect(u.health.snapshot(Date.now()).consecutive_failures).toBe(0);
    expect(await u.get('/slow')).toBe(-1); // headers timeout (300 ms)
    expect(u.health.snapshot(Date.now()).consecutive_failures).toBe(1);
    // 200 (a success: the count starts over), then the socket dies mid-stream: a failure again.
    expect(await u.get('/break')).toBe(-1);
    expect(u.health.snapshot(Date.now())).toMatchObject({
      consecutive_failures: 1,
      last_error: expect.stringMatching(/^failed mid-response/),
    });
    expect(await u.get('/500')).toBe(500);
    expect(u.events).toEqual(['ejected']);
    await u.close();
  });

  it('counts a refused connection', async () => {
    const u = upstream(`http://127.0.0.1:${await freePort()}`);
    expect(await u.get('/x')).toBe(-1);
    expect(u.health.snapshot(Date.now()).last_error).toMatch(/ECONNREFUSED/);
    await u.close();
  });
});
