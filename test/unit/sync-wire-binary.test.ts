// The binary form of add, prefill and free (`serve --workers`) against the JSON form every replica
// reads: the same message decoded from either, and corrupted bytes refused or decoded, never a crash.
import { describe, expect, it } from 'vitest';
import {
  decodeSync,
  encodeSync,
  encodeSyncBinary,
  isBinaryKind,
  type SyncMessage,
} from '../../src/cluster/sync-wire.js';
import { mulberry32 } from '../../src/common/prng.js';

const rand = mulberry32(20261125);
const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)];
const int = (max: number) => Math.floor(rand() * max);
const STRINGS = [
  '',
  'e0',
  'router-7',
  'Qwen/Qwen3-0.6B',
  'ünïcødé',
  '日本語のモデル',
  'a"quote\\back',
  'tab\tnew\nline',
  '🦀',
  'x'.repeat(300),
];
const u64 = (): bigint => (BigInt(int(2 ** 32)) << 32n) | BigInt(int(2 ** 32));

function randomMessage(seq: number): SyncMessage {
  const head = { router: pick(STRINGS) || 'r', incarnation: pick(['i1', 'deadbeef', 'ü']), seq };
  switch (pick(['add', 'add', 'prefill', 'free', 'free'] as const)) {
    case 'add': {
      const blocks = BigUint64Array.from({ length: pick([0, 1, 3, 64, 200]) }, () =>
        pick([0n, 1n, (1n << 53n) + 1n, (1n << 64n) - 1n, u64()]),
      );
      const ns = {
        model: pick(STRINGS),
        blockSize: 1 + int(64),
        loraName: pick([null, 'adapter-a', '']),
        salt: pick([null, 'salt', '🧂']),
        tenant: pick(STRINGS),
      };
      const touched = pick([undefined, 0, 1, 17]);
      const context = pick([undefined, 0, 3600, 30_000]);
      return {
        ...head,
        kind: 'add',
        id: pick(STRINGS),
        instance: pick(STRINGS),
        dpRank: int(8),
        ns,
        blocks,
        prefillTokens: int(100_000),
        speculativeTtlMs: pick([0, 2000, 30_000]),
        ...(touched === undefined ? {} : { touchedBlocks: touched }),
        ...(context === undefined ? {} : { contextTokens: context }),
      };
    }
    case 'prefill':
      return { ...head, kind: 'prefill', id: pick(STRINGS) };
    case 'free': {
      const failed = rand() < 0.3 ? { failed: true } : {};
      return rand() < 0.5
        ? { ...head, kind: 'free', id: pick(STRINGS), ...failed }
        : {
            ...head,
            kind: 'free',
            id: pick(STRINGS),
            rate: {
              workTokens: int(50_000),
              ...(rand() < 0.5 ? { attentionWork: pick([0, 1.5, 8e7, 4.5e8]), decodingContext: int(400_000) } : {}),
              decoding: int(30),
              ttftMs: pick([0, 0.25, 41.5, 1e6]),
              pool: pick(STRINGS),
            },
            ...failed,
          };
    }
  }
}

describe('binary sync wire', () => {
  it('decodes to exactly what the JSON form decodes to', () => {
    for (let seq = 1; seq <= 2000; seq++) {
      const m = randomMessage(seq);
      const bin = encodeSyncBinary(m)!;
      expect(bin[0]).not.toBe('{'.charCodeAt(0));
      expect(decodeSync(bin)).toEqual(decodeSync(encodeSync(m)));
    }
  });

  it('carries the context terms of a rate sample and of a booking in both forms', () => {
    const rate = {
      workTokens: 2400,
      attentionWork: 3.52e6,
      decoding: 1,
      decodingContext: 1000,
      ttftMs: 100,
      pool: 'm',
    };
    const ns = { model: 'm', blockSize: 16, loraName: null, salt: null, tenant: 'default' };
    for (const m of [
      { router: 'p0', incarnation: 'i', seq: 1, kind: 'free', id: 'b', rate },
      {
        ...{ router: 'p0', incarnation: 'i', seq: 2, kind: 'add', id: 'b', instance: 'e0', dpRank: 0, ns },
        ...{ blocks: BigUint64Array.of(1n), prefillTokens: 400, contextTokens: 3600, speculativeTtlMs: 0 },
      },
    ] as SyncMessage[]) {
      expect(decodeSync(encodeSyncBinary(m)!)).toEqual(m);
      expect(decodeSync(encodeSync(m))).toEqual(m);
    }
  });

  it("carries a failed attempt's free in both forms, with or without a rate sample", () => {
    const rate = { workTokens: 100, decoding: 1, ttftMs: 12, pool: 'm' };
    for (const m of [
      { router: 'p0', incarnation: 'i', seq: 1, kind: 'free', id: 'b', failed: true },
      { router: 'p0', incarnation: 'i', seq: 2, kind: 'free', id: 'b', rate, failed: true },
      { router: 'p0', incarnation: 'i', seq: 3, kind: 'free', id: 'b', rate },
    ] as SyncMessage[]) {
      expect(decodeSync(encodeSyncBinary(m)!)).toEqual(m);
      expect(decodeSync(encodeSync(m))).toEqual(m);
    }
    // A reader before the field sees a plain free; a flag byte it does not know is refused.
    expect(
      JSON.parse(
        new TextDecoder().decode(
          encodeSync({ router: 'p0', incarnation: 'i', seq: 1, kind: 'free', id: 'b', failed: true }),
        ),
      ),
    ).toMatchObject({ t: 'free', id: 'b', failed: true });
    const bin = Uint8Array.from(encodeSyncBinary({ router: 'p0', incarnation: 'i', seq: 1, kind: 'free', id: 'b' })!);
    bin[bin.length - 1] = 4;
    expect(() => decodeSync(bin)).toThrow(/unknown free flags 4/);
  });

  it('keeps u64 hashes past 2^53 exact, and is smaller than JSON for a booking', () => {
    const blocks = BigUint64Array.from(
      { length: 64 },
      (_, i) => (1n << 63n) + ((BigInt(i) * 0x9e3779b97f4a7c15n) % (1n << 63n)),
    );
    const m: SyncMessage = {
      router: 'p0',
      incarnation: 'i',
      seq: 1,
      kind: 'add',
      id: 'b',
      instance: 'e1',
      dpRank: 0,
      ns: { model: 'm', blockSize: 16, loraName: null, salt: null, tenant: 'default' },
      blocks,
      prefillTokens: 1024,
      speculativeTtlMs: 2000,
      touchedBlocks: 3,
    };
    const out = decodeSync(encodeSyncBinary(m)!);
    expect(out.kind === 'add' && [...out.blocks]).toEqual([...blocks]);
    expect(encodeSyncBinary(m)!.byteLength).toBeLessThan(encodeSync(m).byteLength);
  });

  it('refuses or decodes corrupted bytes, and refuses every cut', () => {
    let refused = 0;
    for (let k = 0; k < 20_000; k++) {
      const bin = Uint8Array.from(encodeSyncBinary(randomMessage(1 + int(1000)))!);
      bin[int(bin.length)] ^= 1 << int(8);
      try {
        const m = decodeSync(bin);
        expect(isBinaryKind(m.kind)).toBe(true); // a flip inside a value decodes to another valid message
      } catch (err) {
        expect(err).toBeInstanceOf(Error);
        refused++;
      }
    }
    expect(refused).toBeGreaterThan(1000);
    for (let k = 0; k < 500; k++) {
      const bin = encodeSyncBinary(randomMessage(1 + k))!;
      expect(() => decodeSync(bin.subarray(0, int(bin.length)))).toThrow();
    }
  });

  it("leaves a message with a string of 65,535 bytes or more to JSON (a request's cache_salt can be one)", () => {
    const ns = { model: 'm', blockSize: 16, loraName: null, salt: 's'.repeat(65_535), tenant: 'default' };
    const m: SyncMessage = {
      router: 'p0',
      incarnation: 'i',
      seq: 1,
      kind: 'add',
      id: 'b',
      instance: 'e1',
      dpRank: 0,
      ns,
      blocks: BigUint64Array.of(1n),
      prefillTokens: 1,
      speculativeTtlMs: 0,
    };
    expect(encodeSyncBinary(m)).toBeNull();
    expect(encodeSyncBinary({ ...m, ns: { ...ns, salt: 's'.repeat(65_534) } })).not.toBeNull();
    expect(decodeSync(encodeSync(m))).toEqual(m);
  });

  it('has no form for the other kinds, which stay JSON', () => {
    expect(isBinaryKind('heartbeat')).toBe(false);
    expect(() =>
      encodeSyncBinary({ router: 'a', incarnation: 'i', seq: 1, kind: 'heartbeat', url: null, bookings: 0 }),
    ).toThrow(/no binary form/);
  });
});
