// Usage: node measure.mjs <worktree> <scenario>
// Starts the router (dist of the worktree), sends the scenario, prints time to answer, router CPU, RSS.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
const [wt, scenario] = process.argv.slice(2);
const URL = 'http://127.0.0.1:18471';
const MODEL = 'Qwen/Qwen3-0.6B';
const child = spawn('node', [`${wt}/bin/kvrouter.js`, 'serve', '--config', new URL('router.yaml', import.meta.url).pathname], { cwd: wt, stdio: ['ignore', 'ignore', 'pipe'] });
let errOut = ''; child.stderr.on('data', (d) => (errOut += d));
const pid = child.pid;
const cpu = () => { const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' '); return (Number(f[11]) + Number(f[12])) / 100; };
const rss = () => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]) / 1024;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
for (let i = 0; ; i++) {
  try { const r = await fetch(`${URL}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: MODEL, max_tokens: 1, messages: [{ role: 'user', content: 'warm up' }] }) }); await r.text(); if (r.status === 200) break; } catch {}
  if (i > 300) { console.log('router did not start', errOut); process.exit(1); }
  await sleep(200);
}
const post = async (path, body) => { const t0 = performance.now(); const r = await fetch(`${URL}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body }); const text = await r.text(); return { status: r.status, ms: performance.now() - t0, text: text.slice(0, 160) }; };
let seq = 0;
const ordinaryBody = () => JSON.stringify({ model: MODEL, max_tokens: 1, messages: [{ role: 'system', content: 'You are the archivist of a river town. '.repeat(30) }, { role: 'user', content: `When was the great flood number ${seq++}?` }] });
for (let i = 0; i < 5; i++) await post('/v1/chat/completions', ordinaryBody());
const idle = []; for (let i = 0; i < 10; i++) idle.push((await post('/v1/chat/completions', ordinaryBody())).ms);
const digits = (n) => { const s = '1234567890'.repeat(Math.ceil(n / 10)); return s.slice(0, n); };
let bodies;
if (scenario === 'toolargs') {
  const args = JSON.stringify({ n: digits(5_000_000) });
  bodies = [JSON.stringify({ model: MODEL, max_tokens: 1, messages: [{ role: 'user', content: 'call it' }, { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: args } }] }, { role: 'tool', tool_call_id: 'c1', content: 'ok' }] })];
} else if (scenario === 'legit1') {
  // About 30,000 tokens of prose: a prompt just under the limit.
  bodies = [JSON.stringify({ model: MODEL, max_tokens: 1, messages: [{ role: 'user', content: 'The archivist of a river town keeps a ledger of every flood since 1821. '.repeat(1500) }] })];
} else {
  const n = scenario === 'digits3' ? 3 : 1;
  bodies = Array.from({ length: n }, (_, i) => JSON.stringify({ model: MODEL, max_tokens: 1, messages: [{ role: 'user', content: String(i) + digits(3_900_000) }] }));
}
const cpu0 = cpu(), rss0 = rss();
let peak = rss0, stop = false;
const sampler = (async () => { while (!stop) { peak = Math.max(peak, rss()); await sleep(50); } })();
const prober = spawn('node', [new URL('probe.mjs', import.meta.url).pathname], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
await new Promise((r) => prober.once('message', r));
await sleep(200);
const t0 = performance.now();
const results = await Promise.all(bodies.map((b) => post('/v1/chat/completions', b)));
prober.send('stop');
const during = await new Promise((r) => prober.once('message', r));
const wall = performance.now() - t0;
const cpu1 = cpu();
await sleep(3000);
const rssAfter = rss();
stop = true; await sampler;
console.log(JSON.stringify({ scenario, statuses: results.map((r) => r.status), msg: results[0].text, answerMs: results.map((r) => Math.round(r.ms)), wallMs: Math.round(wall), routerCpuS: +(cpu1 - cpu0).toFixed(2), rssBeforeMB: Math.round(rss0), rssPeakMB: Math.round(peak), rssAfter3sMB: Math.round(rssAfter), ordinaryIdleMedMs: +idle.sort((a, b) => a - b)[5].toFixed(1), ordinaryDuring: { n: during.length, maxMs: Math.round(Math.max(0, ...during)), medMs: during.length ? Math.round(during.sort((a, b) => a - b)[Math.floor(during.length / 2)]) : null } }));
child.kill("SIGTERM");
setTimeout(() => process.exit(0), 2000);
