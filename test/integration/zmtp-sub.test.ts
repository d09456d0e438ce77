// The built-in ZMTP subscriber against real libzmq publishers (zeromq binding) and against scripted
// peers for the failure cases. Loopback and a temp ipc path only; every socket is closed.
import { once } from 'node:events';
import { createServer, type Server, type Socket } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Publisher } from 'zeromq';
import { greeting, ready } from '../../src/events/zmtp/codec.js';
import { openSubscriber } from '../../src/events/sub-transport.js';
import { parseEndpoint, type SubHandlers, ZmtpSubscriber } from '../../src/events/zmtp/subscriber.js';
import { freePort } from '../../src/common/net.js';
import { waitFor } from '../helpers/procs.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Log {
  events: string[];
  messages: Buffer[][];
}

function recorder(): { h: SubHandlers; log: Log } {
  const log: Log = { events: [], messages: [] };
  return {
    log,
    h: {
      connected: () => log.events.push('connected'),
      disconnected: (r) => log.events.push(`disconnected: ${r}`),
      retrying: (r) => log.events.push(`retrying: ${r}`),
      failed: (r) => log.events.push(`failed: ${r}`),
      message: (frames) => log.messages.push(frames.map((f) => Buffer.from(f))),
    },
  };
}

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

function subscriber(endpoint: string, topic: string, opts: ConstructorParameters<typeof ZmtpSubscriber>[3] = {}) {
  const { h, log } = recorder();
  const sub = new ZmtpSubscriber(endpoint, [topic], h, {
    reconnectMs: 20,
    reconnectMaxMs: 200,
    heartbeatMs: 0,
    ...opts,
  });
  sub.start();
  cleanups.push(() => sub.close());
  return { sub, log };
}

async function publisher(endpoint: string, opts: ConstructorParameters<typeof Publisher>[0] = {}): Promise<Publisher> {
  const pub = new Publisher({ linger: 0, ...opts });
  await pub.bind(endpoint);
  cleanups.push(() => pub.close());
  return pub;
}

/** Publish until the subscription has reached the PUB (slow joiner), then clear the log. */
async function joined(pub: Publisher, log: Log, topic = ''): Promise<void> {
  await waitFor('connected', () => log.events.includes('connected'));
  for (let i = 0; i < 200 && log.messages.length === 0; i++) {
    await pub.send([topic, 'probe']);
    await sleep(10);
  }
  expect(log.messages.length).toBeGreaterThan(0);
  await sleep(30);
  log.messages.length = 0;
}

/** A scripted TCP peer: `onConn` decides what it says. */
async function fakePeer(onConn: (s: Socket) => void): Promise<{ server: Server; endpoint: string }> {
  const server = createServer(onConn);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const port = (server.address() as { port: number }).port;
  const sockets = new Set<Socket>();
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  cleanups.push(async () => {
    for (const s of sockets) s.destroy();
    server.close();
  });
  return { server, endpoint: `tcp://127.0.0.1:${port}` };
}

describe('ZMTP subscriber against libzmq', () => {
  it('receives multipart messages in order, topic-filtered, including frames larger than a TCP chunk', async () => {
    const endpoint = `tcp://127.0.0.1:${await freePort()}`;
    const pub = await publisher(endpoint);
    const { log } = subscriber(endpoint, 'kv');
    await joined(pub, log, 'kv');
    const big = Buffer.alloc(1_000_000, 0xab);
    big.writeUInt32BE(0xdeadbeef, 500_000);
    await pub.send(['other', 'x']); // filtered by the PUB
    for (let i = 0; i < 500; i++) await pub.send(['kv@a', Buffer.from([i >> 8, i & 255]), Buffer.alloc(i)]);
    await pub.send(['kv', big]);
    await waitFor('501 messages', () => log.messages.length === 501);
    for (let i = 0; i < 500; i++) {
      const m = log.messages[i];
      expect(m.map((f) => f.length)).toEqual([4, 2, i]);
      expect(m[1].readUInt16BE(0)).toBe(i);
    }
    expect(log.messages[500][1].equals(big)).toBe(true);
    expect(log.events).toEqual(['connected']);
  });

  it('retries until a late publisher binds, and resubscribes after the publisher restarts', async () => {
    const endpoint = `tcp://127.0.0.1:${await freePort()}`;
    const { log } = subscriber(endpoint, '');
    await waitFor('a refused attempt', () => log.events.some((e) => e.startsWith('retrying: ECONNREFUSED')));
    const pub = await publisher(endpoint);
    await joined(pub, log);
    pub.close();
    await waitFor('disconnect', () => log.events.some((e) => e.startsWith('disconnected')));
    const pub2 = await publisher(endpoint);
    await waitFor('reconnected', () => log.events.filter((e) => e === 'connected').length === 2);
    await joined(pub2, log);
    await pub2.send(['t', 'after restart']);
    await waitFor('message after restart', () => log.messages.some((m) => m[1]?.toString() === 'after restart'));
  });

  it('answers libzmq heartbeats, so a publisher with a heartbeat timeout keeps it connected', async () => {
    const endpoint = `tcp://127.0.0.1:${await freePort()}`;
    const pub = await publisher(endpoint, { heartbeatInterval: 50, heartbeatTimeout: 150, heartbeatTimeToLive: 150 });
    const { log } = subscriber(endpoint, '');
    await joined(pub, log);
    await sleep(800); // > 5 heartbeat timeouts with nothing but PINGs on the wire
    await pub.send(['t', 'still here']);
    await waitFor('message after the quiet period', () => log.messages.length === 1);
    expect(log.events).toEqual(['connected']);
  });

  it('keeps pinging while data flows, so a publisher that got a PING while idle does not drop it', async () => {
    // libzmq arms a TTL timer on each PING and only a later frame from the SUB cancels it.
    const endpoint = `tcp://127.0.0.1:${await freePort()}`;
    const pub = await publisher(endpoint);
    const { log } = subscriber(endpoint, '', { heartbeatMs: 100 }); // PING TTL 300 ms
    await joined(pub, log);
    await sleep(350); // idle: PINGs go out
    for (let i = 0; i < 60; i++) {
      await pub.send(['t', String(i)]);
      await sleep(20); // 1.2 s of steady traffic, four TTLs
    }
    await waitFor('60 messages', () => log.messages.length === 60);
    expect(log.events).toEqual(['connected']);
  });

  it('connects over ipc://', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'kvr-zmtp-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const endpoint = `ipc://${join(dir, 'kv.sock')}`;
    const pub = await publisher(endpoint);
    const { log } = subscriber(endpoint, '');
    await joined(pub, log);
    await pub.send(['t', 'over ipc']);
    await waitFor('ipc message', () => log.messages.length === 1);
    expect(log.messages[0][1].toString()).toBe('over ipc');
  });
});

describe('SUB client choice', () => {
  it('auto takes the built-in client for tcp:// and libzmq for an abstract ipc://@ socket, and both receive', async () => {
    for (const [endpoint, expected] of [
      [`tcp://127.0.0.1:${await freePort()}`, 'builtin'],
      [`ipc://@kvr-test-${process.pid}-${Date.now()}`, 'libzmq'],
    ] as const) {
      const pub = await publisher(endpoint);
      const { h, log } = recorder();
      const sub = openSubscriber(
        'auto',
        endpoint,
        '',
        { reconnectMs: 20, reconnectMaxMs: 200, heartbeatMs: 0, receiveHwm: 1000, maxMessageBytes: 1 << 20 },
        h,
      );
      cleanups.push(() => sub.close());
      expect(sub.client).toBe(expected);
      await joined(pub, log);
      await pub.send(['t', 'hello']);
      await waitFor(`a message over ${endpoint}`, () => log.messages.some((m) => m[1]?.toString() === 'hello'));
    }
  });
});

describe('ZMTP subscriber against scripted peers', () => {
  it('drops a peer that completes the handshake and then goes silent (own heartbeat)', async () => {
    const { endpoint } = await fakePeer((s) => {
      s.write(greeting());
      s.write(ready({ 'Socket-Type': 'PUB' }));
      s.on('data', () => {}); // swallows PINGs, never answers
    });
    const { log } = subscriber(endpoint, '', { heartbeatMs: 40 });
    await waitFor('heartbeat timeout', () =>
      log.events.some((e) => e.startsWith('disconnected: no data or heartbeat')),
    );
    expect(log.events[0]).toBe('connected');
  });

  it('delivers nothing after a protocol fault, not even the rest of the chunk', async () => {
    const msg = (body: string) => Buffer.concat([Buffer.from([0, body.length]), Buffer.from(body)]);
    let conns = 0;
    const { endpoint } = await fakePeer((s) => {
      if (conns++ > 0) return void s.destroy(); // only the first connection gets the faulty stream
      s.write(greeting());
      s.write(Buffer.concat([ready({ 'Socket-Type': 'PUB' }), msg('m1'), ready({ 'Socket-Type': 'PUB' }), msg('m2')]));
    });
    const { log } = subscriber(endpoint, '');
    await waitFor('the fault', () => log.events.some((e) => e === 'disconnected: second READY'));
    expect(log.messages.map((m) => m[0].toString())).toEqual(['m1']);
  });

  it('reports why a handshake fails and keeps retrying', async () => {
    const http = await fakePeer((s) => s.end('HTTP/1.1 400 Bad Request\r\n\r\n'.padEnd(80, ' ')));
    const a = subscriber(http.endpoint, '');
    await waitFor(
      'two refused handshakes',
      () => a.log.events.filter((e) => e === 'retrying: peer is not a ZMTP endpoint (bad signature)').length >= 2,
    );

    const rep = await fakePeer((s) => {
      s.write(greeting());
      s.write(ready({ 'Socket-Type': 'REP' }));
    });
    const b = subscriber(rep.endpoint, '');
    await waitFor('socket type refused', () =>
      b.log.events.includes('retrying: peer socket type REP cannot feed a SUB'),
    );

    const huge = await fakePeer((s) => {
      s.write(greeting());
      s.write(ready({ 'Socket-Type': 'PUB' }));
      const h = Buffer.alloc(9);
      h[0] = 2;
      h.writeBigUInt64BE(1n << 40n, 1);
      s.write(h);
    });
    const c = subscriber(huge.endpoint, '', { maxMessageBytes: 1 << 20 });
    await waitFor('oversize refused', () =>
      c.log.events.includes(`disconnected: protocol: message larger than ${1 << 20} bytes`),
    );
    expect(c.log.messages).toEqual([]);
  });

  it('parses endpoints', () => {
    expect(parseEndpoint('tcp://127.0.0.1:5557')).toEqual({ host: '127.0.0.1', port: 5557 });
    expect(parseEndpoint('tcp://[::1]:5557')).toEqual({ host: '::1', port: 5557 });
    expect(parseEndpoint('tcp://engine-0.svc:5557')).toEqual({ host: 'engine-0.svc', port: 5557 });
    expect(parseEndpoint('ipc:///tmp/kv.sock')).toEqual({ path: '/tmp/kv.sock' });
    expect(parseEndpoint('tcp://*:5557')).toEqual({
      error: "tcp://*:5557 is a bind address; connect to the publisher's host",
    });
    expect('error' in parseEndpoint('inproc://x')).toBe(true);
    expect('error' in parseEndpoint('tcp://h:0')).toBe(true);
    expect(parseEndpoint('ipc://@kv-events')).toEqual({
      error: 'ipc://@kv-events is an abstract socket (use zmq_client: libzmq)',
    });
    expect('error' in parseEndpoint('tcp://10.0.0.1;10.0.0.2:5557')).toBe(true); // libzmq source;dest form
  });
});
