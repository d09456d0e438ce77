// A replica's add with a prefill or context beyond any context window is refused (JSON and binary):
// its attention work would make the worker's float sums Infinity, then NaN once freed, and every
// cost on that worker NaN until it idles.
import { describe, expect, it } from 'vitest';
import { decodeSync, encodeSync, encodeSyncBinary, type SyncMessage } from '../../src/cluster/sync-wire.js';
import { ActiveSequences } from '../../src/scheduler/active-sequences.js';

const add = (prefillTokens: number, contextTokens: number): SyncMessage => ({
  router: 'r',
  incarnation: 'i',
  seq: 1,
  kind: 'add',
  id: 'q',
  instance: 'x',
  dpRank: 0,
  ns: { model: 'm', blockSize: 16, loraName: null, salt: null, tenant: 'default' },
  blocks: BigUint64Array.of(1n, (1n << 64n) - 1n),
  prefillTokens,
  contextTokens,
  speculativeTtlMs: 0,
});

describe('sync add token counts', () => {
  for (const [wire, encode] of [
    ['JSON', encodeSync],
    ['binary', (m: SyncMessage) => encodeSyncBinary(m)!],
  ] as const)
    it(`are bounded (${wire})`, () => {
      // A long real prompt goes through, and books finite counters.
      const ok = decodeSync(encode(add(200_000, 1_000_000)));
      expect(ok).toMatchObject({ prefillTokens: 200_000, contextTokens: 1_000_000 });
      const a = new ActiveSequences();
      if (ok.kind !== 'add') throw new Error('not an add');
      a.book('q', ok.instance, ok.dpRank, ok.blocks, ok.prefillTokens, 0, '', ok.contextTokens);
      expect(Number.isFinite(a.load('x', 0).activeAttention)).toBe(true);
      // 1e308 tokens (an integer to JSON): refused, naming the field.
      expect(() => decodeSync(encode(add(10, 1e308)))).toThrow(/context_tokens must be at most/);
      expect(() => decodeSync(encode(add(1e300, 10)))).toThrow(/prefill_tokens must be at most/);
    });
});
