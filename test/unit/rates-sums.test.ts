// PrefillRates keeps its workers' fit sums in one buffer by fit id (a pool refresh re-prices them in
// order). A fit must keep learning when the buffer grows under it (more workers than it was sized
// for) and a fit id reused after its instance left must start from nothing: against a twin that never
// grows (the extra workers are in another pool, so the first pool's fit is the same in both), every
// worker of the first pool is priced the same, sample after sample.
import { describe, expect, it } from 'vitest';
import { mulberry32 } from '../../src/common/prng.js';
import { PrefillRates } from '../../src/scheduler/rates.js';

const PRIOR = { tokensPerS: 20_000, overheadMs: 20 };

describe("PrefillRates' sums buffer", () => {
  it('prices a worker the same whether other pools grew the buffer under its fit or not', () => {
    const rnd = mulberry32(7);
    const grown = new PrefillRates();
    const twin = new PrefillRates();
    const sample = (r: PrefillRates, w: string, pool: string, work: number, ttft: number) =>
      r.observe(w, 0, work, 2, ttft, pool, { attentionWork: work * 300, decodingContext: 900 });
    let compared = 0;
    for (let step = 0; step < 600; step++) {
      const w = `e${Math.floor(rnd() * 8)}`;
      const work = 500 + Math.floor(rnd() * 8000);
      const ttft = 20 + work * 0.05 * (0.8 + 0.4 * rnd());
      sample(grown, w, 'm', work, ttft);
      sample(twin, w, 'm', work, ttft);
      // Workers of another pool, in the grown one only: 300 of them, so its buffer grows several times.
      if (step < 300) sample(grown, `other${step}`, 'n', work, ttft);
      // An instance leaves and comes back: its fit id is reused, from nothing.
      if (step === 400) {
        grown.drop('e3');
        twin.drop('e3');
        grown.drop('other5');
      }
      if (step % 25 !== 24) continue;
      for (let k = 0; k < 8; k++) {
        const a = grown.rate(`e${k}`, 0, PRIOR, 'm');
        const b = twin.rate(`e${k}`, 0, PRIOR, 'm');
        expect(a).toEqual(b);
        compared++;
      }
    }
    expect(compared).toBe(8 * 24);
    // (The workers learned: their rates are their own, not the pool's.)
    const pool = twin.poolRate(PRIOR, 'm');
    expect(twin.rate('e0', 0, PRIOR, 'm')).not.toEqual(pool);
  });
});
