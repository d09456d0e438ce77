// The scorer reads each candidate's load, queue head and prefill rate by dense id (a candidate list
// resolved once), from columns kept on every booking change (ActiveSequences.columns) and from
// PrefillRates' fits by id. Against the object path they replace (load(), queueHead(), workerRate()
// by name), after every step of random bookings, first tokens, frees, rate samples and instances
// leaving (ids reused), with candidate lists that change, repeat and name unknown workers.
import { describe, expect, it } from 'vitest';
import { mulberry32 } from '../../src/common/prng.js';
import {
  ActiveSequences,
  HEAD_AHEAD_ATTENTION,
  HEAD_AHEAD_TOKENS,
  HEAD_ATTENTION,
  HEAD_CREATED_AT,
  HEAD_PREFILL_TOKENS,
  HEAD_QUEUED,
  HEAD_STRIDE,
} from '../../src/scheduler/active-sequences.js';
import { attentionWork } from '../../src/scheduler/cost.js';
import { PrefillRates } from '../../src/scheduler/rates.js';

const MASK = (1n << 64n) - 1n;
const hashOf = (id: number) => (BigInt(id + 1) * 0x9e3779b97f4a7c15n) & MASK;

function scenario(seed: number, steps: number, workers = 12, drops = 0.03): number {
  const rnd = mulberry32(seed);
  const int = (n: number) => Math.floor(rnd() * n);
  const names = Array.from({ length: workers }, (_, w) => ({ instance: `i${w >> 1}`, dpRank: w & 1 }));
  const a = new ActiveSequences();
  const rates = new PrefillRates();
  const live: string[] = [];
  let next = 0;
  let nodes = 0;
  let checked = 0;
  // One list object kept (the router's), and fresh ones now and then (a subset, an unknown worker).
  const kept = names.slice();
  for (let step = 0; step < steps; step++) {
    const r = rnd();
    if (r < drops) {
      const gone = `i${int(workers >> 1)}`;
      a.dropInstance(gone);
      rates.drop(gone);
      for (let k = live.length - 1; k >= 0; k--) if (!a.get(live[k])) live.splice(k, 1);
    } else if (r < 0.45 || live.length === 0) {
      const w = names[int(names.length)];
      const blocks = BigUint64Array.from({ length: 1 + int(6) }, () => hashOf(nodes++ % 40));
      const id = `r${next++}`;
      a.book(id, w.instance, w.dpRank, blocks, int(3000) + rnd(), step, '', int(500) + 0.5, rnd() < 0.3 ? rnd() : 0);
      live.push(id);
    } else if (r < 0.7) {
      const b = a.get(live[int(live.length)])!;
      a.prefillComplete(b.id);
      rates.observe(b.instance, b.dpRank, b.prefillTokens + 1, int(4), 10 + 100 * rnd(), '', {
        attentionWork: attentionWork(b.prefillTokens, b.contextTokens),
        decodingContext: int(4) * 1000,
      });
    } else {
      const k = int(live.length);
      a.free(live[k]);
      live.splice(k, 1);
    }
    // (The ids are cached for the last list only: the kept list is mostly asked for twice in a row.)
    // (The pool's rate, a new object after every few samples: each worker's is shrunk toward it again.)
    const base = rates.poolRate();
    const lists =
      rnd() < 0.15 ? [kept, names.filter(() => rnd() < 0.6).concat([{ instance: 'unknown', dpRank: 0 }])] : [kept];
    for (const list of lists) {
      const ids = a.idsOf(list);
      const fitIds = rates.idsOf(list);
      for (let k = 0; k < list.length; k++) {
        const { instance, dpRank } = list[k];
        const id = ids[k];
        expect(a.columns.loadOf(id)).toEqual(a.load(instance, dpRank));
        const head = a.queueHead(instance, dpRank);
        const cols = a.columns;
        // The row says whether a head is queued, whatever the worker's load (the scorer reads no booking).
        if (id >= 0) expect(cols.head[id * HEAD_STRIDE + HEAD_QUEUED]).toBe(head === undefined ? 0 : 1);
        if (id >= 0 && a.load(instance, dpRank).activePrefillTokens > 0) {
          expect(cols.heads[id]).toBe(head);
          const o = id * HEAD_STRIDE;
          expect([
            cols.head[o + HEAD_CREATED_AT],
            cols.head[o + HEAD_AHEAD_TOKENS],
            cols.head[o + HEAD_AHEAD_ATTENTION],
            cols.head[o + HEAD_PREFILL_TOKENS],
            cols.head[o + HEAD_ATTENTION],
          ]).toEqual([
            head!.createdAt,
            head!.aheadTokens,
            head!.aheadAttention,
            head!.prefillTokens,
            attentionWork(head!.prefillTokens, head!.contextTokens),
          ]);
        }
        const rate = rates.rateById(fitIds[k], base);
        expect(rate).toBe(rates.workerRate(instance, dpRank, base));
        if (rate !== base) expect(rates.columns.read(fitIds[k], { ...base })).toEqual(rate);
        checked++;
      }
    }
  }
  return checked;
}

describe('load columns and rate fits by id', () => {
  it('equal the lookups by name after every booking change, rate sample and instance leaving', () => {
    let checked = 0;
    for (let seed = 1; seed <= 20; seed++) checked += scenario(seed, 150);
    expect(checked).toBeGreaterThan(20 * 150 * 12 - 1);
  });

  it("the same past the columns' first capacity (150 workers: ids and fits beyond 64)", () => {
    expect(scenario(99, 1000, 150, 0.004)).toBeGreaterThan(1000 * 150 - 1);
  });

  it('keep a load object a decision saw unchanged after the worker changes', () => {
    const a = new ActiveSequences();
    const seq = BigUint64Array.from([hashOf(1), hashOf(2)]);
    a.book('x', 'e0', 0, seq, 100, 0);
    const [id] = a.idsOf([{ instance: 'e0', dpRank: 0 }]);
    const seen = a.columns.loadOf(id);
    expect(a.columns.loadOf(id)).toBe(seen); // shared while unchanged
    a.book('y', 'e0', 0, seq, 50, 1);
    expect(seen.activePrefillTokens).toBe(100);
    expect(a.columns.loadOf(id).activePrefillTokens).toBe(150);
    a.free('x');
    a.free('y');
    expect(a.columns.loadOf(id).activeRequests).toBe(0);
    expect(a.columns.prefillTokens[id]).toBe(0);
  });
});
