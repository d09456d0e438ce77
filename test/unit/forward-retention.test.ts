// While a request streams, the proxy keeps of its decision only the choice (KeptDecision): not the
// other candidates' scores, a thousand objects per request in flight at a thousand instances.
// A real upstream on loopback holds the stream open while the test collects garbage and looks for
// the decision through a weak reference.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { afterAll, describe, expect, it } from 'vitest';
import { TieredIndexer } from '../../src/indexer/namespaces.js';
import { CapacityQueue } from '../../src/proxy/capacity.js';
import { type ForwardJob, forward, type InstanceRuntime } from '../../src/proxy/forward.js';
import { InstanceHealth } from '../../src/proxy/health.js';
import { createUpstream } from '../../src/proxy/upstreams.js';
import { type Decision, Scheduler } from '../../src/scheduler/scheduler.js';
import { PICK_NS as ns, PICK_TIME_WEIGHTS as TIME } from '../helpers/scheduling.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

const servers: http.Server[] = [];
afterAll(async () => {
  for (const s of servers) {
    s.closeAllConnections();
    await new Promise((r) => s.close(r));
  }
});

async function listen(handler: http.RequestListener): Promise<string> {
  const s = http.createServer(handler);
  servers.push(s);
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  return `http://127.0.0.1:${(s.address() as AddressInfo).port}`;
}

describe('a request in flight', () => {
  it('keeps its choice, not the decision with every candidate', async () => {
    // The engine: the first chunk at once, the end only when the test says.
    let release = () => {};
    const ended = new Promise<void>((r) => {
      release = r;
    });
    let firstSent = () => {};
    const first = new Promise<void>((r) => {
      firstSent = r;
    });
    const engine = await listen((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('data: {"choices":[{"text":"a"}]}\n\n', () => firstSent());
      void ended.then(() => res.end('data: [DONE]\n\n'));
    });
    const instances: InstanceRuntime[] = Array.from({ length: 64 }, (_, k) => {
      const health = new InstanceHealth({ failureThreshold: 5, ejectionBaseMs: 1000, ejectionMaxMs: 10_000 });
      const upstream = createUpstream(
        `e${k}`,
        engine,
        { connectTimeoutMs: 2000, headersTimeoutMs: 10_000, bodyTimeoutMs: 10_000, connections: 4 },
        { health, now: Date.now, onChange: () => {} },
      );
      return { id: `e${k}`, dpSize: 1, upstream, health };
    });
    const scheduler = new Scheduler(new TieredIndexer(), () => 0.5);
    let decision: WeakRef<Decision> | null = null;
    let candidates = 0;
    let chosen: string | null = null;
    const router = await listen((_req, res) => {
      const job: ForwardJob = {
        path: '/v1/completions',
        body: Buffer.from('{"model":"m","prompt":"x","stream":true}'),
        stream: true,
        requestId: 'r1',
        ns,
        route: {
          tokens: Array.from({ length: 64 }, (_, i) => i + 1),
          policy: 'kv',
          weights: TIME,
          temperature: 0,
        },
        instances,
        receivedAt: Date.now(),
      };
      void forward(
        res,
        job,
        { maxRetries: 0, queueTimeoutMs: 1000, speculativeTtlMs: 0 },
        {
          scheduler,
          queue: new CapacityQueue(16),
          now: Date.now,
          observer: {
            routed: (d) => {
              decision = new WeakRef(d);
              candidates = d.candidates.length;
              chosen = d.chosen?.instance ?? null;
            },
          },
        },
      );
    });
    const res = await fetch(`${router}/v1/completions`, { method: 'POST', body: '{}' });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-kvrouter-instance')).toBe(chosen);
    const reader = res.body!.getReader();
    const chunk = await reader.read();
    expect(new TextDecoder().decode(chunk.value)).toContain('"text":"a"');
    await first;
    // Streaming: booked on its instance, the decision (64 candidates' scores) collectable.
    expect(candidates).toBe(64);
    expect(scheduler.active.size).toBe(1);
    // (No deref() between collections: a deref keeps its target alive until the job ends.)
    for (let i = 0; i < 3; i++) {
      gc();
      await new Promise((r) => setImmediate(r));
    }
    expect(decision!.deref()).toBeUndefined();
    release();
    while (!(await reader.read()).done) {}
    // The end freed the booking (from the kept choice).
    for (let i = 0; i < 100 && scheduler.active.size > 0; i++) await new Promise((r) => setTimeout(r, 10));
    expect(scheduler.active.size).toBe(0);
  });
});
