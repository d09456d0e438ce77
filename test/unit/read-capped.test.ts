// The one body reader (src/api/body.ts): a Node stream is read through its events, any other
// source through its async iterator, with the same cap and the same answers.
import { once } from 'node:events';
import { createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { PassThrough, Readable } from 'node:stream';
import { Pool } from 'undici';
import { describe, expect, it } from 'vitest';
import { readCapped, readRequestBody } from '../../src/api/body.js';
import { OpenAIError } from '../../src/api/openai.js';

const bytes = (n: number, seed: number) => Buffer.from(Array.from({ length: n }, (_, i) => (i * 31 + seed) & 0xff));

async function* iterate(chunks: Buffer[]): AsyncIterable<Uint8Array> {
  for (const c of chunks) yield c;
}

describe('readCapped', () => {
  it('gives a stream the same bytes and the same cap as an async iterable', async () => {
    const shapes = [[], [7], [1, 1, 1], [100, 0, 50], [4096, 4096, 1]];
    for (const sizes of shapes) {
      const chunks = sizes.map((n, k) => bytes(n, k));
      const all = Buffer.concat(chunks);
      for (const limit of [0, all.length - 1, all.length, all.length + 1]) {
        if (limit < 0) continue;
        const viaIterator = await readCapped(iterate(chunks), limit);
        const viaStream = await readCapped(Readable.from(chunks, { objectMode: false }), limit);
        const expected = all.length > limit ? null : all;
        expect(viaIterator === null ? null : Buffer.from(viaIterator), `${sizes} limit ${limit}`).toEqual(expected);
        expect(viaStream === null ? null : Buffer.from(viaStream), `${sizes} limit ${limit}`).toEqual(expected);
      }
    }
  });

  it('destroys a stream over the limit and stops listening to it', async () => {
    const s = new PassThrough();
    const read = readCapped(s, 10);
    s.write(bytes(6, 1));
    s.write(bytes(6, 2));
    expect(await read).toBeNull();
    expect(s.destroyed).toBe(true);
    // Only a no-op error listener stays (for an error the destroy may still bring).
    expect(s.listenerCount('data') + s.listenerCount('end') + s.listenerCount('close')).toBe(0);
    expect(s.listenerCount('error')).toBe(1);
  });

  it('survives a stream that errors when destroyed over the limit (as an undici body does)', async () => {
    // Without a listener left, this error would be an uncaught exception (the test run fails on it).
    const s = new Readable({ read() {}, destroy: (_err, cb) => cb(new Error('Request aborted')) });
    const read = readCapped(s, 10);
    s.push(bytes(20, 3));
    expect(await read).toBeNull();
    await new Promise((r) => setImmediate(r));
    expect(s.closed).toBe(true);
  });

  it('reads an undici response body, and stops one over the limit', async () => {
    const server = createServer((req, res) => res.end(req.url === '/big' ? 'x'.repeat(100_000) : 'small'));
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const { port } = server.address() as AddressInfo;
    const pool = new Pool(`http://127.0.0.1:${port}`);
    try {
      const small = await pool.request({ path: '/', method: 'GET' });
      expect((await readCapped(small.body, 100))?.toString()).toBe('small');
      const big = await pool.request({ path: '/big', method: 'GET' });
      expect(await readCapped(big.body, 1000)).toBeNull();
      await new Promise((r) => setImmediate(r));
      expect(big.body.destroyed).toBe(true);
    } finally {
      await pool.close();
      server.closeAllConnections();
      server.close();
    }
  });

  it('refuses a declared length over the limit without reading', async () => {
    const s = new PassThrough();
    expect(await readCapped(s, 10, '11')).toBeNull();
    expect(s.listenerCount('data')).toBe(0);
  });

  it('throws when the stream fails or closes before its end', async () => {
    const failing = new PassThrough();
    const a = readCapped(failing, 100);
    failing.write(bytes(3, 0));
    failing.destroy(new Error('reset'));
    await expect(a).rejects.toThrow('reset');
    const closed = new PassThrough();
    const b = readCapped(closed, 100);
    closed.write(bytes(3, 0));
    closed.destroy();
    await expect(b).rejects.toThrow(/closed before its end/);
    await expect(readCapped(closed, 100)).rejects.toThrow(/closed before its end/);
  });

  it('gives an empty body for a stream that already ended', async () => {
    const s = Readable.from([bytes(4, 0)]);
    s.resume();
    await once(s, 'end');
    expect(await readCapped(s, 100)).toEqual(Buffer.alloc(0));
  });

  it('reads a real request body and answers 413 over the limit', async () => {
    const seen: Array<string | number> = [];
    const server = createServer((req, res) => {
      readRequestBody(req, 64).then(
        (b) => {
          seen.push(b.toString());
          res.end('ok');
        },
        (e: OpenAIError) => {
          seen.push(e.status);
          res.writeHead(e.status, { connection: 'close' }).end();
        },
      );
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const { port } = server.address() as AddressInfo;
    const post = (chunks: string[]) =>
      new Promise<number>((resolve, reject) => {
        const r = request(
          { port, host: '127.0.0.1', method: 'POST', path: '/', headers: { 'transfer-encoding': 'chunked' } },
          (res) => {
            res.resume();
            resolve(res.statusCode ?? 0);
          },
        );
        r.on('error', reject);
        for (const c of chunks) r.write(c);
        r.end();
      });
    try {
      expect(await post(['{"a":1}'])).toBe(200);
      expect(await post(['x'.repeat(40), 'y'.repeat(40)])).toBe(413);
      expect(seen[0]).toBe('{"a":1}');
      expect(seen[1]).toBe(413);
    } finally {
      server.closeAllConnections();
      server.close();
    }
  });
});
