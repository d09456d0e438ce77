// The simulated engine end to end over real sockets: HTTP contract, cache hits and TTFT, KV events
// on a real ZMQ PUB decoded here (own msgpack reader) versus /debug/cache, replay, drops, metrics.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { waitFor } from '../helpers/procs.js';
import { Dealer, Subscriber } from 'zeromq';
import { hashSpace, seqHashes } from '../../src/hashing/index.js';
import { startEngine, type EngineHandle, type EngineOptions, type EventFormat } from '../../src/engine-sim/index.js';

// ---------- a small msgpack reader (independent of the encoder the engine uses) ----------
function unpack(buf: Uint8Array): unknown {
  const dv = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  let p = 0;
  const str = (n: number): string => {
    const s = Buffer.from(buf.subarray(p, p + n)).toString('utf8');
    p += n;
    return s;
  };
  const bin = (n: number): Uint8Array => buf.slice(p, (p += n));
  const arr = (n: number): unknown[] => Array.from({ length: n }, () => read());
  const map = (n: number): Record<string, unknown> => {
    const o: Record<string, unknown> = {};
    for (let i = 0; i < n; i++) o[String(read())] = read();
    return o;
  };
  const u = (bytes: 1 | 2 | 4): number => {
    const v = bytes === 1 ? dv.getUint8(p) : bytes === 2 ? dv.getUint16(p) : dv.getUint32(p);
    p += bytes;
    return v;
  };
  function read(): unknown {
    const b = dv.getUint8(p++);
    if (b <= 0x7f) return b;
    if (b >= 0xe0) return b - 0x100;
    if ((b & 0xe0) === 0xa0) return str(b & 0x1f);
    if ((b & 0xf0) === 0x90) return arr(b & 0x0f);
    if ((b & 0xf0) === 0x80) return map(b & 0x0f);
    switch (b) {
      case 0xc0:
        return null;
      case 0xc2:
        return false;
      case 0xc3:
        return true;
      case 0xc4:
        return bin(u(1));
      case 0xc5:
        return bin(u(2));
      case 0xc6:
        return bin(u(4));
      case 0xca: {
        const v = dv.getFloat32(p);
        p += 4;
        return v;
      }
      case 0xcb: {
        const v = dv.getFloat64(p);
        p += 8;
        return v;
      }
      case 0xcc:
        return u(1);
      case 0xcd:
        return u(2);
      case 0xce:
        return u(4);
      case 0xcf: {
        const v = dv.getBigUint64(p);
        p += 8;
        return v;
      }
      case 0xd0: {
        const v = dv.getInt8(p);
        p += 1;
        return v;
      }
      case 0xd1: {
        const v = dv.getInt16(p);
        p += 2;
        return v;
      }
      case 0xd2: {
        const v = dv.getInt32(p);
        p += 4;
        return v;
      }
      case 0xd3: {
        const v = dv.getBigInt64(p);
        p += 8;
        return v;
      }
      case 0xd9:
        return str(u(1));
      case 0xda:
        return str(u(2));
      case 0xdb:
        return str(u(4));
      case 0xdc:
        return arr(u(2));
      case 0xdd:
        return arr(u(4));
      case 0xde:
        return map(u(2));
      case 0xdf:
        return map(u(4));
    }
    throw new Error(`msgpack type 0x${b.toString(16)} not expected from the engine`);
  }
  const v = read();
  if (p !== buf.length) throw new Error('trailing bytes');
  return v;
}

// ---------- normalizing the four event formats ----------
type Medium = 'GPU' | 'CPU';
interface WireEvent {
  kind: 'stored' | 'removed' | 'cleared';
  medium: Medium | null;
  hashes: bigint[];
  parent: bigint | null;
  tokens: number[];
  lora: string | null;
  salt: string | null;
  /** vLLM: per-block extra keys; block 0 of a salted chain carries the cache_salt last. */
  extra: (unknown[] | null)[] | null;
}
const u64 = (v: unknown): bigint => BigInt.asUintN(64, BigInt(v as number | bigint));
const medium = (m: unknown): Medium => (String(m).toUpperCase().startsWith('CPU') ? 'CPU' : 'GPU');

function normalize(format: EventFormat, raw: unknown): WireEvent {
  let e: Record<string, unknown>;
  if (format === 'array') {
    const a = raw as unknown[];
    if (a[0] === 'BlockStored')
      e = {
        type: a[0],
        block_hashes: a[1],
        parent_block_hash: a[2],
        token_ids: a[3],
        medium: a[6],
        lora_name: a[7],
        extra_keys: a[8],
      };
    else if (a[0] === 'BlockRemoved') e = { type: a[0], block_hashes: a[1], medium: a[2] };
    else e = { type: a[0] };
  } else e = raw as Record<string, unknown>;
  const type = String(e.type ?? e.event_type);
  const kind = /stored/i.test(type) ? 'stored' : /removed/i.test(type) ? 'removed' : 'cleared';
  return {
    kind,
    medium: e.medium === undefined ? null : medium(e.medium),
    hashes: ((e.block_hashes ?? e.seq_hashes ?? []) as unknown[]).map(u64),
    parent: (e.parent_block_hash ?? e.parent_hash ?? null) === null ? null : u64(e.parent_block_hash ?? e.parent_hash),
    tokens: (e.token_ids ?? []) as number[],
    lora: (e.lora_name as string | null | undefined) ?? null,
    salt: (e.cache_salt as string | undefined) ?? (e.additional_salt as string | null | undefined) ?? null,
    extra: (e.extra_keys as (unknown[] | null)[] | undefined) ?? null,
  };
}

interface Batch {
  seq: bigint;
  payload: Uint8Array;
}

/** Apply decoded batches (in seq order) to per-tier sets of router seq hashes, via the engine hashes. */
function applyBatches(format: EventFormat, batches: Batch[], blockSize: number): Record<Medium, Map<bigint, bigint>> {
  const tiers: Record<Medium, Map<bigint, bigint>> = { GPU: new Map(), CPU: new Map() };
  const routerOf = new Map<bigint, bigint>(); // engine hash -> router seq hash, never forgotten
  const saltOf = new Map<bigint, string | null>(); // a chain's cache_salt, inherited through parents
  for (const b of batches) {
    const [ts, events, rank] = unpack(b.payload) as [number, unknown[], number];
    expect(typeof ts).toBe('number');
    expect(rank).toBe(0);
    for (const raw of events) {
      const ev = normalize(format, raw);
      if (ev.kind === 'cleared') {
        if (ev.medium === null || ev.medium === 'GPU') tiers.GPU.clear();
        if (ev.medium === null || ev.medium === 'CPU') tiers.CPU.clear();
        continue;
      }
      const tier = tiers[ev.medium ?? 'GPU'];
      if (ev.kind === 'removed') {
        for (const h of ev.hashes) expect(tier.delete(h), `removed unknown block ${h}`).toBe(true);
        continue;
      }
      expect(ev.tokens.length).toBe(ev.hashes.length * blockSize);
      const parentRouter = ev.parent === null ? null : routerOf.get(ev.parent);
      expect(parentRouter, 'parent of a stored block must be known').not.toBeUndefined();
      const first = ev.extra?.[0] ?? null;
      const rootSalt = first ? ((first.filter((k) => k !== ev.lora).at(-1) as string | undefined) ?? null) : null;
      const salt = ev.salt ?? (ev.parent === null ? rootSalt : (saltOf.get(ev.parent) ?? null));
      const router = seqHashes(
        ev.tokens,
        blockSize,
        hashSpace({ seed: 1337n, loraName: ev.lora, salt }),
        parentRouter ?? null,
      );
      ev.hashes.forEach((h, i) => {
        routerOf.set(h, router[i]);
        saltOf.set(h, salt);
        tier.set(h, router[i]);
      });
    }
  }
  return tiers;
}

// ---------- ZMQ helpers ----------
const be8 = (seq: bigint): Buffer => {
  const b = Buffer.alloc(8);
  b.writeBigUInt64BE(seq);
  return b;
};

async function replay(endpoint: string, from: bigint, layout: 'topic' | 'no-topic'): Promise<Batch[]> {
  const d = new Dealer({ linger: 0, receiveTimeout: 5000 });
  d.connect(endpoint);
  try {
    await d.send(['', be8(from)]);
    const out: Batch[] = [];
    for (let i = 0; i < 100_000; i++) {
      const frames = await d.receive();
      expect(frames[0].length).toBe(0);
      expect(frames.length).toBe(layout === 'topic' ? 4 : 3);
      const seq = frames[frames.length - 2];
      const payload = frames[frames.length - 1];
      if (seq.equals(Buffer.alloc(8, 0xff)) && payload.length === 0) return out;
      out.push({ seq: seq.readBigUInt64BE(), payload });
    }
    throw new Error('no end marker');
  } finally {
    d.close();
  }
}

class LiveCollector {
  readonly batches = new Map<bigint, Uint8Array>();
  private readonly sub = new Subscriber({ linger: 0 });
  private loop: Promise<void>;
  constructor(endpoint: string, topic = '') {
    this.sub.connect(endpoint);
    this.sub.subscribe(topic);
    this.loop = (async () => {
      try {
        for await (const frames of this.sub) {
          expect(frames).toHaveLength(3);
          expect(frames[0].toString()).toBe(topic);
          expect(frames[1].length).toBe(8);
          this.batches.set(frames[1].readBigUInt64BE(), frames[2]);
        }
      } catch {
        // closed
      }
    })();
  }
  seqs(): bigint[] {
    return [...this.batches.keys()].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  }
  async close(): Promise<void> {
    this.sub.close();
    await this.loop;
  }
}

// ---------- HTTP helpers ----------
async function post(url: string, body: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
  const r = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await r.text();
  return { status: r.status, json: text ? (JSON.parse(text) as Record<string, unknown>) : {} };
}

async function getJson(url: string): Promise<Record<string, unknown>> {
  return (await (await fetch(url)).json()) as Record<string, unknown>;
}

/** Stream a request; returns the parsed data chunks and ms until the first chunk with content. */
async function stream(
  url: string,
  body: unknown,
): Promise<{ chunks: Record<string, unknown>[]; done: boolean; firstContentMs: number }> {
  const t0 = performance.now();
  const r = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  expect(r.status).toBe(200);
  expect(r.headers.get('content-type')).toMatch(/^text\/event-stream/);
  const chunks: Record<string, unknown>[] = [];
  let done = false;
  let firstContentMs = -1;
  let buf = '';
  const dec = new TextDecoder();
  for await (const part of r.body as unknown as AsyncIterable<Uint8Array>) {
    buf += dec.decode(part, { stream: true });
    let k: number;
    while ((k = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, k);
      buf = buf.slice(k + 2);
      expect(ev.startsWith('data: ')).toBe(true);
      const data = ev.slice(6);
      if (data === '[DONE]') {
        done = true;
        continue;
      }
      const chunk = JSON.parse(data) as Record<string, unknown>;
      const c = (chunk.choices as Record<string, unknown>[])[0];
      if (
        firstContentMs < 0 &&
        c &&
        ((c.text as string | undefined) ||
          ((c.delta as Record<string, unknown> | undefined)?.content as string | undefined))
      )
        firstContentMs = performance.now() - t0;
      chunks.push(chunk);
    }
  }
  return { chunks, done, firstContentMs };
}

async function untilIdle(h: EngineHandle): Promise<void> {
  for (let i = 0; i < 500; i++) {
    if (h.stats().every((s) => s.running === 0 && s.waiting === 0)) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error('engine never went idle');
}

const ids = (n: number, base: number): number[] => Array.from({ length: n }, (_, i) => base + i);
const quick: EngineOptions = { port: 0, zmqPort: 0, replayPort: 0, tokenizer: 'none', speedup: 20 };

async function metric(h: EngineHandle, name: string): Promise<number> {
  const text = await (await fetch(`${h.url}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(name + '{') || l.startsWith(name + ' '));
  return line ? Number(line.slice(line.lastIndexOf(' ') + 1)) : NaN;
}

// ---------- tests ----------
describe('HTTP contract', () => {
  let h: EngineHandle;
  beforeAll(async () => {
    h = await startEngine({ ...quick, loraModules: ['ada'], maxModelLen: 512 });
  });
  afterAll(() => h.close());

  it('serves health, models and 404/405 JSON errors', async () => {
    expect((await fetch(`${h.url}/health`)).status).toBe(200);
    const models = await getJson(`${h.url}/v1/models`);
    expect((models.data as { id: string; max_model_len: number }[]).map((m) => m.id)).toEqual([
      'Qwen/Qwen3-0.6B',
      'ada',
    ]);
    const nf = await fetch(`${h.url}/nope`);
    expect(nf.status).toBe(404);
    expect(await nf.json()).toMatchObject({ error: { type: 'NotFoundError', code: 404 } });
    expect((await fetch(`${h.url}/v1/completions`)).status).toBe(405);
  });

  it('non-streaming completion: exact max_tokens, usage with cached_tokens on a repeat', async () => {
    const body = { prompt: ids(40, 100), max_tokens: 7, return_token_ids: true };
    const a = await post(`${h.url}/v1/completions`, body);
    expect(a.status).toBe(200);
    expect(a.json).toMatchObject({
      object: 'text_completion',
      model: 'Qwen/Qwen3-0.6B',
      usage: { prompt_tokens: 40, completion_tokens: 7, total_tokens: 47, prompt_tokens_details: { cached_tokens: 0 } },
    });
    const choice = (a.json.choices as Record<string, unknown>[])[0];
    expect(choice).toMatchObject({ index: 0, finish_reason: 'length', stop_reason: null, logprobs: null });
    expect(choice.token_ids).toHaveLength(7);
    expect(typeof choice.text).toBe('string');
    const b = await post(`${h.url}/v1/completions`, body);
    expect(b.json.usage).toMatchObject({ prompt_tokens_details: { cached_tokens: 32 } });
  });

  it('streams vLLM chunks with a final usage chunk and [DONE]', async () => {
    const s = await stream(`${h.url}/v1/completions`, {
      prompt: ids(20, 7),
      max_tokens: 5,
      stream: true,
      stream_options: { include_usage: true },
    });
    expect(s.done).toBe(true);
    const usage = s.chunks.at(-1)!;
    expect(usage).toMatchObject({
      object: 'text_completion',
      choices: [],
      usage: { prompt_tokens: 20, completion_tokens: 5, total_tokens: 25 },
    });
    const body = s.chunks.slice(0, -1);
    expect(body).toHaveLength(5);
    for (const c of body)
      expect(c).toMatchObject({ id: usage.id, object: 'text_completion', model: 'Qwen/Qwen3-0.6B' });
    expect((body.at(-1)!.choices as Record<string, unknown>[])[0]).toMatchObject({ finish_reason: 'length' });
    expect(body.slice(0, -1).every((c) => (c.choices as Record<string, unknown>[])[0].finish_reason === null)).toBe(
      true,
    );
  });

  it('n > 1 and a list of token prompts give one choice each; a LoRA model is accepted', async () => {
    const r = await post(`${h.url}/v1/completions`, {
      model: 'ada',
      prompt: [ids(5, 1), ids(6, 50)],
      n: 2,
      max_tokens: 3,
    });
    expect(r.status).toBe(200);
    expect((r.json.choices as { index: number }[]).map((c) => c.index).sort()).toEqual([0, 1, 2, 3]);
    expect(r.json.usage).toMatchObject({ prompt_tokens: 11, completion_tokens: 12 });
    expect(r.json.model).toBe('ada');
  });

  it('a request seed makes output reproducible; stop_token_ids and stop strings end it early', async () => {
    const body = { prompt: ids(12, 3), max_tokens: 6, seed: 42, return_token_ids: true };
    const a = await post(`${h.url}/v1/completions`, body);
    const b = await post(`${h.url}/v1/completions`, body);
    const ca = (a.json.choices as { token_ids: number[]; text: string }[])[0];
    expect((b.json.choices as { token_ids: number[] }[])[0].token_ids).toEqual(ca.token_ids);
    const third = ca.token_ids[2];
    const stopped = await post(`${h.url}/v1/completions`, { ...body, stop_token_ids: [third] });
    const cs = (stopped.json.choices as Record<string, unknown>[])[0];
    expect(cs).toMatchObject({ finish_reason: 'stop', stop_reason: third, token_ids: ca.token_ids.slice(0, 3) });
    expect(stopped.json.usage).toMatchObject({ completion_tokens: 3 });
    // The stop token's text is left out of the output.
    const twoTokens = (await post(`${h.url}/v1/completions`, { ...body, max_tokens: 2 })).json.choices as {
      text: string;
    }[];
    expect(cs.text).toBe(twoTokens[0].text);
    const word = ca.text.split(' ').filter(Boolean)[1];
    const s = await stream(`${h.url}/v1/completions`, { ...body, stream: true, stop: [word] });
    const text = s.chunks.map((c) => (c.choices as { text: string }[])[0]?.text ?? '').join('');
    expect(text).toBe(ca.text.slice(0, ca.text.indexOf(word)));
    expect((s.chunks.at(-1)!.choices as Record<string, unknown>[])[0]).toMatchObject({
      finish_reason: 'stop',
      stop_reason: word,
    });
  });

  it('rejects bad input with 4xx JSON errors', async () => {
    const cases: [unknown, number, RegExp][] = [
      [{ prompt: ids(4, 1), max_tokens: 0 }, 400, /max_tokens/],
      [{ prompt: ids(4, 1), max_tokens: 'x' }, 400, /max_tokens/],
      [{ max_tokens: 3 }, 400, /prompt/],
      [{ prompt: [] }, 400, /prompt/],
      [{ prompt: [1, -2] }, 400, /prompt/],
      [{ prompt: ids(4, 1), stream_options: { include_usage: true } }, 400, /stream=True/],
      [{ prompt: ids(4, 1), model: 'other' }, 404, /does not exist/],
      [{ prompt: ids(500, 1), max_tokens: 20 }, 400, /maximum context length/],
      [{ prompt: ids(600, 1) }, 400, /maximum context length/],
      [{ prompt: 'text needs a tokenizer' }, 400, /token ids/],
      [{ prompt: ids(4, 1), n: 0 }, 400, /\bn\b/],
      [{ prompt: ids(4, 1), stop: 3 }, 400, /stop/],
    ];
    for (const [body, status, msg] of cases) {
      const r = await post(`${h.url}/v1/completions`, body);
      expect(r.status, JSON.stringify(body).slice(0, 80)).toBe(status);
      const err = r.json.error as Record<string, unknown>;
      expect(err.message).toMatch(msg);
      expect(err.code).toBe(status);
      expect(typeof err.type).toBe('string');
    }
    const bad = await fetch(`${h.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"messages": [',
    });
    expect(bad.status).toBe(400);
    expect((await post(`${h.url}/v1/chat/completions`, { messages: [] })).status).toBe(400);
    expect((await fetch(`${h.url}/health`)).status).toBe(200);
  });

  it('a client disconnect aborts the request and frees its blocks', async () => {
    const ctl = new AbortController();
    const r = await fetch(`${h.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: ids(30, 9000), max_tokens: 400, stream: true }),
      signal: ctl.signal,
    });
    const reader = (r.body as ReadableStream<Uint8Array>).getReader();
    await reader.read();
    expect(h.stats()[0].running).toBe(1);
    ctl.abort();
    await untilIdle(h);
    expect(h.stats()[0].activeBlocks).toBe(0);
  });
});

describe('chat with the real tokenizer', () => {
  let h: EngineHandle;
  beforeAll(async () => {
    h = await startEngine({ port: 0, zmqPort: null, speedup: 20 });
  });
  afterAll(() => h.close());

  it('templates, streams role then content, and reuses the cache on a repeat', async () => {
    const body = {
      messages: [
        { role: 'user', content: 'Tell me about the mountains and the sea, in some detail please. '.repeat(3) },
      ],
      max_tokens: 6,
    };
    const a = await post(`${h.url}/v1/chat/completions`, body);
    expect(a.status).toBe(200);
    const msg = (a.json.choices as { message: { role: string; content: string } }[])[0].message;
    expect(msg.role).toBe('assistant');
    expect(msg.content.length).toBeGreaterThan(0);
    const s = await stream(`${h.url}/v1/chat/completions`, {
      ...body,
      stream: true,
      stream_options: { include_usage: true },
    });
    expect((s.chunks[0].choices as Record<string, unknown>[])[0]).toMatchObject({
      index: 0,
      delta: { role: 'assistant', content: '' },
      finish_reason: null,
    });
    expect(s.chunks[0].object).toBe('chat.completion.chunk');
    const usage = s.chunks.at(-1)!.usage as { prompt_tokens: number; prompt_tokens_details: { cached_tokens: number } };
    expect(usage.prompt_tokens).toBe((a.json.usage as { prompt_tokens: number }).prompt_tokens);
    expect(usage.prompt_tokens_details.cached_tokens).toBe(Math.floor((usage.prompt_tokens - 1) / 16) * 16);
    const text = s.chunks
      .slice(1, -1)
      .map((c) => (c.choices as { delta: { content?: string } }[])[0].delta.content ?? '')
      .join('');
    expect(text.length).toBeGreaterThan(0);
  });
});

describe('prefix cache timing', () => {
  let h: EngineHandle;
  beforeAll(async () => {
    h = await startEngine({ port: 0, zmqPort: null, tokenizer: 'none' });
  });
  afterAll(() => h.close());

  it('a repeated prompt is a hit with a shorter TTFT than a cold prompt of the same length', async () => {
    const req = (base: number) => ({
      prompt: ids(8000, base),
      max_tokens: 2,
      stream: true,
      stream_options: { include_usage: true },
    });
    const cold = await stream(`${h.url}/v1/completions`, req(10));
    const warm = await stream(`${h.url}/v1/completions`, req(10));
    const cold2 = await stream(`${h.url}/v1/completions`, req(20_000));
    const cached = (s: typeof cold) =>
      (s.chunks.at(-1)!.usage as { prompt_tokens_details: { cached_tokens: number } }).prompt_tokens_details
        .cached_tokens;
    expect(cached(cold)).toBe(0);
    expect(cached(warm)).toBe(7984);
    expect(cached(cold2)).toBe(0);
    expect(warm.firstContentMs).toBeLessThan(cold.firstContentMs);
    expect(warm.firstContentMs).toBeLessThan(cold2.firstContentMs);
    expect(await metric(h, 'vllm:prefix_cache_hits_total')).toBe(7984);
    expect(await metric(h, 'vllm:prefix_cache_queries_total')).toBe(24000);
    expect(await metric(h, 'vllm:time_to_first_token_seconds_count')).toBe(3);
  });
});

describe.each<EventFormat>(['map', 'array', 'sglang', 'mooncake'])(
  'KV events (%s) describe /debug/cache exactly',
  (format) => {
    let h: EngineHandle;
    let live: LiveCollector;
    beforeAll(async () => {
      h = await startEngine({
        ...quick,
        eventFormat: format,
        numGpuBlocks: 24,
        numCpuBlocks: 16,
        topic: 'kv',
        maxNumBatchedTokens: 64,
      });
      live = new LiveCollector(h.zmqEndpoint!, 'kv');
    });
    afterAll(async () => {
      await live.close();
      await h.close();
    });

    it('live PUB + replay of the missed start rebuild the true per-tier cache; evictions offload to CPU first', async () => {
      // Handshake: ZMQ subscriptions are asynchronous, so send until the subscriber sees a batch.
      for (let i = 0; i < 50 && live.batches.size === 0; i++) {
        await post(`${h.url}/v1/completions`, { prompt: ids(16, 60_000 + 16 * i), max_tokens: 1 });
        await new Promise((r) => setTimeout(r, 20));
      }
      expect(live.batches.size).toBeGreaterThan(0);
      const firstLive = live.seqs()[0];
      const work = [];
      for (let i = 0; i < 8; i++)
        work.push(
          post(`${h.url}/v1/completions`, {
            prompt: [...ids(32, 1), ...ids(40 + 8 * i, 1000 * (i + 1))],
            max_tokens: 20,
          }),
        );
      for (const r of await Promise.all(work)) expect(r.status).toBe(200);
      await post(`${h.url}/v1/completions`, {
        prompt: [...ids(32, 1), ...ids(40, 1000)],
        max_tokens: 3,
        cache_salt: 'tenant-a',
      });
      await untilIdle(h);
      const all = await replay(h.replayEndpoint!, 0n, format === 'map' || format === 'mooncake' ? 'topic' : 'no-topic');
      expect(all.map((b) => b.seq)).toEqual(all.map((_, i) => BigInt(i)));
      const last = all.at(-1)!.seq;
      for (let i = 0; i < 200 && !live.batches.has(last); i++) await new Promise((r) => setTimeout(r, 10));
      // No drops: live is contiguous from the first batch it saw to the end, byte-identical to replay.
      const seqs = live.seqs();
      expect(seqs).toEqual(all.slice(Number(firstLive)).map((b) => b.seq));
      for (const s of seqs)
        expect(Buffer.from(live.batches.get(s)!).equals(Buffer.from(all[Number(s)].payload))).toBe(true);

      const stream = [
        ...all.slice(0, Number(firstLive)),
        ...seqs.map((seq) => ({ seq, payload: live.batches.get(seq)! })),
      ];
      const tiers = applyBatches(format, stream, 16);
      const truth = (await getJson(`${h.url}/debug/cache`)) as {
        ranks: { tiers: Record<Medium, { seq_hashes: string[]; cached_blocks: number }> }[];
      };
      const sorted = (m: Map<bigint, bigint>) => [...m.values()].map(String).sort();
      expect(sorted(tiers.GPU)).toEqual([...truth.ranks[0].tiers.GPU.seq_hashes].sort());
      expect(sorted(tiers.CPU)).toEqual([...truth.ranks[0].tiers.CPU.seq_hashes].sort());
      expect(truth.ranks[0].tiers.CPU.cached_blocks).toBeGreaterThan(0);

      // Store-before-remove: every GPU removal of a block not yet on CPU follows its CPU store.
      const onCpu = new Set<bigint>();
      let removedGpu = 0;
      for (const b of stream)
        for (const raw of (unpack(b.payload) as [number, unknown[]])[1]) {
          const ev = normalize(format, raw);
          if (ev.kind === 'stored' && ev.medium === 'CPU')
            ev.hashes.forEach((x) => {
              onCpu.add(x);
            });
          if (ev.kind === 'removed' && ev.medium === 'CPU')
            ev.hashes.forEach((x) => {
              onCpu.delete(x);
            });
          if (ev.kind === 'removed' && ev.medium === 'GPU') {
            removedGpu++;
            for (const x of ev.hashes) expect(onCpu.has(x)).toBe(true);
          }
        }
      expect(removedGpu).toBeGreaterThan(0);
    });

    it('reset_prefix_cache clears every tier and publishes AllBlocksCleared', async () => {
      const before = (
        await replay(h.replayEndpoint!, 0n, format === 'map' || format === 'mooncake' ? 'topic' : 'no-topic')
      ).length;
      expect((await fetch(`${h.url}/reset_prefix_cache`, { method: 'POST' })).status).toBe(200);
      const after = await replay(
        h.replayEndpoint!,
        BigInt(before),
        format === 'map' || format === 'mooncake' ? 'topic' : 'no-topic',
      );
      expect(after).toHaveLength(1);
      const kinds = (unpack(after[0].payload) as [number, unknown[]])[1].map((e) => normalize(format, e).kind);
      expect(new Set(kinds)).toEqual(new Set(['cleared']));
      const truth = (await getJson(`${h.url}/debug/cache`)) as {
        ranks: { tiers: Record<Medium, { cached_blocks: number }> }[];
      };
      expect(truth.ranks[0].tiers.GPU.cached_blocks + truth.ranks[0].tiers.CPU.cached_blocks).toBe(0);
    });
  },
);

describe('replay and drops', () => {
  let h: EngineHandle;
  let live: LiveCollector;
  beforeAll(async () => {
    h = await startEngine({ ...quick, dropRate: 0.5, seed: 7, replayBuffer: 1000 });
    live = new LiveCollector(h.zmqEndpoint!);
  });
  afterAll(async () => {
    await live.close();
    await h.close();
  });

  it('--drop-rate leaves gaps in the live stream that replay fills; replay starts where asked', async () => {
    // ZMQ's slow joiner: batches published before the subscription reaches the engine are lost, not
    // dropped, so count only from the first batch the subscriber saw (on a loaded machine the
    // connection can take longer than the first requests).
    for (let i = 0; i < 200 && live.batches.size === 0; i++) {
      await post(`${h.url}/v1/completions`, { prompt: ids(18, 90_000 + 100 * i), max_tokens: 1 });
      await untilIdle(h);
    }
    expect(live.batches.size).toBeGreaterThan(0);
    const before = (await replay(h.replayEndpoint!, 0n, 'topic')).length;
    const dropped0 = (await metric(h, 'engine_sim_kv_event_batches_dropped_total')) || 0; // (no series before a first drop)
    const seen0 = live.batches.size;
    for (let i = 0; i < 60; i++) await post(`${h.url}/v1/completions`, { prompt: ids(17, 100 * i), max_tokens: 1 });
    await untilIdle(h);
    const all = await replay(h.replayEndpoint!, 0n, 'topic');
    expect(all.length - before).toBeGreaterThanOrEqual(60);
    // Every batch published since has reached the live subscriber or was dropped on purpose.
    await waitFor(
      'the live stream to catch up',
      async () =>
        live.batches.size - seen0 + (await metric(h, 'engine_sim_kv_event_batches_dropped_total')) - dropped0 >=
        all.length - before,
      30_000,
    );
    const seqs = live.seqs();
    const missing = all.filter((b) => !live.batches.has(b.seq));
    expect(missing.length).toBeGreaterThan(0);
    expect(seqs.length).toBeGreaterThan(0);
    const dropped = await metric(h, 'engine_sim_kv_event_batches_dropped_total');
    expect(dropped).toBeGreaterThan(0);
    const from = all[10].seq;
    const tail = await replay(h.replayEndpoint!, from, 'topic');
    expect(tail.map((b) => b.seq)).toEqual(all.slice(10).map((b) => b.seq));
    // Filling the gaps from replay gives exactly /debug/cache.
    const merged = all.map((b) => ({ seq: b.seq, payload: live.batches.get(b.seq) ?? b.payload }));
    const tiers = applyBatches('map', merged, 16);
    const truth = (await getJson(`${h.url}/debug/cache`)) as {
      ranks: { tiers: Record<Medium, { seq_hashes: string[] }> }[];
    };
    expect([...tiers.GPU.values()].map(String).sort()).toEqual([...truth.ranks[0].tiers.GPU.seq_hashes].sort());
  });

  it('metrics move: running while busy, zero when idle', async () => {
    const pending = post(`${h.url}/v1/completions`, { prompt: ids(20, 5), max_tokens: 300 });
    let sawRunning = false;
    for (let i = 0; i < 200 && !sawRunning; i++) {
      sawRunning = (await metric(h, 'vllm:num_requests_running')) === 1;
      if (!sawRunning) await new Promise((r) => setTimeout(r, 2));
    }
    expect(sawRunning).toBe(true);
    expect(await metric(h, 'vllm:kv_cache_usage_perc')).toBeGreaterThan(0);
    expect((await pending).status).toBe(200);
    await untilIdle(h);
    expect(await metric(h, 'vllm:num_requests_running')).toBe(0);
    expect(await metric(h, 'vllm:num_requests_waiting')).toBe(0);
    expect(await metric(h, 'vllm:kv_cache_usage_perc')).toBe(0);
  });
});
