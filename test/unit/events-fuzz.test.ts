// Bounded fuzz: >= 100k random and mutated ZMQ messages through the decoders and the ingest path
// (decode + apply into a live index). Nothing may throw, every bad frame is counted, and the index
// keeps answering correct queries for a control backend and for a clean stream applied afterwards.
import { encode } from '@msgpack/msgpack';
import { describe, expect, it } from 'vitest';
import { KvIndexWriter } from '../../src/indexer/writer.js';
import { decodeContext, decodeMessage } from '../../src/events/decode/index.js';
import { StreamIngest } from '../../src/events/listener-ingest.js';
import { NOOP_METRICS } from '../../src/events/metrics.js';
import { type PublisherType, type Registration, PUBLISHER_TYPES } from '../../src/events/registry.js';
import { parseLiveFrames } from '../../src/events/decode/frames.js';
import { TieredIndexer } from '../../src/indexer/namespaces.js';
import { mulberry32 } from '../../src/common/prng.js';
import { fixture } from '../helpers/fixtures.js';

const ITERATIONS = 100_000;
const BS = 16;
const NS = { model: 'm', blockSize: BS, loraName: null, salt: null, tenant: 'default' };

function reg(type: PublisherType, backendId: string): Registration {
  return {
    endpoint: 'tcp://127.0.0.1:1',
    replayEndpoint: null,
    type,
    model: 'm',
    loraName: null,
    tenant: 'default',
    instanceId: backendId,
    blockSize: BS,
    dpRank: 0,
    additionalSalt: null,
    topic: '',
    backendId,
    shared: false,
    key: `${backendId}|default|0`,
    status: 'active',
    lastError: null,
    registeredAt: 0,
  };
}

const referencePayloads = fixture('vllm-event-frames.txt')
  .split('\n')
  .filter((l) => /^[0-9a-f]+$/.test(l.trim()))
  .map((l) => Buffer.from(l.trim(), 'hex'));

const tokens = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);

function validPayloads(rand: () => number): Buffer[] {
  const out: Buffer[] = [...referencePayloads];
  const h = () => BigInt(Math.floor(rand() * 2 ** 52)) * 4099n;
  for (let i = 0; i < 40; i++) {
    const n = 1 + Math.floor(rand() * 4);
    const t = tokens(Math.floor(rand() * 1000), n * BS);
    const hashes = Array.from({ length: n }, h);
    const evs = [
      {
        type: 'BlockStored',
        block_hashes: hashes,
        parent_block_hash: null,
        token_ids: t,
        block_size: BS,
        lora_id: null,
        medium: 'GPU',
        lora_name: null,
        extra_keys: hashes.map(() => null),
        group_idx: 0,
        kv_cache_spec_kind: 'full_attention',
      },
      ['BlockStored', hashes, null, t, BS, null, 'CPU', null],
      ['BlockRemoved', [hashes[0]], 'GPU', 0],
      { type: 'BlockRemoved', block_hashes: [-5n], medium: 'CPU_PINNED' },
      {
        event_type: 'stored',
        event_id: i,
        seq_hashes: hashes,
        token_ids: rand() < 0.5 ? null : t,
        parent_hash: null,
        medium: 'gpu',
      },
      { event_type: 'removed', event_id: i + 1, seq_hashes: [hashes[0]] },
      ['AllBlocksCleared'],
    ];
    out.push(
      Buffer.from(
        encode([Date.now() / 1000, evs.slice(0, 1 + Math.floor(rand() * evs.length)), 0], { useBigInt64: true }),
      ),
    );
  }
  return out;
}

function mutate(p: Buffer, rand: () => number): Buffer {
  const b = Buffer.from(p);
  const k = Math.floor(rand() * 6);
  const at = () => Math.floor(rand() * Math.max(1, b.length));
  switch (k) {
    case 0: // bit flips
      for (let i = 0, n = 1 + Math.floor(rand() * 4); i < n && b.length; i++) b[at()] ^= 1 << Math.floor(rand() * 8);
      return b;
    case 1: // random bytes
      for (let i = 0, n = 1 + Math.floor(rand() * 8); i < n && b.length; i++) b[at()] = Math.floor(rand() * 256);
      return b;
    case 2: // truncate
      return b.subarray(0, at());
    case 3: // insert junk
      return Buffer.concat([
        b.subarray(0, at()),
        Buffer.from(Array.from({ length: 1 + Math.floor(rand() * 9) }, () => Math.floor(rand() * 256))),
        b.subarray(at()),
      ]);
    case 4: // msgpack type bytes that claim huge lengths
      if (b.length) b[at()] = [0xdd, 0xdf, 0xc6, 0xdb, 0xcf, 0xd3, 0xc1][Math.floor(rand() * 7)];
      return b;
    default: // splice two halves of itself
      return Buffer.concat([b.subarray(at()), b.subarray(0, at())]);
  }
}

function randomValue(rand: () => number, depth = 0): unknown {
  const r = rand();
  if (depth > 3 || r < 0.3) {
    const pick = Math.floor(rand() * 9);
    return [
      null,
      true,
      Math.floor(rand() * 100),
      -Math.floor(rand() * 2 ** 40),
      rand(),
      'BlockStored',
      'GPU',
      2n ** 64n - 1n,
      new Uint8Array([1, 2, 3]),
    ][pick];
  }
  if (r < 0.65) return Array.from({ length: Math.floor(rand() * 6) }, () => randomValue(rand, depth + 1));
  const keys = [
    'type',
    'event_type',
    'block_hashes',
    'seq_hashes',
    'token_ids',
    'block_size',
    'medium',
    'parent_block_hash',
    'group_idx',
    'events',
    'ts',
    'x',
  ];
  return Object.fromEntries(
    Array.from({ length: Math.floor(rand() * 6) }, () => [
      keys[Math.floor(rand() * keys.length)],
      randomValue(rand, depth + 1),
    ]),
  );
}

describe('decoder fuzz', () => {
  it(`survives ${ITERATIONS.toLocaleString('en-US')} random and mutated frames and the index stays correct`, () => {
    const rand = mulberry32(0xc0ffee);
    const indexer = new TieredIndexer();
    const writer = new KvIndexWriter(indexer);

    // Control: a backend with known blocks the fuzzed streams must never disturb.
    const control = new StreamIngest(reg('vLLM', 'control-backend'), { writer, metrics: NOOP_METRICS, now: Date.now });
    const ctrlTokens = tokens(5000, 4 * BS);
    const ctrlPayload = Buffer.from(
      encode(
        [
          1.0,
          [
            {
              type: 'BlockStored',
              block_hashes: [11n, 12n, 13n, 14n],
              parent_block_hash: null,
              token_ids: ctrlTokens,
              block_size: BS,
              lora_id: null,
              medium: 'GPU',
              lora_name: null,
            },
          ],
          0,
        ],
        { useBigInt64: true },
      ),
    );
    expect(control.applyPayload(ctrlPayload, false)).toEqual({ ok: true });
    const controlDevice = () =>
      indexer.queryTokens(NS, ctrlTokens, Date.now()).candidates.find((c) => c.instance === 'control-backend')?.device;
    expect(controlDevice()).toBe(4);

    const ingests = PUBLISHER_TYPES.map(
      (t) => new StreamIngest(reg(t, `fuzz-${t}`), { writer, metrics: NOOP_METRICS, now: Date.now }),
    );
    const contexts = PUBLISHER_TYPES.map((t) => decodeContext(reg(t, `pure-${t}`)));
    const valid = validPayloads(rand);
    const seq = Buffer.alloc(8);
    let frameErrors = 0;
    let decodedOk = 0;

    for (let i = 0; i < ITERATIONS; i++) {
      const kind = rand();
      let payload: Buffer;
      if (kind < 0.25)
        payload = Buffer.from(Array.from({ length: Math.floor(rand() * 200) }, () => Math.floor(rand() * 256)));
      else if (kind < 0.4) payload = Buffer.from(encode(randomValue(rand), { useBigInt64: true }));
      else if (kind < 0.45) payload = valid[Math.floor(rand() * valid.length)];
      else payload = mutate(valid[Math.floor(rand() * valid.length)], rand);
      const nFrames = rand() < 0.9 ? 3 : Math.floor(rand() * 5);
      seq.writeUInt32BE(i, 4);
      const frames = nFrames === 3 ? [Buffer.alloc(0), seq, payload] : Array.from({ length: nFrames }, () => payload);

      const which = i % PUBLISHER_TYPES.length;
      // The pure decoder...
      const d = decodeMessage(frames, contexts[which]);
      if (d.ok) decodedOk++;
      // ...and the ingest path a listener runs (decode + apply into the shared index).
      const f = parseLiveFrames(frames);
      if (!f.ok) {
        ingests[which].decodeError(f.error);
        frameErrors++;
        continue;
      }
      ingests[which].applyPayload(f.value.payload, false);
    }

    const errors = ingests.reduce((n, g) => n + g.counts.applied.decode_error, 0);
    expect(errors).toBeGreaterThan(ITERATIONS / 4); // most junk is caught and counted...
    expect(decodedOk).toBeGreaterThan(ITERATIONS / 50); // ...and many mutants still decode
    expect(frameErrors).toBeGreaterThan(0);

    // The control backend is untouched, and fuzzed streams can still be purged completely.
    expect(controlDevice()).toBe(4);
    for (const g of ingests) g.purge('unregistered');
    expect(controlDevice()).toBe(4);
    for (const t of PUBLISHER_TYPES) expect(indexer.removeBackend(`fuzz-${t}`)).toBe(0);

    // A clean stream applied after the storm is indexed exactly.
    const fresh = new StreamIngest(reg('vLLM', 'fresh'), { writer, metrics: NOOP_METRICS, now: Date.now });
    const t2 = tokens(9000, 3 * BS);
    fresh.applyPayload(
      Buffer.from(
        encode([1.0, [['BlockStored', [21n, 22n, 23n], null, t2, BS, null, 'GPU']], 0], { useBigInt64: true }),
      ),
      false,
    );
    fresh.applyPayload(Buffer.from(encode([1.0, [['BlockRemoved', [23n], 'GPU']], 0], { useBigInt64: true })), false);
    expect(indexer.queryTokens(NS, t2, Date.now()).candidates.find((c) => c.instance === 'fresh')?.device).toBe(2);
    expect(fresh.counts.applied.ok).toBe(2);
  });
});
