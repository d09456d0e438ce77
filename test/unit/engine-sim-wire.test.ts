import { decode } from '@msgpack/msgpack';
import { describe, expect, it } from 'vitest';
import { hashSpace, seqHashes } from '../../src/hashing/index.js';
import type { BlockContent } from '../../src/engine-sim/core/block.js';
import { vllmHasher } from '../../src/engine-sim/core/engine-hash.js';
import { mooncakeEncoder } from '../../src/engine-sim/events/mooncake-format.js';
import { ReplayBuffer } from '../../src/engine-sim/events/replay-buffer.js';
import { sglangEncoder } from '../../src/engine-sim/events/sglang-format.js';
import { vllmEncoder } from '../../src/engine-sim/events/vllm-format.js';
import { encodeBatch, type WireContext } from '../../src/engine-sim/events/wire.js';
import { fixture } from '../helpers/fixtures.js';

// The worked example of the wire-format reference: tokens 1..32, block size 16, sha256_cbor, PYTHONHASHSEED=0.
const FRAMES = fixture('vllm-event-frames.txt').split('\n');
const hexAfter = (title: string): string => FRAMES[FRAMES.findIndex((l) => l.startsWith(`== ${title}`)) + 2];
const TS = 1757500000.25;

function blocks(): BlockContent[] {
  const h = vllmHasher('0');
  const tokens = Uint32Array.from({ length: 32 }, (_, i) => i + 1);
  const router = seqHashes(tokens, 16, hashSpace());
  const d0 = h.digest(null, tokens.subarray(0, 16), null);
  const d1 = h.digest(d0, tokens.subarray(16), null);
  const base = { loraName: null, cacheSalt: null, extraKeys: null };
  return [
    { ...base, hash: h.id(d0), parent: null, depth: 0, tokens: tokens.slice(0, 16), routerHash: router[0] },
    {
      ...base,
      hash: h.id(d1),
      parent: h.id(d0),
      depth: 1,
      tokens: tokens.slice(16),
      routerHash: router[1],
    },
  ];
}

const ctx: WireContext = {
  blockSize: 16,
  modelName: 'm',
  dpRank: 0,
  loraIds: new Map(),
  tenantId: 'default',
  backendId: 'w0',
};
const hex = (b: Uint8Array): string => Buffer.from(b).toString('hex');

describe('vLLM wire encodings match the reference bytes', () => {
  const [b0, b1] = blocks();
  for (const layout of ['map', 'array'] as const) {
    const enc = vllmEncoder(ctx, layout);
    it(`${layout}: BlockStored, BlockRemoved, AllBlocksCleared`, () => {
      const stored = encodeBatch(TS, enc.render([{ type: 'stored', medium: 'GPU', blocks: [b0, b1] }], 0), 0);
      expect(hex(stored)).toBe(hexAfter(`${layout} BlockStored batch`));
      const removed = encodeBatch(TS, enc.render([{ type: 'removed', medium: 'GPU', blocks: [b1] }], 0), 0);
      expect(hex(removed)).toBe(hexAfter(`${layout} BlockRemoved batch`));
      expect(hex(encodeBatch(TS, enc.render([{ type: 'cleared' }], 0), 0))).toBe(
        hexAfter(`${layout} AllBlocksCleared batch`),
      );
    });
  }

  it('writes ts as float64 even when integral, and one BlockRemoved per block', () => {
    const bytes = encodeBatch(
      1757500000,
      vllmEncoder(ctx, 'map').render([{ type: 'removed', medium: 'CPU', blocks: blocks() }], 0),
      3,
    );
    expect(bytes[1]).toBe(0xcb);
    const [ts, events, rank] = decode(bytes, { useBigInt64: true }) as [number, Record<string, unknown>[], number];
    expect(ts).toBe(1757500000);
    expect(rank).toBe(3);
    expect(events.map((e) => e.block_hashes)).toEqual([[blocks()[0].hash], [blocks()[1].hash]]);
    expect(events.every((e) => e.medium === 'CPU')).toBe(true);
  });
});

describe('SGLang and Mooncake encodings', () => {
  it('sglang: one signed-hash BlockStored per page, CPU_PINNED host tier, cache_salt when salted', () => {
    const [b0, b1] = blocks();
    const salted = { ...b1, hash: (1n << 63n) + 5n, cacheSalt: 's' };
    const evs = sglangEncoder(ctx).render(
      [
        { type: 'stored', medium: 'GPU', blocks: [b0, salted] },
        { type: 'stored', medium: 'CPU', blocks: [b0] },
      ],
      0,
    ) as Record<string, unknown>[];
    expect(evs).toHaveLength(3);
    expect(evs[0]).toEqual({
      type: 'BlockStored',
      block_hashes: [b0.hash],
      parent_block_hash: null,
      token_ids: Array.from(b0.tokens),
      block_size: 16,
      lora_id: null,
      medium: 'GPU',
    });
    expect(evs[1].block_hashes).toEqual([-(1n << 63n) + 5n]);
    expect(evs[1].cache_salt).toBe('s');
    expect(evs[2].medium).toBe('CPU_PINNED');
  });

  it('mooncake: envelope, consecutive event_id per (salt, lora, medium) stream, cleared for every stream', () => {
    const [b0, b1] = blocks();
    const enc = mooncakeEncoder(ctx, ['GPU', 'CPU']);
    const evs = enc.render(
      [
        { type: 'stored', medium: 'GPU', blocks: [b0, b1] },
        { type: 'stored', medium: 'CPU', blocks: [b1] },
        { type: 'removed', medium: 'GPU', blocks: [b1] },
        { type: 'stored', medium: 'GPU', blocks: [{ ...b0, loraName: 'l' }] },
        { type: 'cleared' },
      ],
      1234.6,
    ) as Record<string, unknown>[];
    expect(evs[0]).toEqual({
      event_id: 0n,
      timestamp: 1235,
      event_type: 'stored',
      model_name: 'm',
      block_size: 16,
      additional_salt: null,
      lora_name: null,
      tenant_id: 'default',
      backend_id: 'w0',
      medium: 'gpu',
      dp_rank: 0,
      seq_hashes: [b0.hash, b1.hash],
      base_block_idx: 0,
      parent_hash: null,
      token_ids: Array.from({ length: 32 }, (_, i) => i + 1),
    });
    expect(evs.slice(1, 4).map((e) => [e.medium, e.lora_name, e.event_id])).toEqual([
      ['cpu', null, 0n],
      ['gpu', null, 1n],
      ['gpu', 'l', 0n],
    ]);
    expect(evs[2]).toMatchObject({ event_type: 'removed', seq_hashes: [b1.hash], base_block_idx: 1 });
    const cleared = evs.slice(4);
    expect(cleared.map((e) => [e.event_type, e.medium, e.lora_name, e.event_id])).toEqual([
      ['cleared', 'gpu', null, 2n],
      ['cleared', 'cpu', null, 1n],
      ['cleared', 'gpu', 'l', 1n],
    ]);
  });
});

describe('replay ring buffer', () => {
  it('keeps the last N batches in seq order and serves seq >= start', () => {
    const rb = new ReplayBuffer(3);
    for (let s = 0n; s < 5n; s++) rb.push(s, Uint8Array.of(Number(s)));
    expect([...rb.from(0n)].map(([s]) => s)).toEqual([2n, 3n, 4n]);
    expect([...rb.from(4n)].map(([s]) => s)).toEqual([4n]);
    expect([...rb.from(9n)]).toEqual([]);
  });
});
