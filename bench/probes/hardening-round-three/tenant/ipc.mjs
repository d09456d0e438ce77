import cluster from 'node:cluster';
if (cluster.isPrimary) {
  cluster.setupPrimary({ serialization: 'advanced' });
  const w = cluster.fork();
  w.on('message', (m) => { if (m.t === 'slot-claim') w.send({ t: 'slot', id: m.id, granted: true, held: 0 }); else if (m.t === 'done') { console.log(m.text); w.kill(); } });
} else {
  const pending = new Map();
  process.on('message', (m) => { pending.get(m.id)?.(m); pending.delete(m.id); });
  const lat = [];
  for (let i = 0; i < 5000; i++) {
    const t = process.hrtime.bigint();
    await new Promise((r) => { pending.set(i, r); process.send({ t: 'slot-claim', id: i, tenant: 'acme', limit: 2 }); });
    lat.push(Number(process.hrtime.bigint() - t) / 1000);
  }
  const s = lat.slice(1000).sort((a, b) => a - b);
  process.send({ t: 'done', text: `IPC round trip: p50 ${s[Math.floor(s.length / 2)].toFixed(0)} µs p90 ${s[Math.floor(s.length * 0.9)].toFixed(0)} µs p99 ${s[Math.floor(s.length * 0.99)].toFixed(0)} µs` });
}
