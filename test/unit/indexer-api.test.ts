// HTTP contract of the Conductor indexer API, driven through the real hono app (no sockets).
import { beforeEach, describe, expect, it } from 'vitest';
import { createIndexerApp } from '../../src/api/indexer-app.js';
import { parseJson, stringifyJson } from '../../src/common/json.js';
import { KvIndexWriter } from '../../src/indexer/writer.js';
import { Registry } from '../../src/events/registry.js';
import { hashSpace, seqHashes } from '../../src/hashing/index.js';
import { TieredIndexer } from '../../src/indexer/namespaces.js';

type App = ReturnType<typeof createIndexerApp>['app'];
let app: App;
let now = 1_000_000;

beforeEach(() => {
  const indexer = new TieredIndexer();
  app = createIndexerApp({
    writer: new KvIndexWriter(indexer),
    registry: new Registry(),
    now: () => now,
    limits: { maxBodyBytes: 64 * 1024 },
  }).app;
});

async function call(
  method: string,
  path: string,
  body?: unknown,
): Promise<{ status: number; body: any; text: string; headers: Headers }> {
  const init: RequestInit = { method };
  if (body !== undefined) {
    init.body = typeof body === 'string' ? body : stringifyJson(body);
    init.headers = { 'content-type': 'application/json' };
  }
  const res = await app.request(path, init);
  const text = await res.text();
  let parsed: unknown = null;
  try {
    parsed = parseJson(text);
  } catch {
    parsed = text;
  }
  return { status: res.status, body: parsed, text, headers: res.headers };
}

const REG = {
  endpoint: 'tcp://127.0.0.1:5557',
  replay_endpoint: 'tcp://127.0.0.1:5558',
  type: 'vLLM',
  modelname: 'deepseek',
  tenant_id: 'default',
  instance_id: 'vllm-prefill-node1',
  block_size: 4,
  dp_rank: 0,
};
const TOKENS = Array.from({ length: 18 }, (_, i) => i + 100); // 4 complete blocks of 4
const SEQ = [...seqHashes(TOKENS, 4, hashSpace())];

function stored(over: Record<string, unknown>) {
  return {
    event_type: 'stored',
    model_name: 'deepseek',
    block_size: 4,
    backend_id: 'vllm-prefill-node1',
    tenant_id: 'default',
    dp_rank: 0,
    medium: 'gpu',
    parent_hash: null,
    base_block_idx: 0,
    token_ids: null,
    ...over,
  };
}

describe('POST /register and /unregister', () => {
  it('registers, is idempotent, and rejects conflicts with 409', async () => {
    expect(await call('POST', '/register', REG)).toMatchObject({
      status: 200,
      body: { status: 'registered successfully', instance_id: 'vllm-prefill-node1' },
    });
    expect((await call('POST', '/register', REG)).status).toBe(200);
    const conflict = await call('POST', '/register', { ...REG, endpoint: 'tcp://127.0.0.1:6000' });
    expect(conflict.status).toBe(409);
    expect(conflict.body.error.code).toBe('registration_conflict');
    expect(conflict.body.error.message).toContain('endpoint');
    const workers = await call('GET', '/workers');
    expect(workers.body.workers).toHaveLength(1);
    expect(workers.body.workers[0]).toMatchObject({
      key: 'vllm-prefill-node1|default|0',
      status: 'pending',
      last_error: null,
      block_size: 4,
    });
  });

  it("accepts Dynamo's aliases and numeric instance ids", async () => {
    const r = await call('POST', '/register', {
      endpoint: 'tcp://127.0.0.1:5557',
      type: 'sglang',
      model_name: 'm',
      instance_id: 7,
      block_size: 16,
      additional_salt: 'w8a8',
    });
    expect(r).toMatchObject({ status: 200, body: { instance_id: '7' } });
    expect((await call('GET', '/workers')).body.workers[0]).toMatchObject({
      type: 'SGLang',
      model_name: 'm',
      additional_salt: 'w8a8',
      dp_rank: 0,
    });
  });

  it('names the bad field in every 400', async () => {
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ ...REG, endpoint: undefined }, 'endpoint'],
      [{ ...REG, endpoint: 'http://x' }, 'endpoint'],
      [{ ...REG, type: 'TensorRT' }, 'type'],
      [{ ...REG, modelname: undefined }, 'modelname'],
      [{ ...REG, block_size: 0 }, 'block_size'],
      [{ ...REG, block_size: '16' }, 'block_size'],
      [{ ...REG, dp_rank: -1 }, 'dp_rank'],
      [{ ...REG, instance_id: '' }, 'instance_id'],
      [{ ...REG, lora_name: 5 }, 'lora_name'],
    ];
    for (const [body, field] of cases) {
      const r = await call('POST', '/register', JSON.parse(JSON.stringify(body)));
      expect({ field, status: r.status, errField: r.body.error?.field }).toEqual({
        field,
        status: 400,
        errField: field,
      });
    }
  });

  it('unregisters with the seed response, purges blocks, and 404s unknown keys', async () => {
    await call('POST', '/register', REG);
    await call('POST', '/events', stored({ seq_hashes: SEQ.slice(0, 2) }));
    expect(
      await call('POST', '/unregister', {
        instance_id: 'vllm-prefill-node1',
        dp_rank: 0,
        type: 'vLLM',
        modelname: 'deepseek',
        block_size: 4,
      }),
    ).toEqual(
      expect.objectContaining({
        status: 200,
        body: { status: 'unregistered successfully', removed_instances: ['vllm-prefill-node1|default|0'] },
      }),
    );
    const q = await call('POST', '/query', { model: 'deepseek', block_size: 4, token_ids: TOKENS });
    expect(q.body).toEqual({ default: {} });
    const missing = await call('POST', '/unregister', { instance_id: 'nope' });
    expect(missing.status).toBe(404);
    expect(missing.body.error.message).toBe('service not found: nope|*|*');
  });
});

describe('POST /query and /query_by_hash', () => {
  it('answers the seed shape with cumulative tiers and per-rank prefixes', async () => {
    await call('POST', '/register', REG);
    await call('POST', '/register', {
      ...REG,
      dp_rank: 1,
      endpoint: 'tcp://127.0.0.1:5559',
      replay_endpoint: undefined,
    });
    await call('POST', '/events', [
      stored({ seq_hashes: SEQ.slice(0, 2), event_id: 1 }),
      stored({ seq_hashes: SEQ.slice(1, 4), medium: 'CPU_PINNED', event_id: 1 }),
      stored({ seq_hashes: SEQ.slice(0, 1), dp_rank: 1 }),
    ]);
    const q = await call('POST', '/query', {
      model: 'deepseek',
      block_size: 4,
      token_ids: TOKENS,
      tenant_id: 'default',
    });
    expect(q.status).toBe(200);
    expect(q.body).toEqual({
      default: { 'vllm-prefill-node1': { longest_matched: 16, GPU: 8, CPU: 16, DISK: 16, DP: { '0': 16, '1': 4 } } },
    });
    const byHash = await call('POST', '/query_by_hash', {
      model: 'deepseek',
      block_size: 4,
      seq_hashes: SEQ.slice(0, 3),
    });
    expect(byHash.body.default['vllm-prefill-node1']).toEqual({
      longest_matched: 12,
      GPU: 8,
      CPU: 12,
      DISK: 12,
      DP: { '0': 12, '1': 4 },
    });
  });

  it('keeps u64 hashes above 2^53 exact, as integers, strings or the block_hash alias', async () => {
    const big = [(1n << 64n) - 1n, (1n << 63n) + 12345n];
    await call('POST', '/events', stored({ seq_hashes: big }));
    const rawInts = `{"model":"deepseek","block_size":4,"seq_hashes":[${big[0]},${big[1]}]}`;
    expect((await call('POST', '/query_by_hash', rawInts)).body.default['vllm-prefill-node1'].longest_matched).toBe(8);
    const strings = await call('POST', '/query_by_hash', {
      model: 'deepseek',
      block_size: 4,
      block_hash: big.map(String),
    });
    expect(strings.body.default['vllm-prefill-node1'].longest_matched).toBe(8);
    // A rounded hash (what JSON.parse would produce) must not match.
    await call('POST', '/events', stored({ seq_hashes: [big[1]], backend_id: 'other' }));
    const rounded = await call(
      'POST',
      '/query_by_hash',
      `{"model":"deepseek","block_size":4,"seq_hashes":[${Number(big[1])}]}`,
    );
    expect(rounded.body).toEqual({
      default: {
        'vllm-prefill-node1': { longest_matched: 0, GPU: 0, CPU: 0, DISK: 0, DP: {} },
        other: { longest_matched: 0, GPU: 0, CPU: 0, DISK: 0, DP: {} },
      },
    });
    const exact = await call('POST', '/query_by_hash', `{"model":"deepseek","block_size":4,"seq_hashes":[${big[1]}]}`);
    expect(exact.body.default.other.longest_matched).toBe(4);
    // Beyond u64 after rounding: a clear 400, never a silent wrong answer.
    expect(
      (await call('POST', '/query_by_hash', `{"model":"deepseek","block_size":4,"seq_hashes":[${Number(big[0])}]}`))
        .status,
    ).toBe(400);
    const dump = await call('GET', '/dump');
    expect(dump.text).toContain(`"seq_hashes":[${big[0]},${big[1]}]`);
  });

  it('isolates tenants, LoRA adapters and salts', async () => {
    await call('POST', '/events', stored({ seq_hashes: SEQ, tenant_id: 'tenant-b' }));
    const a = await call('POST', '/query', {
      model: 'deepseek',
      block_size: 4,
      token_ids: TOKENS,
      tenant_id: 'tenant-a',
    });
    expect(a.body).toEqual({ 'tenant-a': {} });
    const b = await call('POST', '/query', {
      model: 'deepseek',
      block_size: 4,
      token_ids: TOKENS,
      tenant_id: 'tenant-b',
    });
    expect(b.body['tenant-b']['vllm-prefill-node1'].longest_matched).toBe(16);
    // Same tokens under a LoRA hash differently: the base-model blocks do not match.
    const lora = await call('POST', '/query', {
      model: 'deepseek',
      block_size: 4,
      token_ids: TOKENS,
      tenant_id: 'tenant-b',
      lora_name: 'sql-adapter',
    });
    expect(lora.body).toEqual({ 'tenant-b': {} });
    const loraSeq = [...seqHashes(TOKENS, 4, hashSpace({ loraName: 'sql-adapter', salt: 'w8a8' }))];
    await call('POST', '/events', stored({ seq_hashes: loraSeq, lora_name: 'sql-adapter', additional_salt: 'w8a8' }));
    const salted = await call('POST', '/query', {
      model: 'deepseek',
      block_size: 4,
      token_ids: TOKENS,
      lora_name: 'sql-adapter',
      cache_salt: 'w8a8',
    });
    expect(salted.body.default['vllm-prefill-node1'].longest_matched).toBe(16);
    const unsalted = await call('POST', '/query', {
      model: 'deepseek',
      block_size: 4,
      token_ids: TOKENS,
      lora_name: 'sql-adapter',
    });
    expect(unsalted.body).toEqual({ default: {} });
  });

  it('filters by instance_id, reports registered instances with zeros, and answers the Dynamo shape', async () => {
    await call('POST', '/register', REG);
    await call('POST', '/register', { ...REG, instance_id: 'node2', endpoint: 'tcp://127.0.0.1:5600' });
    await call('POST', '/events', stored({ seq_hashes: SEQ.slice(0, 1) }));
    const all = await call('POST', '/query', { model: 'deepseek', block_size: 4, token_ids: TOKENS });
    expect(all.body.default).toEqual({
      'vllm-prefill-node1': { longest_matched: 4, GPU: 4, CPU: 4, DISK: 4, DP: { '0': 4 } },
      node2: { longest_matched: 0, GPU: 0, CPU: 0, DISK: 0, DP: { '0': 0 } },
    });
    const one = await call('POST', '/query', {
      model: 'deepseek',
      block_size: 4,
      token_ids: TOKENS,
      instance_id: 'node2',
    });
    expect(Object.keys(one.body.default)).toEqual(['node2']);
    const dyn = await call('POST', '/query?format=dynamo', {
      model: 'deepseek',
      block_size: 4,
      token_ids: TOKENS,
      instance_id: 'vllm-prefill-node1',
    });
    expect(dyn.body).toEqual({
      scores: { 'vllm-prefill-node1': { '0': 4 } },
      frequencies: [],
      instances: { 'vllm-prefill-node1': { longest_matched: 4, gpu: 4, cpu: 4, disk: 4, dp: { '0': 4 } } },
    });
  });

  it('credits a shared pool (Mooncake registration) separately', async () => {
    await call('POST', '/register', REG);
    await call('POST', '/register', {
      ...REG,
      type: 'Mooncake',
      instance_id: 'store',
      endpoint: 'tcp://127.0.0.1:5700',
    });
    await call('POST', '/events', [
      stored({ seq_hashes: SEQ.slice(0, 1) }),
      stored({ seq_hashes: SEQ.slice(0, 3), backend_id: 'store', medium: 'cpu' }),
    ]);
    const q = await call('POST', '/query', { model: 'deepseek', block_size: 4, token_ids: TOKENS });
    expect(q.body.default).toEqual({
      'vllm-prefill-node1': { longest_matched: 12, GPU: 4, CPU: 4, DISK: 4, DP: { '0': 4 }, SHARED: 12 },
    });
  });

  it('rejects bad queries with a field-naming 400', async () => {
    const cases: Array<[unknown, string]> = [
      [{ block_size: 4, token_ids: [1] }, 'model'],
      [{ model: 'm', token_ids: [1] }, 'block_size'],
      [{ model: 'm', block_size: 4 }, 'token_ids'],
      [{ model: 'm', block_size: 4, token_ids: [1, -2] }, 'token_ids[1]'],
      [{ model: 'm', block_size: 4, token_ids: [1.5] }, 'token_ids[0]'],
      [{ model: 'm', block_size: 4, token_ids: [1], lora_name: 'a', lora_id: 3 }, 'lora_id'],
    ];
    for (const [body, field] of cases) {
      const r = await call('POST', '/query', body);
      expect({ status: r.status, field: r.body.error?.field }).toEqual({ status: 400, field });
    }
    const h = await call('POST', '/query_by_hash', { model: 'm', block_size: 4, seq_hashes: ['0xZZ'] });
    expect({ status: h.status, field: h.body.error.field }).toEqual({ status: 400, field: 'seq_hashes[0]' });
    expect(
      (await call('POST', '/query_by_hash', { model: 'm', block_size: 4, seq_hashes: [(1n << 64n).toString()] }))
        .status,
    ).toBe(400);
  });
});

describe('POST /events', () => {
  it('re-hashes token_ids (dual key), removes by engine hash, and counts orphans', async () => {
    const engine = [9001n, 9002n, 9003n];
    let r = await call('POST', '/events', stored({ seq_hashes: engine.slice(0, 2), token_ids: TOKENS.slice(0, 8) }));
    expect(r.body.results).toEqual([{ status: 'ok', blocks: 2 }]);
    r = await call(
      'POST',
      '/events',
      stored({ seq_hashes: engine.slice(2), parent_hash: 9002, base_block_idx: 2, token_ids: TOKENS.slice(8, 12) }),
    );
    expect(r.body.results).toEqual([{ status: 'ok', blocks: 1 }]);
    const q = async () =>
      (await call('POST', '/query', { model: 'deepseek', block_size: 4, token_ids: TOKENS })).body.default[
        'vllm-prefill-node1'
      ]?.longest_matched ?? 0;
    expect(await q()).toBe(12);
    r = await call('POST', '/events', { ...stored({}), event_type: 'removed', seq_hashes: [9002] });
    expect(r.body.results).toEqual([{ status: 'ok', blocks: 1 }]);
    expect(await q()).toBe(4);
    r = await call(
      'POST',
      '/events',
      stored({ seq_hashes: [7777], parent_hash: 123456, base_block_idx: 5, token_ids: TOKENS.slice(0, 4) }),
    );
    expect(r.body.results[0]).toMatchObject({ status: 'orphan', blocks: 0 });
    r = await call('POST', '/events', { ...stored({}), event_type: 'cleared' });
    expect(await q()).toBe(0);
  });

  it('detects event_id gaps and regressions per stream and purges that stream', async () => {
    let r = await call('POST', '/events', [
      stored({ seq_hashes: SEQ.slice(0, 2), event_id: 1 }),
      stored({ seq_hashes: SEQ.slice(2, 3), event_id: 2 }),
    ]);
    expect(r.body.results.map((x: { status: string }) => x.status)).toEqual(['ok', 'ok']);
    r = await call('POST', '/events', stored({ seq_hashes: SEQ.slice(3, 4), event_id: 5 }));
    expect(r.body.results[0]).toEqual({ status: 'gap', blocks: 1 });
    const q = await call('POST', '/query_by_hash', { model: 'deepseek', block_size: 4, seq_hashes: SEQ });
    expect(q.body.default['vllm-prefill-node1']?.longest_matched ?? 0).toBe(0); // purged; only block 3 left, no prefix
    r = await call('POST', '/events', stored({ seq_hashes: SEQ.slice(0, 1), event_id: 1 }));
    expect(r.body.results[0].status).toBe('purged');
  });

  it('validates the whole batch before applying any of it', async () => {
    const r = await call('POST', '/events', [
      stored({ seq_hashes: SEQ }),
      { event_type: 'stored', model_name: 'deepseek' },
    ]);
    expect(r.status).toBe(400);
    expect(r.body.error.field).toBe('[1].block_size');
    const q = await call('POST', '/query', { model: 'deepseek', block_size: 4, token_ids: TOKENS });
    expect(q.body).toEqual({ default: {} });
    expect((await call('POST', '/events', { event_type: 'exploded' })).body.error.field).toBe('event_type');
  });

  it('expires speculative entries and reports unknown media', async () => {
    const r = await call('POST', '/events', stored({ seq_hashes: SEQ, medium: 'tape' }));
    expect(r.body.results[0]).toMatchObject({ status: 'rejected' });
  });
});

describe('protocol errors', () => {
  it('400 on invalid JSON or a non-object, 404 unknown route, 405 wrong method, 413 too large', async () => {
    const bad = await call('POST', '/query', '{"model":');
    expect(bad.status).toBe(400);
    expect(bad.body.error.code).toBe('invalid_json');
    expect((await call('POST', '/query', '[1,2]')).status).toBe(400);
    expect((await call('POST', '/query', '')).status).toBe(400);
    const nf = await call('GET', '/nope');
    expect(nf).toMatchObject({ status: 404, body: { error: { code: 'not_found' } } });
    const wm = await call('GET', '/query');
    expect(wm.status).toBe(405);
    expect(wm.headers.get('allow')).toBe('POST');
    const big = await call(
      'POST',
      '/query',
      JSON.stringify({ model: 'm', block_size: 4, token_ids: new Array(40000).fill(1) }),
    );
    expect(big.status).toBe(413);
  });

  it('serves /health and /metrics', async () => {
    await call('POST', '/events', stored({ seq_hashes: SEQ }));
    expect((await call('GET', '/health')).body).toMatchObject({ status: 'ok', index: { blocks: 4, records: 4 } });
    const m = await call('GET', '/metrics');
    expect(m.text).toMatch(/kvrouter_index_blocks 4\b/);
  });
});
