// "Wait for capacity, decide again" (proxy/capacity.ts), the one loop the proxy and the EPP picker use.
import { describe, expect, it } from 'vitest';
import { CapacityQueue, type CapacityTry, decideWithinCapacity } from '../../src/proxy/capacity.js';

const bound = (ms: number, signal = new AbortController().signal) => ({
  deadline: Date.now() + ms,
  now: Date.now,
  signal,
});

describe('decideWithinCapacity', () => {
  it('returns the first done try without waiting', async () => {
    const q = new CapacityQueue(4);
    const r = await decideWithinCapacity(q, bound(0), (): CapacityTry<string, number> => ({ done: 'a' }));
    expect(r).toEqual({ done: 'a' });
    expect(q.depth).toBe(0);
  });

  it('decides again when woken, and is done once capacity is there', async () => {
    const q = new CapacityQueue(4);
    let tries = 0;
    const p = decideWithinCapacity(q, bound(60_000), (): CapacityTry<number, number> => {
      tries++;
      return tries < 3 ? { wait: tries } : { done: tries };
    });
    for (let woken = 0; woken < 2; ) {
      if (q.depth === 1) {
        q.notify();
        woken++;
      }
      await new Promise((r) => setImmediate(r));
    }
    expect(await p).toEqual({ done: 3 });
    expect(q.depth).toBe(0);
  });

  it('gives up with the last try when the queue is full or the deadline passes', async () => {
    const full = new CapacityQueue(0);
    expect(await decideWithinCapacity(full, bound(60_000), () => ({ wait: 'busy' }))).toEqual({ gaveUp: 'busy' });
    const q = new CapacityQueue(4);
    let n = 0;
    expect(await decideWithinCapacity(q, bound(5), () => ({ wait: ++n }))).toEqual({ gaveUp: n });
    expect(q.depth).toBe(0);
  });

  it('stops waiting when the signal aborts', async () => {
    const q = new CapacityQueue(4);
    const ac = new AbortController();
    const p = decideWithinCapacity(q, bound(60_000, ac.signal), () => ({ wait: 'down' }));
    while (q.depth === 0) await new Promise((r) => setImmediate(r));
    ac.abort();
    expect(await p).toEqual({ aborted: true });
    expect(q.depth).toBe(0);
  });
});
