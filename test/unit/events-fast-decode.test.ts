// Differential test of the fast msgpack path (src/events/decode/fast-unpack.ts): decodePayload must
// give exactly what the library-only path gives (typed arrays compared as plain arrays) and leave the
// same DecodeState, for the reference frames, for thousands of random vLLM-family and standardized
// events covering the field-history variants, and for mutated payloads.
import { encode } from '@msgpack/msgpack';
import { describe, expect, it } from 'vitest';
import { mulberry32 } from '../../src/common/prng.js';
import { fastUnpack } from '../../src/events/decode/fast-unpack.js';
import {
  type DecodeContext,
  decodeContext,
  decodePayload,
  decodePayloadGeneric,
  type RegistrationDefaults,
} from '../../src/events/decode/index.js';
import { unpack } from '../../src/events/decode/msgpack.js';
import { PUBLISHER_TYPES } from '../../src/events/registry.js';
import { plainResult } from '../helpers/plain-events.js';
import { fixture } from '../helpers/fixtures.js';

const referencePayloads = fixture('vllm-event-frames.txt')
  .split('\n')
  .filter((l) => /^[0-9a-f]+$/.test(l.trim()))
  .map((l) => Buffer.from(l.trim(), 'hex'));

type Rand = () => number;
const pick = <T>(r: Rand, xs: readonly T[]): T => xs[Math.floor(r() * xs.length)];

/**
 * The library's value for a fast-decoded one: typed lists become the plain list they stand for
 * (hashes as u64, which is how every reader takes them), everything else must be identical.
 */
function asLibrary(fast: unknown, lib: unknown): unknown {
  if (fast instanceof BigUint64Array)
    return Array.isArray(lib) && lib.every((x) => typeof x === 'number' || typeof x === 'bigint')
      ? Array.from(fast).map((h, i) => (BigInt.asUintN(64, BigInt(lib[i] as number | bigint)) === h ? lib[i] : h))
      : Array.from(fast);
  if (fast instanceof Uint32Array) return Array.from(fast);
  if (Array.isArray(fast)) return fast.map((x, i) => asLibrary(x, Array.isArray(lib) ? lib[i] : undefined));
  if (fast !== null && typeof fast === 'object' && !(fast instanceof Uint8Array)) {
    const l = (lib ?? {}) as Record<string, unknown>;
    return Object.fromEntries(Object.entries(fast).map(([k, x]) => [k, asLibrary(x, l[k])]));
  }
  return fast;
}

function hash(r: Rand): bigint | number {
  switch (Math.floor(r() * 7)) {
    case 0:
      return (1n << 63n) + BigInt(Math.floor(r() * 2 ** 53)); // u64 above 2^63
    case 1:
      return -BigInt(Math.floor(r() * 2 ** 53)) - 1n; // i64 negative (SGLang)
    case 2:
      return Math.floor(r() * 200) - 100; // fixint / int8 / uint8, incl. negative
    case 3:
      return Math.floor(r() * 2 ** 32) - 2 ** 31; // int32 range
    case 4:
      return pick(r, [0n, 1n, 2n ** 64n - 1n, -(2n ** 63n), 2n ** 32n, 65535, 65536, -129, -32769]);
    default:
      return BigInt(Math.floor(r() * 2 ** 53)) * 4099n;
  }
}

function token(r: Rand): number {
  return pick(r, [
    Math.floor(r() * 128),
    Math.floor(r() * 256),
    Math.floor(r() * 65536),
    Math.floor(r() * 151_000),
    Math.floor(r() * 2 ** 32),
    0xffffffff,
  ]);
}

function tokenList(r: Rand, n: number, bs: number): unknown {
  const k = r();
  if (k < 0.04) return null;
  if (k < 0.07) return Array.from({ length: n * bs }, () => [token(r), token(r)]); // EAGLE pairs
  if (k < 0.09) return [...Array.from({ length: n * bs - 1 }, () => token(r)), pick(r, [-1, 1.5, 2 ** 32, 7n, 'x'])]; // one bad token
  if (k < 0.12) return Array.from({ length: Math.max(0, n * bs - Math.floor(r() * bs * 2)) }, () => token(r)); // short
  return Array.from({ length: n * bs }, () => token(r));
}

function hashList(r: Rand, n: number): unknown {
  const k = r();
  if (k < 0.03)
    return [...Array.from({ length: n - 1 }, () => hash(r)), pick(r, [new Uint8Array([1, 2, 3]), 1.5, 'h', null])];
  if (k < 0.05) return null;
  return Array.from({ length: n }, () => hash(r));
}

function extraKeys(r: Rand, n: number): unknown {
  const per = (): unknown =>
    pick(r, [
      null,
      null,
      ['sql'],
      ['salt-a'],
      [['mm-0', 0]],
      [{ type: 'lora', name: 'sql' }],
      ['sql', 'salt-b'],
      [],
      [7],
    ]);
  const k = r();
  if (k < 0.3) return null;
  if (k < 0.5) return Array.from({ length: n }, () => null);
  if (k < 0.6) return 'not a list';
  return Array.from({ length: n }, per);
}

const TAGS = ['BlockStored', 'BlockStoredWithMetadata', 'BlockRemoved', 'AllBlocksCleared', 'Unknown'] as const;
const MEDIA = ['GPU', 'CPU', 'cpu', 'CPU_PINNED', 'DISK', '', null, 7];
const KINDS = ['full_attention', 'sliding_window', 'mamba', 'mla_attention', null];
const VLLM_STORED_FIELDS = [
  'block_hashes',
  'parent_block_hash',
  'token_ids',
  'block_size',
  'lora_id',
  'medium',
  'lora_name',
  'extra_keys',
  'group_idx',
  'kv_cache_spec_kind',
  'kv_cache_spec_sliding_window',
  'locality',
];
const VLLM_REMOVED_FIELDS = ['block_hashes', 'medium', 'group_idx', 'locality'];

function vllmFields(r: Rand, tag: string): Record<string, unknown> {
  const n = Math.floor(r() * 5);
  const bs = pick(r, [16, 16, 16, 32, 8, 256, 48, null, 0]);
  const f: Record<string, unknown> = {
    block_hashes: hashList(r, n),
    parent_block_hash: r() < 0.5 ? null : hash(r),
    token_ids: tokenList(r, n, typeof bs === 'number' && bs > 0 ? bs : 16),
    block_size: bs,
    lora_id: pick(r, [null, null, 3, -1]),
    medium: pick(r, MEDIA),
    lora_name: pick(r, [null, null, 'sql', '', 5]),
    extra_keys: extraKeys(r, n),
    group_idx: pick(r, [null, 0, 0, 1, 2, -1]),
    kv_cache_spec_kind: pick(r, KINDS),
    kv_cache_spec_sliding_window: pick(r, [null, 4096]),
    locality: pick(r, [null, 'LOCAL']),
  };
  if (tag === 'BlockRemoved')
    return { block_hashes: f.block_hashes, medium: f.medium, group_idx: f.group_idx, locality: f.locality };
  if (tag === 'AllBlocksCleared') return { medium: f.medium };
  return f;
}

function vllmEvent(r: Rand): unknown {
  const tag = pick(r, TAGS);
  const f = vllmFields(r, tag);
  if (r() < 0.5) {
    // Map form: drop some keys (older/newer writers), add unknown ones and SGLang's cache_salt.
    const m: Record<string, unknown> = { type: tag };
    for (const [k, v] of Object.entries(f)) if (r() < 0.85) m[k] = v;
    if (r() < 0.15) m.cache_salt = pick(r, ['s', '', null]);
    if (r() < 0.15) m.session_id = pick(r, ['x', [1, 2], { a: 1 }]);
    return m;
  }
  // Positional: every field-history length, sometimes longer than known.
  const names =
    tag === 'BlockRemoved' ? VLLM_REMOVED_FIELDS : tag === 'AllBlocksCleared' ? ['medium'] : VLLM_STORED_FIELDS;
  const len = Math.floor(r() * (names.length + 3));
  const arr: unknown[] = [tag];
  for (let i = 0; i < len; i++) arr.push(i < names.length ? f[names[i]] : 'extra');
  if (tag.startsWith('BlockStored') && r() < 0.1)
    return [...arr.slice(0, 7), ...Array(Math.max(0, 7 - arr.length)).fill(null), { cache_salt: 'sg' }]; // SGLang salted 8th element
  return arr;
}

function standardEvent(r: Rand, id: number): unknown {
  const n = Math.floor(r() * 5);
  const e: Record<string, unknown> = {
    event_type: pick(r, ['stored', 'stored', 'removed', 'cleared', 'Stored', 'bogus']),
  };
  if (r() < 0.8) e.event_id = id;
  if (r() < 0.9) e[r() < 0.8 ? 'seq_hashes' : 'block_hashes'] = hashList(r, n);
  if (r() < 0.5) e.token_ids = tokenList(r, n, 16);
  if (r() < 0.5) e.parent_hash = r() < 0.5 ? null : hash(r);
  if (r() < 0.3) e.base_block_idx = pick(r, [0, 3, null, -1]);
  if (r() < 0.3) e.medium = pick(r, MEDIA);
  if (r() < 0.2) e.model_name = pick(r, ['m2', 5]);
  if (r() < 0.2) e.block_size = pick(r, [16, 32, 0]);
  if (r() < 0.1) e.dp_rank = pick(r, [1, -1]);
  if (r() < 0.1) e.timestamp = pick(r, [1.5, 1739145600000]);
  return e;
}

function batchPayload(r: Rand, mooncake: boolean, id: number): Buffer {
  const events = Array.from({ length: 1 + Math.floor(r() * 4) }, (_, i) =>
    mooncake && r() < 0.7 ? standardEvent(r, id + i) : vllmEvent(r),
  );
  const ts = pick(r, [1757500000.25, 1757500000, 1757500000250, null]);
  const k = r();
  const body =
    k < 0.2
      ? [ts, events]
      : k < 0.9
        ? [ts, events, pick(r, [0, 1, 3, null])]
        : k < 0.95
          ? { ts, events, dp_rank: 1 }
          : events;
  return Buffer.from(encode(body, { useBigInt64: true }));
}

function mutate(p: Buffer, r: Rand): Buffer {
  const b = Buffer.from(p);
  const at = () => Math.floor(r() * Math.max(1, b.length));
  switch (Math.floor(r() * 5)) {
    case 0:
      for (let i = 0, n = 1 + Math.floor(r() * 3); i < n && b.length; i++) b[at()] ^= 1 << Math.floor(r() * 8);
      return b;
    case 1:
      if (b.length)
        b[at()] = pick(r, [0xc1, 0xc4, 0xd4, 0xcb, 0xcf, 0xd3, 0xdc, 0xdf, 0xc0, 0x80, 0x90, 0xa0, 0xe0, 0x7f]);
      return b;
    case 2:
      return b.subarray(0, at());
    case 3:
      return Buffer.concat([b, Buffer.from([pick(r, [0xc0, 0x00, 0x90])])]);
    default:
      return Buffer.concat([b.subarray(0, at()), Buffer.from([Math.floor(r() * 256)]), b.subarray(at())]);
  }
}

function contexts(type: (typeof PUBLISHER_TYPES)[number], r: Rand): [DecodeContext, DecodeContext] {
  const reg: RegistrationDefaults = {
    type,
    model: 'm',
    blockSize: pick(r, [16, 16, 8, 32]),
    tenant: 't',
    loraName: pick(r, [null, 'sql']),
    additionalSalt: pick(r, [null, 'x']),
    backendId: 'b',
    dpRank: pick(r, [0, 2]),
  };
  return [decodeContext(reg), decodeContext(reg)];
}

describe('fast msgpack path', () => {
  it('decodes values exactly like the library, or declines', () => {
    const r = mulberry32(7);
    const payloads: Buffer[] = [...referencePayloads];
    for (let i = 0; i < 1500; i++) payloads.push(batchPayload(r, r() < 0.3, i));
    for (let i = 0; i < 1500; i++) payloads.push(mutate(pick(r, payloads.slice(0, 1500)), r));
    let fast = 0;
    for (const p of payloads) {
      const f = fastUnpack(p);
      let lib: unknown;
      let threw = false;
      try {
        lib = unpack(p);
      } catch {
        threw = true;
      }
      if (f === undefined) continue;
      fast++;
      expect(threw, p.toString('hex')).toBe(false);
      expect(asLibrary(f, lib)).toEqual(lib);
    }
    expect(fast).toBeGreaterThan(1500); // the valid ones (bar bytes hashes and the like) take the fast path
  });

  it('declines a token or hash list longer than the library accepts (4M elements)', () => {
    const n = (1 << 22) + 1;
    for (const key of ['token_ids', 'block_hashes']) {
      const p = Buffer.from(encode([1.5, [{ type: 'BlockStored', [key]: new Array(n).fill(1) }], 0]));
      expect(() => unpack(p)).toThrow();
      expect(fastUnpack(p)).toBeUndefined();
    }
  });

  it('the reference frames decode identically through both paths, for every publisher type', () => {
    for (const type of PUBLISHER_TYPES) {
      const [a, b] = contexts(type, mulberry32(1));
      for (const p of referencePayloads) {
        expect(fastUnpack(p)).not.toBeUndefined();
        expect(plainResult(decodePayload(p, a))).toEqual(decodePayloadGeneric(p, b));
      }
      expect(a.state).toEqual(b.state);
    }
  });

  for (const type of PUBLISHER_TYPES) {
    it(`random and mutated ${type} batches: same DecodedBatch and DecodeState as the library path`, () => {
      const r = mulberry32(0x5eed + type.length);
      let typed = 0;
      for (let round = 0; round < 20; round++) {
        const [a, b] = contexts(type, r);
        for (let i = 0; i < 250; i++) {
          const valid = batchPayload(r, type === 'Mooncake', i * 8);
          const p = r() < 0.25 ? mutate(valid, r) : valid;
          const fa = decodePayload(p, a);
          const fb = decodePayloadGeneric(p, b);
          if (
            fa.ok &&
            fa.batch.events.some((e) => e.event_type !== 'cleared' && e.seq_hashes instanceof BigUint64Array)
          )
            typed++;
          expect(plainResult(fa)).toEqual(fb);
        }
        expect(a.state).toEqual(b.state);
      }
      expect(typed).toBeGreaterThan(500);
    });
  }
});
