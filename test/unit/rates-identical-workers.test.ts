// Identical engines must be priced alike: a worker's own fit is shrunk toward its pool's (PEER_STRENGTH
// in rates.ts). The samples are what the router learned from in the fleet simulator's Mooncake run at
// 2 requests/s per engine (8 identical engines, test/fixtures/README.md). With the pull at 8, after 50
// to 300 samples the workers' predicted time for a 24,000-token prefill after 12,000 cached tokens was
// 1.12-1.26x apart (1.21-1.43x before the robust fit: one worker, whose samples were mostly long
// prompts behind a queue, fitted a lower per-token slope); kv sent it the long prompts and its
// decoding requests missed their TPOT objective.
import { describe, expect, it } from 'vitest';
import { attentionWork } from '../../src/scheduler/cost.js';
import { PrefillRates } from '../../src/scheduler/rates.js';
import { fixture } from '../helpers/fixtures.js';

const PRIOR = { tokensPerS: 20_000, overheadMs: 20 };
const WORKERS = ['e0', 'e1', 'e2', 'e3', 'e4', 'e5', 'e6', 'e7'];

describe('PrefillRates on identical workers', () => {
  it('prices a long prefill within 1.15x across the workers throughout the run (measured 1.04-1.09x; up to 1.26x with the pull at 8)', () => {
    const samples = fixture('fleet-rate-samples.jsonl')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as [string, number, number, number, number, number]);
    expect(samples.length).toBe(300);
    const r = new PrefillRates();
    const spreads: number[] = [];
    samples.forEach(([instance, work, decoding, ttftMs, attention, decodingContext], k) => {
      r.observe(instance, 0, work, decoding, ttftMs, 'm', { attentionWork: attention, decodingContext });
      if ((k + 1) % 50 !== 0) return;
      const ms = WORKERS.map((w) => {
        const x = r.rate(w, 0, PRIOR, 'm');
        return x.overheadMs + 24_000 * x.msPerToken + attentionWork(24_000, 12_000) * x.msPerAttention;
      });
      spreads.push(Math.max(...ms) / Math.min(...ms));
    });
    expect(spreads).toHaveLength(6);
    for (const s of spreads) expect(s).toBeLessThan(1.15);
  });
});
