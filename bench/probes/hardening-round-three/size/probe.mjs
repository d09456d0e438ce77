// Ordinary chat requests in a loop from their own process, latencies sent back over IPC on 'stop'.
const URL = 'http://127.0.0.1:18471';
const MODEL = 'Qwen/Qwen3-0.6B';
let seq = 0, stop = false;
const lat = [];
process.on('message', (m) => { if (m === 'stop') stop = true; });
const body = () => JSON.stringify({ model: MODEL, max_tokens: 1, messages: [{ role: 'system', content: 'You are the archivist of a river town. '.repeat(30) }, { role: 'user', content: `When was the great flood number ${process.pid}-${seq++}?` }] });
process.send('ready');
while (!stop) {
  const t0 = performance.now();
  const r = await fetch(`${URL}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: body() });
  await r.text();
  lat.push(performance.now() - t0);
  await new Promise((r) => setTimeout(r, 20));
}
process.send(lat, () => process.disconnect());
