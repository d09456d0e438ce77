// The held prefixes of a prompt on every worker at once (one pass over BookedBlocks, the inverted
// map of in-flight blocks) against the definition: per worker, the blocks its live bookings hold,
// counted block by block from the prompt's start. Prompts are chains of a tree (a seq hash names its
// whole prefix), booked and freed at random, with workers stopping alone, several at one block, and
// worker ids reused.
import { describe, expect, it } from 'vitest';
import { mulberry32 } from '../../src/common/prng.js';
import { ActiveSequences } from '../../src/scheduler/active-sequences.js';

const MASK = (1n << 64n) - 1n;
/** A seq hash for tree node `id` (above 2^53, as real ones mostly are). */
const hashOf = (id: number) => (BigInt(id + 1) * 0x9e3779b97f4a7c15n) & MASK;

interface Live {
  worker: number;
  blocks: bigint[];
}

function scenario(seed: number, workers: number, steps: number): { checked: number; deep: number } {
  const rnd = mulberry32(seed);
  const int = (n: number) => Math.floor(rnd() * n);
  let nodes = 0;
  // Prompts as paths of a tree: each branches off an earlier one at a random depth (often 0 or its end).
  const prompts: bigint[][] = [];
  const branch = (): bigint[] => {
    const base = prompts.length === 0 || rnd() < 0.1 ? [] : prompts[int(prompts.length)];
    const at = rnd() < 0.2 ? base.length : int(base.length + 1);
    const fresh = Array.from({ length: int(12) }, () => hashOf(nodes++));
    return [...base.slice(0, at), ...fresh];
  };
  for (let p = 0; p < 12; p++) prompts.push(branch());
  const names = Array.from({ length: workers }, (_, w) => ({ instance: `i${w >> 1}`, dpRank: w & 1 }));
  const a = new ActiveSequences();
  const live = new Map<string, Live>();
  let next = 0;
  let checked = 0;
  let deep = 0;
  for (let step = 0; step < steps; step++) {
    if (live.size > 0 && rnd() < 0.03) {
      // An instance leaves the pool: its bookings go, its workers' ids are reused.
      const gone = names[int(workers)].instance;
      a.dropInstance(gone);
      for (const [id, b] of [...live]) if (names[b.worker].instance === gone) live.delete(id);
    } else if (live.size > 0 && rnd() < 0.4) {
      // Free a random booking (sometimes every booking of a worker: its id is reused later).
      const ids = [...live.keys()];
      const victim = live.get(ids[int(ids.length)])!;
      const all = rnd() < 0.2;
      for (const id of ids)
        if (id === ids[0] || (all && live.get(id)!.worker === victim.worker)) {
          expect(a.free(id)).toBe(true);
          live.delete(id);
        }
    } else {
      // Book a prompt or a prefix of one (several workers often book the same one).
      if (rnd() < 0.3) prompts.push(branch());
      const p = prompts[int(prompts.length)];
      const blocks = rnd() < 0.3 ? p.slice(0, int(p.length + 1)) : p;
      const worker = int(workers);
      const id = `r${next++}`;
      a.book(id, names[worker].instance, names[worker].dpRank, BigUint64Array.from(blocks), 1, 0);
      live.set(id, { worker, blocks });
    }
    const held = names.map(() => new Set<bigint>());
    for (const b of live.values()) for (const h of b.blocks) held[b.worker].add(h);
    for (let q = 0; q < 3; q++) {
      const p = rnd() < 0.8 ? prompts[int(prompts.length)] : branch();
      const seq = BigUint64Array.from(p);
      const prefixes = a.heldPrefixes(seq);
      // The candidate list's order: the full list (the same list object as before) or a fresh subset with strangers.
      const list = rnd() < 0.7 ? names : [...names.filter(() => rnd() < 0.5), { instance: 'stranger', dpRank: 0 }];
      const inOrder = prefixes.inOrder(list);
      for (let w = 0; w < workers; w++) {
        let linear = 0;
        while (linear < p.length && held[w].has(p[linear])) linear++;
        expect(prefixes.of(names[w].instance, names[w].dpRank), `seed ${seed} step ${step} worker ${w}`).toBe(linear);
        const at = list.indexOf(names[w]);
        if (at >= 0) expect(inOrder[at]).toBe(linear);
        checked++;
        if (linear > 0) deep++;
      }
      if (list !== names) expect(inOrder[list.length - 1]).toBe(0);
      const w = int(workers);
      let linear = 0;
      while (linear < p.length && held[w].has(p[linear])) linear++;
      expect(a.newBlocks(names[w].instance, names[w].dpRank, seq)).toBe(p.length - linear);
    }
  }
  for (const id of live.keys()) a.free(id);
  expect(a.totals().activeBlocks).toBe(0);
  for (const p of prompts) {
    const prefixes = a.heldPrefixes(BigUint64Array.from(p));
    for (const n of names) expect(prefixes.of(n.instance, n.dpRank)).toBe(0);
  }
  return { checked, deep };
}

describe('ActiveSequences.heldPrefixes (one pass over the booked blocks)', () => {
  it('equals the block-by-block count per worker under random bookings, frees and prompts', () => {
    let checked = 0;
    let deep = 0;
    for (let seed = 1; seed <= 30; seed++) {
      const r = scenario(seed, 2 + (seed % 24), 100);
      checked += r.checked;
      deep += r.deep;
    }
    // The comparisons must have covered workers holding part of the prompt, not only empty ones.
    expect(deep).toBeGreaterThan(checked / 10);
  });

  it('tells apart workers that stop at the same block, alone, or hold the whole prompt', () => {
    const a = new ActiveSequences();
    const p = Array.from({ length: 40 }, (_, i) => hashOf(1000 + i));
    // Workers 0-3 stop at 10 together, 4 alone at 20, 5 and 6 at 30, 7 holds it all, 8 holds another prompt.
    const depths = [10, 10, 10, 10, 20, 30, 30, 40];
    depths.forEach((d, w) => {
      a.book(`a${w}`, `w${w}`, 0, BigUint64Array.from(p.slice(0, d)), 1, 0);
    });
    a.book('b8', 'w8', 0, BigUint64Array.from([hashOf(5), hashOf(6)]), 1, 0);
    // A second booking on worker 4 (refcounts): its longer prefix wins until it is freed.
    a.book('c4', 'w4', 0, BigUint64Array.from(p.slice(0, 35)), 1, 0);
    const seq = BigUint64Array.from(p);
    let held = a.heldPrefixes(seq);
    expect(depths.map((_, w) => held.of(`w${w}`, 0))).toEqual([10, 10, 10, 10, 35, 30, 30, 40]);
    expect(held.of('w8', 0)).toBe(0);
    expect(held.of('nobody', 0)).toBe(0);
    a.free('c4');
    a.free('a7');
    held = a.heldPrefixes(seq);
    expect(depths.map((_, w) => held.of(`w${w}`, 0))).toEqual([10, 10, 10, 10, 20, 30, 30, 0]);
    // Worker 7's id is reused by a newcomer holding 5 blocks.
    a.book('d9', 'w9', 0, BigUint64Array.from(p.slice(0, 5)), 1, 0);
    held = a.heldPrefixes(seq);
    expect(held.of('w9', 0)).toBe(5);
    expect(held.of('w7', 0)).toBe(0);
    expect(a.newBlocks('w0', 0, seq)).toBe(30);
  });
  it("counts a worker that holds the prompt's first block only where a booking had it later (no root list entry)", () => {
    // Workers that booked a block as a prompt's first are listed with it, so a worker not listed
    // skips its probe; the list must not answer where a holder came from elsewhere (a client-sent seq).
    const [x, y, w] = [hashOf(7001), hashOf(7002), hashOf(7003)];
    const a = new ActiveSequences();
    a.book('a', 'wa', 0, BigUint64Array.from([x, y]), 1, 0);
    a.book('b', 'wb', 0, BigUint64Array.from([w, x, y]), 1, 0);
    const names = ['wa', 'wb', 'wc'].map((instance) => ({ instance, dpRank: 0 }));
    expect([...a.heldPrefixes(BigUint64Array.from([x, y])).inOrder(names)]).toEqual([2, 2, 0]);
    // The listed worker leaves: the other still holds the prompt, and the list names nobody.
    a.free('a');
    expect([...a.heldPrefixes(BigUint64Array.from([x, y])).inOrder(names)]).toEqual([0, 2, 0]);
    a.book('c', 'wc', 0, BigUint64Array.from([x]), 1, 0);
    expect([...a.heldPrefixes(BigUint64Array.from([x, y])).inOrder(names)]).toEqual([0, 2, 1]);
    a.free('b');
    expect([...a.heldPrefixes(BigUint64Array.from([x, y])).inOrder(names)]).toEqual([0, 0, 1]);
  });

  it('stays within the prompt and leaks nothing when bookings are not chains (a client-sent seq)', () => {
    // The definition needs held blocks to be prefixes; arbitrary hashes (repeats, shuffles, other
    // prompts' blocks in the middle) may give other answers, but never one outside [0, prompt length].
    const rnd = mulberry32(99);
    const int = (n: number) => Math.floor(rnd() * n);
    const pool = Array.from({ length: 30 }, (_, i) => hashOf(5000 + i));
    const a = new ActiveSequences();
    const names = Array.from({ length: 12 }, (_, w) => `w${w}`);
    const live: string[] = [];
    for (let step = 0; step < 2000; step++) {
      if (live.length > 0 && rnd() < 0.45) a.free(live.splice(int(live.length), 1)[0]);
      else {
        const id = `r${step}`;
        a.book(
          id,
          names[int(12)],
          0,
          BigUint64Array.from({ length: int(15) }, () => pool[int(30)]),
          1,
          0,
        );
        live.push(id);
      }
      const p = BigUint64Array.from({ length: int(20) }, () => pool[int(30)]);
      const held = a.heldPrefixes(p).inOrder(names.map((instance) => ({ instance, dpRank: 0 })));
      for (const h of held) expect(h >= 0 && h <= p.length).toBe(true);
    }
    for (const id of live) a.free(id);
    expect(a.totals().activeBlocks).toBe(0);
    const p = BigUint64Array.from(pool);
    for (const n of names) expect(a.heldPrefixes(p).of(n, 0)).toBe(0);
  });
});
