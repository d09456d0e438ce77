// Holding requests at the router (routing.busy): the scheduler's judgement of a busy holder of the
// prompt's prefix (scheduler/hold.ts), worked by hand on the time model, and the capacity queue's
// order (the pure HoldQueue and the server's CapacityQueue over it).
import { describe, expect, it } from 'vitest';
import { hashSpace, seqHashes } from '../../src/hashing/index.js';
import { TieredIndexer } from '../../src/indexer/namespaces.js';
import { CapacityQueue, type CapacityTry, decideWithinCapacity } from '../../src/proxy/capacity.js';
import type { CostWeights } from '../../src/scheduler/cost.js';
import { HoldQueue, waitOn } from '../../src/scheduler/hold.js';
import { type RouteInput, Scheduler } from '../../src/scheduler/scheduler.js';

const ns = { model: 'm', blockSize: 4, loraName: null, salt: null, tenant: 'default' };
const TIME: CostWeights = {
  model: 'time',
  overlapWeight: 1,
  medium: { cpu: 0.5, disk: 0.25, shared: 0.5 },
  trackActiveBlocks: true,
  decodeInterference: 0,
};
const prompt = Array.from({ length: 64 }, (_, i) => i + 1);
const other = (n: number, salt: number) => Array.from({ length: n }, (_, i) => salt * 1000 + i + 1);
const cands = [
  { instance: 'a', dpRank: 0 },
  { instance: 'b', dpRank: 0 },
];
// 1 ms a token, no overhead: every figure below is a token count.
const input = (over: Partial<RouteInput> = {}): RouteInput => ({
  ns,
  candidates: cands,
  tokens: prompt,
  policy: 'kv',
  weights: TIME,
  temperature: 0,
  ratePrior: { tokensPerS: 1000, overheadMs: 0 },
  busy: { maxActivePrefillTokens: 10, maxActiveBlocks: 1_000_000 },
  recomputeWeightSaturated: 1,
  ...over,
});

/** `a` holds 48 of the prompt's 64 tokens and has `queuedOnA` tokens of prefill booked (busy past 10); `b` has `queuedOnB`. */
function fleet(queuedOnA: number, queuedOnB = 0): Scheduler {
  const indexer = new TieredIndexer();
  const idx = indexer.namespace(ns).index;
  idx.store(idx.holder('a', 0, 'GPU'), seqHashes(prompt, 4, hashSpace()).subarray(0, 12));
  const s = new Scheduler(indexer, () => 0.5);
  const load = (instance: string, n: number, id: string) => {
    const d = s.decide(input({ policy: 'direct', target: instance, tokens: other(n, id.length), busy: null }), 0);
    s.book(d, ns, { requestId: id, now: 0, speculativeTtlMs: 0 });
  };
  load('a', queuedOnA, 'on-a');
  if (queuedOnB > 0) load('b', queuedOnB, 'on-b!');
  return s;
}

describe('a busy holder of the prefix under the hold', () => {
  it('is waited for when its saving exceeds the wait', () => {
    // a: 20 queued + 16 own = 36; b (idle): 64 own. Saving 64 - 16 = 48 > wait 20 - 0 = 20: hold for a.
    const d = fleet(20).decide(input({ hold: true }), 0);
    expect(d).toMatchObject({ chosen: null, reason: 'held' });
    expect(d.held?.instance).toBe('a');
    const [a, b] = d.candidates;
    expect([a.queueMs, a.prefillMs, a.busy, b.queueMs, b.prefillMs, b.busy]).toEqual([20, 16, true, 0, 64, false]);
    expect(d.filtered).toEqual([{ filter: 'busy', instance: 'a', dpRank: 0 }]);
    // Without the hold (a prefill leg, the decision API) the busy filter drops it, as before.
    expect(fleet(20).decide(input(), 0).chosen?.instance).toBe('b');
  });

  it('is dropped for a free candidate when the wait exceeds its saving', () => {
    // a: 60 queued. Saving 48 < wait 60 (b idle: not saturated, no weight): b now.
    const d = fleet(60).decide(input({ hold: true }), 0);
    expect(d.chosen?.instance).toBe('b');
    expect(d.held).toBeNull();
  });

  it('at saturation counts the saved prefill as kv prices it (recompute_weight_saturated)', () => {
    // a: 100 queued (busy past 50), b: 30 (under it): every candidate queues prefill. Saving
    // 64 - 16 = 48, counted (1 + 1) x = 96 > wait 100 - 30 = 70: hold for a.
    const busy = { maxActivePrefillTokens: 50, maxActiveBlocks: 1_000_000 };
    const held = fleet(100, 30).decide(input({ hold: true, busy }), 0);
    expect(held).toMatchObject({ reason: 'held', chosen: null });
    expect(held.candidates.map((c) => [c.queueMs, c.prefillMs, c.busy])).toEqual([
      [100, 16, true],
      [30, 64, false],
    ]);
    // Weight 0: 48 < 70, b takes it.
    expect(fleet(100, 30).decide(input({ hold: true, busy, recomputeWeightSaturated: 0 }), 0).chosen?.instance).toBe(
      'b',
    );
  });

  it('is not judged by peers or the blocks model (their busy filter stays)', () => {
    expect(fleet(20).decide(input({ hold: true, policy: 'llm-d' }), 0).chosen?.instance).toBe('b');
    expect(fleet(20).decide(input({ hold: true, weights: { ...TIME, model: 'blocks' } }), 0).chosen?.instance).toBe(
      'b',
    );
  });
});

describe('HoldQueue', () => {
  it('tries waiters in arrival order; those that go leave, the rest keep their place', () => {
    const q = new HoldQueue<string>(8);
    for (const w of ['w1', 'w2', 'w3']) expect(q.add(w, 'm')).toBe(true);
    let room = 1;
    const tried: string[] = [];
    const went = q.pass((w) => {
      tried.push(w);
      if (room > 0) {
        room--;
        return { go: true };
      }
      return { anyFree: true };
    });
    expect(went).toEqual(['w1']);
    expect(tried).toEqual(['w1', 'w2', 'w3']);
    room = 2;
    expect(q.pass(() => (room-- > 0 ? { go: true } : { anyFree: false }))).toEqual(['w2', 'w3']);
    expect(q.depth).toBe(0);
  });

  it("ends a pool's pass at a waiter that found nothing free, not another pool's", () => {
    const q = new HoldQueue<string>(8);
    q.add('m1-a', 'm1');
    q.add('m2-a', 'm2');
    q.add('m1-b', 'm1');
    const tried: string[] = [];
    q.pass((w) => {
      tried.push(w);
      return w.startsWith('m2') ? { go: true } : { anyFree: false };
    });
    expect(tried).toEqual(['m1-a', 'm2-a']);
    expect(q.waitingIn('m1')).toBe(true);
    expect(q.waitingIn('m2')).toBe(false);
    expect(q.add('x', 'm1') && q.add('y', 'm1') && q.add('z', 'm1')).toBe(true);
    expect(q.depth).toBe(5);
  });

  it('is bounded', () => {
    const q = new HoldQueue<number>(1);
    expect(q.add(1, '')).toBe(true);
    expect(q.add(2, '')).toBe(false);
    expect(q.remove(1)).toBe(true);
    expect(q.remove(1)).toBe(false);
  });
});

describe('CapacityQueue: no overtaking', () => {
  const bound = (signal = new AbortController().signal) => ({ deadline: Date.now() + 60_000, now: Date.now, signal });
  /** A pool with `room` free slots: a try takes one (as a booking does) or waits. */
  const pool = () => {
    const s = { room: 0, order: [] as string[] };
    const decide = (name: string) => (): CapacityTry<string, string> => {
      if (s.room > 0) {
        s.room--;
        s.order.push(name);
        return { done: name };
      }
      return { wait: name, anyFree: false };
    };
    return { s, decide };
  };
  const tick = () => new Promise((r) => setImmediate(r));

  it("names a request's pool only when someone waits or it must (a subset's name sorts its instances)", async () => {
    const q = new CapacityQueue(8);
    const { s, decide } = pool();
    let named = 0;
    const poolOf = () => {
      named++;
      return 'm';
    };
    s.room = 1;
    expect(await decideWithinCapacity(q, bound(), decide('alone'), poolOf)).toEqual({ done: 'alone' });
    expect(named).toBe(0); // nobody waiting, decided at once
    const waiter = decideWithinCapacity(q, bound(), decide('waiter'), poolOf);
    await tick();
    expect(named).toBe(1); // it had to queue
    expect(q.holds.waitingIn('m')).toBe(true);
    const behind = decideWithinCapacity(q, bound(), decide('behind'), poolOf);
    expect(named).toBe(2); // someone waits: is it of this pool?
    s.room = 2;
    q.notify();
    expect(await waiter).toEqual({ done: 'waiter' });
    expect(await behind).toEqual({ done: 'behind' });
  });

  it('a new arrival joins the tail: freed room goes to the waiter first', async () => {
    const q = new CapacityQueue(8);
    const { s, decide } = pool();
    const first = decideWithinCapacity(q, bound(), decide('first'), 'm');
    await tick();
    expect(q.depth).toBe(1);
    // Room frees, and before any wake-up a new request arrives: it does not take the room.
    s.room = 1;
    const late = decideWithinCapacity(q, bound(), decide('late'), 'm');
    expect(await first).toEqual({ done: 'first' });
    expect(q.depth).toBe(1);
    s.room = 1;
    q.notify();
    expect(await late).toEqual({ done: 'late' });
    expect(s.order).toEqual(['first', 'late']);
    expect(q.depth).toBe(0);
  });

  it('wakes waiters in arrival order, as many as there is room for', async () => {
    const q = new CapacityQueue(8);
    const { s, decide } = pool();
    const waits = ['w1', 'w2', 'w3'].map((n) => decideWithinCapacity(q, bound(), decide(n), 'm'));
    await tick();
    expect(q.depth).toBe(3);
    s.room = 2;
    q.notify('x'); // an instance's room grew: the waiters for any instance are tried
    expect(await Promise.all(waits.slice(0, 2))).toEqual([{ done: 'w1' }, { done: 'w2' }]);
    expect(q.depth).toBe(1);
    s.room = 1;
    q.notify();
    expect(await waits[2]).toEqual({ done: 'w3' });
    expect(s.order).toEqual(['w1', 'w2', 'w3']);
  });

  it('a full queue refuses a newcomer behind waiters; a waiter that aborts leaves its place', async () => {
    const q = new CapacityQueue(1);
    const { s, decide } = pool();
    const ac = new AbortController();
    const first = decideWithinCapacity(q, bound(ac.signal), decide('first'), 'm');
    await tick();
    expect(await decideWithinCapacity(q, bound(), decide('late'), 'm')).toEqual({ full: true });
    ac.abort();
    expect(await first).toEqual({ aborted: true });
    expect(q.depth).toBe(0);
    s.room = 1;
    expect(await decideWithinCapacity(q, bound(), decide('next'), 'm')).toEqual({ done: 'next' });
  });

  it('only a request that can queue may wait for a busy holder: queue off, full or out of time, it takes a free one', async () => {
    const seen: boolean[] = [];
    const decide = (mayHold: boolean): CapacityTry<string, string> => {
      seen.push(mayHold);
      return { wait: 'busy', anyFree: true };
    };
    expect(await decideWithinCapacity(new CapacityQueue(0), bound(), decide, 'm')).toEqual({ gaveUp: 'busy' });
    expect(seen).toEqual([false]);
    // Queued, then its deadline passes: its last try may not hold.
    seen.length = 0;
    const q = new CapacityQueue(4);
    const b = { deadline: Date.now() + 20, now: Date.now, signal: new AbortController().signal };
    expect(await decideWithinCapacity(q, b, decide, 'm')).toEqual({ gaveUp: 'busy' });
    expect(seen[0]).toBe(true);
    expect(seen[seen.length - 1]).toBe(false);
    expect(q.depth).toBe(0);
  });

  it('a try that throws ends only its own wait', async () => {
    const q = new CapacityQueue(8);
    const { s, decide } = pool();
    let fail = false;
    const bad = decideWithinCapacity(
      q,
      bound(),
      () => {
        if (fail) throw new Error('refused for good');
        return { wait: 'bad', anyFree: true };
      },
      'm',
    );
    const good = decideWithinCapacity(q, bound(), decide('good'), 'm');
    await tick();
    fail = true;
    s.room = 1;
    q.notify();
    await expect(bad).rejects.toThrow('refused for good');
    expect(await good).toEqual({ done: 'good' });
    expect(q.depth).toBe(0);
  });
});

describe('a wake-up decides only the waiters it may let go', () => {
  const bound = (signal: AbortSignal) => ({ deadline: Date.now() + 60_000, now: Date.now, signal });
  /** `n` requests for the prompt `a` holds, queued (held for busy `a`) on a CapacityQueue over the real scheduler. */
  function heldFor(n: number) {
    const s = fleet(20);
    const q = new CapacityQueue(2 * n);
    const c = { decisions: 0 };
    const aborts: AbortController[] = [];
    const waits = Array.from({ length: n }, (_, k) => {
      const ac = new AbortController();
      aborts.push(ac);
      const decide = (mayHold: boolean): CapacityTry<string, string> => {
        c.decisions++;
        const d = s.decide(input({ hold: mayHold }), 0);
        if (!d.chosen) return { wait: d.reason ?? '', ...waitOn(d) };
        s.book(d, ns, { requestId: `w${k}`, now: 0, speculativeTtlMs: 0 });
        return { done: `w${k}@${d.chosen.instance}` };
      };
      // (All synchronous: each joins and takes its first turn before any timer can run.)
      return decideWithinCapacity(q, bound(ac.signal), decide, 'm');
    });
    return { s, q, c, aborts, waits };
  }

  it('a first token or finish elsewhere decides none; on the holder, up to the first still held for it', async () => {
    const { s, q, c, aborts, waits } = heldFor(50);
    expect(q.depth).toBe(50);
    expect(c.decisions).toBe(50);
    expect(new Set(q.holds.holders())).toEqual(new Set(['a']));
    c.decisions = 0;
    q.notify('b'); // the free instance: no held waiter is decided again (the old code: all 50)
    expect(c.decisions).toBe(0);
    q.notify('a'); // the holder, still busy: one finds it so, the rest are not decided
    expect(c.decisions).toBe(1);
    // a's 20 queued tokens finish: the oldest waiter goes there (16 own tokens: busy again), the next stays held.
    s.free('on-a', { failed: false, now: 0 });
    c.decisions = 0;
    q.notify('a');
    expect(c.decisions).toBe(2);
    expect(await waits[0]).toEqual({ done: 'w0@a' });
    expect(q.depth).toBe(49);
    // Leaving the queue leaves no booking: only the one that went holds one.
    for (const ac of aborts) ac.abort();
    expect((await Promise.all(waits.slice(1))).every((r) => 'aborted' in r)).toBe(true);
    expect(q.depth).toBe(0);
    expect(s.active.size).toBe(1);
    expect(s.active.get('w0')?.instance).toBe('a');
  });

  it('a waiter whose deadline passes takes the free candidate on its last try, its booking its own', async () => {
    const s = fleet(20);
    const q = new CapacityQueue(8);
    const decide =
      (id: string) =>
      (mayHold: boolean): CapacityTry<string, string> => {
        const d = s.decide(input({ hold: mayHold }), 0);
        if (!d.chosen) return { wait: d.reason ?? '', ...waitOn(d) };
        s.book(d, ns, { requestId: id, now: 0, speculativeTtlMs: 0 });
        return { done: `${id}@${d.chosen.instance}` };
      };
    const ac = new AbortController();
    const stays = decideWithinCapacity(q, bound(ac.signal), decide('stays'), 'm');
    const b = { deadline: Date.now() + 20, now: Date.now, signal: new AbortController().signal };
    expect(await decideWithinCapacity(q, b, decide('late'), 'm')).toEqual({ done: 'late@b' });
    ac.abort();
    expect(await stays).toEqual({ aborted: true });
    expect([q.depth, s.active.size, s.active.get('late')?.instance]).toEqual([0, 2, 'b']);
  });
});

describe('HoldQueue: index, budget and cursor', () => {
  const on = (instance: string, dpRank = 0) => ({ instance, dpRank });
  /** Waiters named by the holder they wait for ('x1': held for x). */
  const queue = (names: string[], budget = 32) => {
    const q = new HoldQueue<string>(64, budget);
    for (const n of names) q.add(n, 'm', on(n[0]));
    return q;
  };

  it('a later waiter whose holder frees is served while earlier ones stay held for theirs', () => {
    const q = queue(['x1', 'x2', 'y1']);
    const tried: string[] = [];
    const went = q.pass((w) => {
      tried.push(w);
      return w === 'y1' ? { go: true } : { anyFree: true, holder: on(w[0]) };
    }, 'y');
    expect(went).toEqual(['y1']);
    expect(tried).toEqual(['y1']);
    expect(q.holders()).toEqual(['x', 'x']);
  });

  it("the holder's waiters in arrival order, even after a pass cut by the budget left its cursor behind them", () => {
    const q = queue(['x1', 'y1', 'x2', 'x3'], 1);
    const tried: string[] = [];
    const stay = (w: string) => {
      tried.push(w);
      return { anyFree: true, holder: on(w[0]) };
    };
    q.dueAll();
    q.pass(stay); // the budget: x1 only; the cursor at y1
    expect(tried).toEqual(['x1']);
    // x frees room for one: x1 takes it (not x2 or x3, after the cursor); x2 finds x busy again, x3 is not tried.
    tried.length = 0;
    let room = 1;
    const went = q.pass((w) => {
      tried.push(w);
      if (w[0] === 'x' && room > 0) {
        room--;
        return { go: true };
      }
      return { anyFree: true, holder: on(w[0]) };
    }, 'x');
    expect(went).toEqual(['x1']);
    expect(tried.slice(0, 2)).toEqual(['x1', 'x2']);
    expect(tried).not.toContain('x3');
  });

  it('due waiters are tried a budget per pass, from where the last pass stopped: none starves behind ones that stay', () => {
    const q = queue(['x1', 'x2', 'x3', 'x4', 'y1'], 2);
    const tried: string[][] = [];
    const went: string[] = [];
    for (let p = 0; p < 3 && went.length === 0; p++) {
      // Every pass follows a change no instance is named for: everyone is due again.
      q.dueAll();
      const t: string[] = [];
      tried.push(t);
      went.push(
        ...q.pass((w) => {
          t.push(w);
          return w === 'y1' ? { go: true } : { anyFree: true, holder: on('x') };
        }),
      );
    }
    // (A try that goes does not count against the budget: the third pass goes on around the queue.)
    expect(tried).toEqual([
      ['x1', 'x2'],
      ['x3', 'x4'],
      ['y1', 'x1', 'x2'],
    ]);
    expect(went).toEqual(['y1']);
    expect(q.depth).toBe(4);
  });

  it("an instance's wake-up stops at a waiter still held for one of its dp ranks, not another rank's", () => {
    const q = new HoldQueue<string>(8);
    q.add('r0-a', 'm', on('x', 0));
    q.add('r0-b', 'm', on('x', 0));
    q.add('r1-a', 'm', on('x', 1));
    const tried: string[] = [];
    // x's rank 1 freed room; rank 0 is still busy.
    const went = q.pass((w) => {
      tried.push(w);
      return w.startsWith('r1') ? { go: true } : { anyFree: true, holder: on('x', 0) };
    }, 'x');
    expect(tried).toEqual(['r0-a', 'r1-a']);
    expect(went).toEqual(['r1-a']);
  });

  it('waiters for any instance are tried on every wake-up, until the first of a pool that finds nothing free', () => {
    const q = new HoldQueue<string>(8);
    q.add('a1', 'm');
    q.add('h1', 'm', on('x'));
    q.add('a2', 'm');
    q.add('a3', 'n');
    const tried: string[] = [];
    q.pass((w) => {
      tried.push(w);
      return w === 'a2' ? { anyFree: false } : { anyFree: true };
    }, 'z');
    expect(tried).toEqual(['a1', 'a2', 'a3']);
  });
});
