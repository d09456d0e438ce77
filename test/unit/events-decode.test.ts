// Every captured frame in the wire-format reference decodes byte-exact to the expected normalized
// events; the ZMQ framing and replay layouts parse as documented.
import { decode } from '@msgpack/msgpack';
import { describe, expect, it } from 'vitest';
import { parseJson } from '../../src/common/json.js';
import {
  decodeContext,
  decodeMessage,
  decodePayload,
  parseLiveFrames,
  parseReplayFrames,
} from '../../src/events/decode/index.js';
import type { KvEvent } from '../../src/indexer/kv-event.js';
import { plainBatch } from '../helpers/plain-events.js';
import { fixture } from '../helpers/fixtures.js';

interface Example {
  title: string;
  bytes: number;
  json: string;
  payload: Buffer;
}

function examples(): Example[] {
  const lines = fixture('vllm-event-frames.txt')
    .split('\n')
    .filter((l) => l.trim() !== '');
  const out: Example[] = [];
  for (let i = 0; i < lines.length; i += 3) {
    const m = /^== (.*) \((\d+) bytes\)$/.exec(lines[i]);
    if (!m) throw new Error(`unexpected line ${lines[i]}`);
    out.push({
      title: m[1],
      bytes: Number(m[2]),
      json: lines[i + 1],
      payload: Buffer.from(lines[i + 2].trim(), 'hex'),
    });
  }
  return out;
}

// Registration: rank 3, so the batch rank (0) visibly overrides it and the 2-tuple batch keeps it.
const REG = {
  type: 'vLLM' as const,
  model: 'qwen',
  blockSize: 16,
  tenant: 'default',
  loraName: null,
  additionalSalt: null,
  backendId: 'w0',
  dpRank: 3,
};
const H1 = 3236607068019569386n;
const H2 = 2758186210834249151n;
const TOKENS = Array.from({ length: 32 }, (_, i) => i + 1);
const TS = 1757500000250;

const id = (medium: string | null, dpRank = 0) => ({
  model_name: 'qwen',
  block_size: 16,
  additional_salt: null,
  lora_name: null,
  tenant_id: 'default',
  backend_id: 'w0',
  medium,
  dp_rank: dpRank,
  event_id: null,
  timestamp: TS,
});
const stored = (medium: string | null, dpRank = 0): KvEvent => ({
  ...id(medium, dpRank),
  event_type: 'stored',
  seq_hashes: [H1, H2],
  base_block_idx: 0,
  parent_hash: null,
  token_ids: TOKENS,
});
const removed: KvEvent = { ...id('GPU'), event_type: 'removed', seq_hashes: [H2], base_block_idx: null };
const cleared: KvEvent = { ...id(null), event_type: 'cleared' };

const EXPECTED: Record<string, KvEvent[]> = {
  'map BlockStored batch': [stored('GPU')],
  'map BlockRemoved batch': [removed],
  'map AllBlocksCleared batch': [cleared],
  'array BlockStored batch (pre-#42892, post-#40984)': [stored('GPU')],
  'array BlockRemoved batch (pre-#42892, post-#37688)': [removed],
  'array AllBlocksCleared batch': [cleared],
  'array v0.9.0 style 2-tuple batch': [stored(null, 3)],
};

describe('vllm-event-frames.txt', () => {
  const all = examples();

  it('holds the seven documented examples', () => {
    expect(all.map((e) => e.title)).toEqual(Object.keys(EXPECTED));
  });

  for (const ex of all) {
    it(`decodes "${ex.title}" exactly`, () => {
      expect(ex.payload.length).toBe(ex.bytes);
      // The fixture is self-consistent: the hex is the msgpack of the JSON line (u64 kept exact).
      expect(decode(ex.payload, { useBigInt64: true })).toEqual(normalizeJson(parseJson(ex.json)));
      const r = decodePayload(ex.payload, decodeContext(REG));
      expect(r.ok).toBe(true);
      if (!r.ok) return;
      expect(r.batch.errors).toBe(0);
      expect(r.batch.skipped).toBe(0);
      expect(plainBatch(r.batch).events).toEqual(EXPECTED[ex.title]);
    });
  }

  it('decodes the same payload inside 3-frame and 2-frame ZMQ messages', () => {
    const p = all[0].payload;
    const seq = Buffer.from('00000000000000ff', 'hex');
    const three = decodeMessage([Buffer.from('kv'), seq, p], decodeContext(REG));
    expect(three.ok && three.frame).toMatchObject({ topic: 'kv', seq: 255n });
    expect(three.ok && plainBatch(three.batch).events).toEqual([stored('GPU')]);
    const two = decodeMessage([Buffer.alloc(0), p], decodeContext(REG));
    expect(two.ok && two.frame.seq).toBe(null);
    expect(two.ok && plainBatch(two.batch).events).toEqual([stored('GPU')]);
  });
});

// msgpack decodes small ints as numbers and u64 as bigint; the lossless JSON parser returns bigint
// only above 2^53. Align the JSON side: ints >= 2^32 become bigint (msgpack used uint64 for them).
function normalizeJson(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(normalizeJson);
  if (typeof v === 'number' && Number.isInteger(v) && v >= 2 ** 32) return BigInt(v);
  if (v !== null && typeof v === 'object' && typeof v !== 'bigint') {
    return Object.fromEntries(Object.entries(v as Record<string, unknown>).map(([k, x]) => [k, normalizeJson(x)]));
  }
  return v;
}

describe('ZMQ framing', () => {
  const seq = (n: bigint) => {
    const b = Buffer.alloc(8);
    b.writeBigUInt64BE(n);
    return b;
  };
  const E = Buffer.alloc(0);
  const FF = Buffer.alloc(8, 0xff);

  it('parses live messages and rejects bad ones', () => {
    expect(parseLiveFrames([E, seq(7n), Buffer.from([1])])).toMatchObject({ ok: true, value: { topic: '', seq: 7n } });
    expect(parseLiveFrames([E, seq(2n ** 64n - 2n), E])).toMatchObject({ ok: true, value: { seq: 2n ** 64n - 2n } });
    expect(parseLiveFrames([E, Buffer.from([1, 2]), E])).toMatchObject({ ok: false });
    expect(parseLiveFrames([E])).toMatchObject({ ok: false });
    expect(parseLiveFrames([E, E, E, E])).toMatchObject({ ok: false });
  });

  it('parses both replay layouts and their end markers', () => {
    const p = Buffer.from([0x90]);
    expect(parseReplayFrames([E, Buffer.from('kv'), seq(5n), p])).toMatchObject({
      ok: true,
      value: { end: false, seq: 5n },
    });
    expect(parseReplayFrames([E, seq(5n), p])).toMatchObject({ ok: true, value: { end: false, seq: 5n } });
    expect(parseReplayFrames([E, E, FF, E])).toEqual({ ok: true, value: { end: true } });
    expect(parseReplayFrames([E, FF, E])).toEqual({ ok: true, value: { end: true } });
    expect(parseReplayFrames([E, FF, p]).ok).toBe(false); // FF x 8 with a payload is not an end marker
    expect(parseReplayFrames([Buffer.from('x'), seq(1n), p]).ok).toBe(false);
    expect(parseReplayFrames([E, seq(1n)]).ok).toBe(false);
  });
});
