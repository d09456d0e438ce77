import { spawn } from 'node:child_process';
const [wt] = process.argv.slice(2);
const URL = 'http://127.0.0.1:18471';
const MODEL = 'Qwen/Qwen3-0.6B';
const child = spawn('node', [`${wt}/bin/kvrouter.js`, 'serve', '--config', new URL('router.yaml', import.meta.url).pathname], { cwd: wt, stdio: ['ignore', 'ignore', 'pipe'] });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
for (let i = 0; ; i++) { try { const r = await fetch(`${URL}/live`); if (r.status === 200) break; } catch {} await sleep(200); }
await sleep(1000);
const deep = '{"a":'.repeat(100_000) + '1' + '}'.repeat(100_000);
const bodies = {
  chat: `{"model":"${MODEL}","max_tokens":1,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":${deep}}}]}`,
  args: `{"model":"${MODEL}","max_tokens":1,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":${JSON.stringify(deep)}}}]}]}`,
  kwargs: `{"model":"${MODEL}","max_tokens":1,"messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"documents":[${deep}]}}`,
};
for (const [k, body] of Object.entries(bodies)) for (const path of ['/v1/chat/completions', '/v1/route', '/v1/route/loads', '/debug/route']) {
  const r = await fetch(`${URL}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
  console.log(k, path, r.status, (await r.text()).slice(0, 150));
}
child.kill('SIGTERM');
