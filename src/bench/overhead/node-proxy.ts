// The floor of any proxy written on Node's HTTP stack, for `bench overhead --targets node`: node:http
// in, undici out (the libraries kvrouter's hot path uses), round-robin over the upstreams, the
// response streamed back chunk by chunk. No parsing, routing, booking or metrics: what kvrouter
// spends above this is its own.
// Run as a child: `node node-proxy.js --node-proxy <url,url>` prints `node-proxy <url>`.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Pool } from 'undici';

async function main(upstreams: string[]): Promise<void> {
  const pools = upstreams.map((u) => new Pool(u, { connections: 512, pipelining: 1, keepAliveTimeout: 30_000 }));
  let turn = 0;
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const pool = pools[turn++ % pools.length];
      pool
        .request({
          path: req.url ?? '/',
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: Buffer.concat(chunks),
        })
        .then(
          async (up) => {
            res.writeHead(up.statusCode, { 'content-type': String(up.headers['content-type'] ?? 'application/json') });
            for await (const c of up.body) if (!res.write(c)) await new Promise((r) => res.once('drain', r));
            res.end();
          },
          () => res.writeHead(502).end(),
        );
    });
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  process.stdout.write(`node-proxy http://127.0.0.1:${(server.address() as AddressInfo).port}\n`);
  process.on('SIGTERM', () => process.exit(0));
}

if (process.argv[2] === '--node-proxy') void main((process.argv[3] ?? '').split(',').filter(Boolean));
