// Field-history variants and engine quirks: vLLM positional generations, bytes hashes, LoRA,
// extra_keys, KV-cache groups, EAGLE pairs, block splitting; SGLang; LMCache; Mooncake.
import { encode } from '@msgpack/msgpack';
import { describe, expect, it } from 'vitest';
import { type DecodedBatch, decodeContext, decodePayload, type DecodeContext } from '../../src/events/decode/index.js';
import { subBlockId } from '../../src/events/decode/rechunk.js';
import type { PublisherType } from '../../src/events/registry.js';
import type { KvEvent, RemovedEvent, StoredEvent } from '../../src/indexer/kv-event.js';
import { plainBatch, plainResult } from '../helpers/plain-events.js';

const H1 = 3236607068019569386n;
const H2 = 2758186210834249151n;
const T16 = Array.from({ length: 16 }, (_, i) => i + 1);
const T32 = Array.from({ length: 32 }, (_, i) => i + 1);

function ctx(type: PublisherType = 'vLLM', over: Partial<DecodeContext['reg']> = {}): DecodeContext {
  return decodeContext({
    type,
    model: 'm',
    blockSize: 16,
    tenant: 't',
    loraName: null,
    additionalSalt: null,
    backendId: 'b',
    dpRank: 0,
    ...over,
  });
}

function run(c: DecodeContext, events: unknown[], rank: number | null = 0, ts: unknown = 1757500000.25): DecodedBatch {
  const body = rank === null ? [ts, events] : [ts, events, rank];
  const r = decodePayload(encode(body, { useBigInt64: true }), c);
  if (!r.ok) throw new Error(r.error);
  return plainBatch(r.batch);
}

const one = (c: DecodeContext, ev: unknown, rank: number | null = 0) => run(c, [ev], rank);
const st = (b: DecodedBatch, i = 0) => b.events[i] as StoredEvent;

describe('vLLM positional generations', () => {
  const head = ['BlockStored', [H1, H2], null, T32, 16];
  const cases: Array<[string, unknown[], string | null]> = [
    ['after #37688, before #40984', [...head, null, 'GPU', null, [null, null], 0], 'GPU'],
    ['after #33304, before #37688', [...head, null, 'GPU', null, [null, null]], 'GPU'],
    ['v0.14..v0.1x (lora_name)', [...head, null, 'GPU', null], 'GPU'],
    ['v0.10.2..v0.13 (medium)', [...head, null, 'CPU'], 'CPU'],
    ['v0.9.x', [...head, null], null],
    [
      'longer than known (future field)',
      [...head, null, 'GPU', null, [null, null], 0, 'full_attention', null, 'LOCAL', 'x', 'y'],
      'GPU',
    ],
  ];
  for (const [name, ev, medium] of cases) {
    it(`BlockStored ${name}`, () => {
      const b = one(ctx(), ev);
      expect(b.errors).toBe(0);
      expect(st(b)).toMatchObject({
        event_type: 'stored',
        seq_hashes: [H1, H2],
        token_ids: T32,
        medium,
        block_size: 16,
        parent_hash: null,
      });
    });
  }

  it('BlockRemoved with and without medium/group', () => {
    expect(one(ctx(), ['BlockRemoved', [H2], 'GPU', 0]).events[0]).toMatchObject({
      event_type: 'removed',
      seq_hashes: [H2],
      medium: 'GPU',
    });
    expect(one(ctx(), ['BlockRemoved', [H2], 'GPU']).events[0]).toMatchObject({ medium: 'GPU' });
    expect(one(ctx(), ['BlockRemoved', [H2]]).events[0]).toMatchObject({ medium: null });
  });
});

describe('vLLM map form', () => {
  const base = {
    type: 'BlockStored',
    block_hashes: [H1, H2],
    parent_block_hash: null,
    token_ids: T32,
    block_size: 16,
    lora_id: null,
    medium: 'GPU',
    lora_name: null,
  };

  it('tolerates later and unknown keys (locality, ownership, session_id, event_version, typed extra keys)', () => {
    const b = one(ctx(), {
      ...base,
      extra_keys: [null, null],
      group_idx: 0,
      kv_cache_spec_kind: 'full_attention',
      locality: 'LOCAL',
      ownership: 'x',
      session_id: 's',
      event_version: 2,
      brand_new: [1],
    });
    expect(b.errors + b.skipped).toBe(0);
    expect(st(b).seq_hashes).toEqual([H1, H2]);
  });

  it('reads raw digest bytes as their low 64 bits (the int form)', () => {
    const d0 = Buffer.from('202da172482d928bbc42ab25b0151e2b895f13f41002e27b2ceabcfae6d332ea', 'hex');
    const d1 = Buffer.from('4a0a393805c6d2f0ed831000d41bb65980336c4c04895d5e26470bbec927f5bf', 'hex');
    expect(st(one(ctx(), { ...base, block_hashes: [d0, d1] })).seq_hashes).toEqual([H1, H2]);
  });

  it('accepts signed hashes and a parent above 2^63', () => {
    const b = one(ctx(), { ...base, block_hashes: [-1n, -2], parent_block_hash: 2n ** 64n - 5n, token_ids: T32 });
    expect(st(b)).toMatchObject({
      seq_hashes: [2n ** 64n - 1n, 2n ** 64n - 2n],
      parent_hash: 2n ** 64n - 5n,
      base_block_idx: null,
    });
  });

  it('takes the LoRA from the event, and an unnamed lora_id only from the registration', () => {
    expect(st(one(ctx(), { ...base, lora_id: 3, lora_name: 'sql', extra_keys: [['sql'], ['sql']] }))).toMatchObject({
      lora_name: 'sql',
      seq_hashes: [H1, H2],
    });
    expect(
      st(one(ctx(), { ...base, extra_keys: [[{ type: 'lora', name: 'sql' }], null], lora_name: 'sql' })).seq_hashes,
    ).toHaveLength(2);
    expect(one(ctx(), { ...base, lora_id: 3 }).skipped).toBe(1);
    expect(st(one(ctx('vLLM', { loraName: 'sql' }), { ...base, lora_id: 3 })).lora_name).toBe('sql');
    // An explicit null lora_name is the base model even when the registration names an adapter.
    expect(st(one(ctx('vLLM', { loraName: 'sql' }), base)).lora_name).toBe(null);
    // Schemas without lora_name (v0.9) take the registration's.
    expect(st(one(ctx('vLLM', { loraName: 'sql' }), ['BlockStored', [H1], null, T16, 16, null])).lora_name).toBe('sql');
  });

  it('indexes blocks up to the first one whose extra_keys the router cannot hash', () => {
    const mm = one(ctx(), { ...base, extra_keys: [null, [['img-hash', -3]]] });
    expect(st(mm)).toMatchObject({ seq_hashes: [H1], token_ids: T16 });
    // A lone string on block 0 is vLLM's cache_salt: indexed in the salted namespace.
    const salted = one(ctx(), { ...base, extra_keys: [['tenant-a'], null] });
    expect(salted.events).toHaveLength(1);
    expect(st(salted)).toMatchObject({ additional_salt: 'tenant-a', token_ids: base.token_ids });
    // Keys that are not a lone salt (an image on blocks 0 and 1) stop indexing at block 0.
    const mm0 = one(ctx(), { ...base, extra_keys: [['img-a'], ['img-a']] });
    expect(mm0.skipped).toBe(1);
  });

  it('sends full-attention groups to the index and tags sliding-window and Mamba groups, learning kinds from BlockStored', () => {
    const c = ctx();
    // A sliding-window kind without a window cannot be ruled on: skipped.
    expect(one(c, { ...base, group_idx: 1, kv_cache_spec_kind: 'sliding_window' }).skipped).toBe(1);
    const sw = one(c, {
      ...base,
      group_idx: 1,
      kv_cache_spec_kind: 'sliding_window',
      kv_cache_spec_sliding_window: 128,
    });
    expect(st(sw).group).toEqual({ idx: 1, kind: 'sliding_window', window: 128, blockSize: 16 });
    expect(st(sw).seq_hashes).toEqual([H1, H2]);
    expect(one(c, { ...base, group_idx: 0, kv_cache_spec_kind: 'full_attention' }).events).toHaveLength(1);
    expect(st(one(c, { ...base, group_idx: 0, kv_cache_spec_kind: 'full_attention' })).group).toBeUndefined();
    expect(st(one(c, { ...base, group_idx: 2, kv_cache_spec_kind: 'mla_attention' })).group).toBeUndefined();
    const mamba = one(c, { ...base, group_idx: 3, kv_cache_spec_kind: 'mamba' });
    expect(st(mamba).group).toEqual({ idx: 3, kind: 'mamba', window: 0, blockSize: 16 });
    expect(one(c, { ...base, group_idx: 4, kv_cache_spec_kind: 'chunked_local_attention' }).skipped).toBe(1);
    // Removals carry only group_idx: the learned kind decides.
    const r1 = one(c, { type: 'BlockRemoved', block_hashes: [H1], medium: 'GPU', group_idx: 1 });
    expect((r1.events[0] as RemovedEvent).group?.kind).toBe('sliding_window');
    expect(
      (one(c, { type: 'BlockRemoved', block_hashes: [H1], medium: 'GPU', group_idx: 2 }).events[0] as RemovedEvent)
        .group,
    ).toBeUndefined();
    expect((one(c, ['BlockRemoved', [H1], 'GPU', 3]).events[0] as RemovedEvent).group?.kind).toBe('mamba');
    expect(one(c, { type: 'BlockRemoved', block_hashes: [H1], medium: 'GPU', group_idx: 4 }).skipped).toBe(1);
    expect(one(c, { type: 'BlockRemoved', block_hashes: [H1], medium: 'GPU', group_idx: 7 }).skipped).toBe(1); // never seen
    expect(one(c, { ...base, group_idx: 5 }).skipped).toBe(1); // no kind, not group 0
    expect(one(ctx(), { ...base, group_idx: 0 }).events).toHaveLength(1); // no kind, group 0
    expect(one(c, { ...base, group_idx: 1, kv_cache_spec_sliding_window: -1 }).errors).toBe(1);
  });

  it('reads the group fields of the positional form too (v0.2x: ..., group_idx, kind, window)', () => {
    const c = ctx();
    const b = one(c, ['BlockStored', [H1, H2], null, T32, 16, null, 'GPU', null, null, 1, 'sliding_window', 4096]);
    expect(st(b).group).toEqual({ idx: 1, kind: 'sliding_window', window: 4096, blockSize: 16 });
  });

  it('splits an inflated group block size like the prefix and expands its removals by the group ratio', () => {
    const c = ctx('vLLM', { blockSize: 8 });
    const b = one(c, { ...base, block_size: 16, group_idx: 1, kv_cache_spec_kind: 'mamba' });
    expect(st(b)).toMatchObject({
      block_size: 8,
      seq_hashes: [subBlockId(H1, 0), H1, subBlockId(H2, 0), H2],
      group: { idx: 1, kind: 'mamba', window: 0, blockSize: 16 },
    });
    const r = one(c, { type: 'BlockRemoved', block_hashes: [H2], medium: 'GPU', group_idx: 1 });
    expect((r.events[0] as RemovedEvent).seq_hashes).toEqual([subBlockId(H2, 0), H2]);
    // A group block size that is not a multiple of the registered one cannot be placed: skipped.
    expect(one(ctx('vLLM', { blockSize: 12 }), { ...base, group_idx: 1, kv_cache_spec_kind: 'mamba' }).skipped).toBe(1);
  });

  it('reduces EAGLE [t, t_next] pairs to the block tokens', () => {
    const pairs = T32.map((t) => [t, t + 1]);
    expect(st(one(ctx(), { ...base, token_ids: pairs }))).toMatchObject({ token_ids: T32, seq_hashes: [H1, H2] });
    expect(one(ctx(), { ...base, token_ids: [[1, 2, 3]] }).errors).toBe(1);
  });

  it('splits engine blocks that are a multiple of the registered size, and expands their removals', () => {
    const c = ctx('vLLM', { blockSize: 8 });
    const b = one(c, { ...base, block_size: 16 });
    expect(st(b)).toMatchObject({
      block_size: 8,
      token_ids: T32,
      seq_hashes: [subBlockId(H1, 0), H1, subBlockId(H2, 0), H2],
    });
    const r = one(c, ['BlockRemoved', [H2], 'GPU', 0]);
    expect(r.events).toHaveLength(1);
    expect((r.events[0] as RemovedEvent).seq_hashes).toEqual([subBlockId(H2, 0), H2]);
  });

  it('fans a removal out to every LoRA/salt namespace the stream stored into', () => {
    const c = ctx();
    one(c, { ...base, lora_name: 'sql', extra_keys: [['sql'], ['sql']] });
    const r = one(c, { type: 'BlockRemoved', block_hashes: [H1], medium: 'GPU' });
    expect(r.events.map((e) => e.lora_name).sort()).toEqual(['sql', null].sort());
  });

  it('counts malformed events and skips unknown tags without dropping the rest of the batch', () => {
    const b = run(ctx(), [
      { ...base, block_hashes: ['nope'] },
      { ...base, token_ids: [-1] },
      { ...base, block_size: 0 },
      { ...base, medium: 5 },
      ['Ignored', 1],
      { type: 'SomethingNew' },
      42,
      base,
    ]);
    expect(b.errors).toBe(5);
    expect(b.skipped).toBe(2);
    expect(b.events).toHaveLength(1);
    expect(b.firstError).toMatch(/block_hashes/);
  });

  it('takes the batch rank over the registration, and tolerates a map-shaped batch', () => {
    expect(one(ctx('vLLM', { dpRank: 2 }), base, 5).events[0].dp_rank).toBe(5);
    expect(one(ctx('vLLM', { dpRank: 2 }), base, null).events[0].dp_rank).toBe(2);
    const r = plainResult(
      decodePayload(encode({ ts: 1757500000.25, events: [base], data_parallel_rank: 4 }, { useBigInt64: true }), ctx()),
    );
    expect(r.ok && r.batch.events[0]).toMatchObject({ dp_rank: 4, timestamp: 1757500000250 });
  });

  it('rejects payloads that are not batches without throwing', () => {
    for (const v of [1, 'x', null, [1], { ts: 1 }, [1, 2, 3]]) expect(decodePayload(encode(v), ctx()).ok).toBe(false);
    expect(decodePayload(new Uint8Array([0x93, 0xcb]), ctx()).ok).toBe(false);
    expect(decodePayload(new Uint8Array([0x91, 0xc0, 0xc0]), ctx()).ok).toBe(false); // trailing bytes
  });
});

describe('SGLang', () => {
  const h = -4_611_686_018_427_387_904n; // signed i64 from the first 8 bytes of SHA-256

  it('decodes positional events with signed hashes, HiCache media and the salted 8th element', () => {
    const c = ctx('SGLang');
    const b = run(c, [
      ['BlockStored', [h], null, T16, 16, null, 'CPU_PINNED'],
      ['BlockStored', [h + 1n], h, T16, 16, null, 'GPU', { cache_salt: 'tenant-a' }],
      ['BlockRemoved', [h], 'CPU_TIER1'],
      ['BlockStored', [h], null, T16, 16, null],
    ]);
    expect(b.errors).toBe(0);
    expect(st(b, 0)).toMatchObject({
      seq_hashes: [BigInt.asUintN(64, h)],
      medium: 'CPU_PINNED',
      additional_salt: null,
    });
    expect(st(b, 1)).toMatchObject({ parent_hash: BigInt.asUintN(64, h), additional_salt: 'tenant-a' });
    expect(b.events.filter((e) => e.event_type === 'removed').map((e) => e.medium)).toEqual(['CPU_TIER1', 'CPU_TIER1']); // fanned out to 2 salts
    expect(st(b, b.events.length - 1).medium).toBe(null);
  });

  it('decodes map events with cache_salt and an attn_dp_rank map batch, and EAGLE bigrams', () => {
    const r = plainResult(
      decodePayload(
        encode(
          {
            ts: 1.5,
            attn_dp_rank: 1,
            events: [
              {
                type: 'BlockStored',
                block_hashes: [h],
                parent_block_hash: null,
                token_ids: T16.map((t) => [t, t + 1]),
                block_size: 16,
                lora_id: null,
                medium: 'GPU',
                cache_salt: 's',
              },
            ],
          },
          { useBigInt64: true },
        ),
        ctx('SGLang'),
      ),
    );
    expect(r.ok && r.batch.events[0]).toMatchObject({
      dp_rank: 1,
      additional_salt: 's',
      token_ids: T16,
      timestamp: 1500,
    });
  });
});

describe('LMCache', () => {
  it('splits 256-token chunks into registered blocks and keeps lowercase media', () => {
    const tokens = Array.from({ length: 256 }, (_, i) => i);
    const c = ctx('LMCache');
    const b = one(c, ['BlockStored', [-7], null, tokens, 256, null, 'cpu', null]);
    const e = st(b);
    expect(e).toMatchObject({ medium: 'cpu', block_size: 16, token_ids: tokens });
    expect(e.seq_hashes).toHaveLength(16);
    expect(e.seq_hashes[15]).toBe(BigInt.asUintN(64, -7n));
    // The final partial chunk keeps its complete blocks under derived ids only.
    const tail = st(one(c, ['BlockStored', [-8], -7, tokens.slice(0, 100), 100, null, 'cpu', null]));
    expect(tail.seq_hashes).toEqual([0, 1, 2, 3, 4, 5].map((i) => subBlockId(BigInt.asUintN(64, -8n), i)));
    expect(tail.token_ids).toHaveLength(96);
    expect(tail.parent_hash).toBe(BigInt.asUintN(64, -7n));
  });
});

describe('Mooncake standardized events', () => {
  const stored = {
    event_id: 42,
    timestamp: 1739145600000,
    event_type: 'stored',
    model_name: 'llama',
    block_size: 64,
    additional_salt: null,
    lora_name: null,
    tenant_id: 'default',
    backend_id: 'store-0',
    medium: 'cpu',
    dp_rank: 0,
    seq_hashes: [2n ** 63n + 1n, 9876543210],
    base_block_idx: 5,
    parent_hash: 9999999999,
    token_ids: null,
  };

  it('decodes a full envelope as is, pinned to the registration tenant', () => {
    const b = one(ctx('Mooncake'), stored);
    const want: KvEvent = {
      model_name: 'llama',
      block_size: 64,
      additional_salt: null,
      lora_name: null,
      tenant_id: 't', // the registration's tenant: a publisher cannot write into another tenant
      backend_id: 'store-0',
      medium: 'cpu',
      dp_rank: 0,
      event_id: 42n,
      timestamp: 1739145600000,
      event_type: 'stored',
      seq_hashes: [2n ** 63n + 1n, 9876543210n],
      base_block_idx: 5,
      parent_hash: 9999999999n,
      token_ids: null,
    };
    expect(b.events).toEqual([want]);
  });

  it('fills omitted fields from the registration and accepts the legacy aliases', () => {
    const c = ctx('Mooncake', { backendId: 'mc', additionalSalt: 'w8a8' });
    const r = plainResult(decodePayload(encode({ type: 'removed', block_hashes: [7], event_id: 3 }), c));
    expect(r.ok && r.batch.events).toEqual([
      {
        model_name: 'm',
        block_size: 16,
        additional_salt: 'w8a8',
        lora_name: null,
        tenant_id: 't',
        backend_id: 'mc',
        medium: null,
        dp_rank: 0,
        event_id: 3n,
        timestamp: null,
        event_type: 'removed',
        seq_hashes: [7n],
        base_block_idx: null,
      },
    ]);
    const list = plainResult(
      decodePayload(
        encode([
          { event_type: 'cleared', medium: 'gpu' },
          { event_type: 'stored', seq_hashes: [1], token_ids: T16 },
        ]),
        c,
      ),
    );
    expect(list.ok && list.batch.events.map((e) => e.event_type)).toEqual(['cleared', 'stored']);
    expect(list.ok && (list.batch.events[1] as StoredEvent).token_ids).toEqual(T16);
  });

  it('hands vLLM-tagged events on a Mooncake stream to the vLLM adapter, and counts bad envelopes', () => {
    const b = run(ctx('Mooncake'), [
      {
        type: 'BlockStored',
        block_hashes: [H1],
        parent_block_hash: null,
        token_ids: T16,
        block_size: 16,
        lora_id: null,
        medium: 'GPU',
        lora_name: null,
      },
      { ...stored, event_id: -1 },
      { ...stored, seq_hashes: 'x' },
      { ...stored, event_type: 'teleported' },
    ]);
    expect(st(b)).toMatchObject({ event_id: null, token_ids: T16, seq_hashes: [H1] });
    expect(b.errors).toBe(2);
    expect(b.skipped).toBe(1);
  });
});
