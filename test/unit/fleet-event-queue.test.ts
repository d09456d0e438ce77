// The fleet simulation's clock: events pop in (time, scheduling order), never before the present.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { EventQueue } from '../../src/fleet-sim/event-queue.js';

describe('fleet-sim EventQueue', () => {
  it('pops by time, ties in the order they were pushed', () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 0, max: 20 }), { maxLength: 200 }), (times) => {
        const q = new EventQueue<number>();
        times.forEach((t, i) => {
          q.push(t, i);
        });
        const out: Array<[number, number]> = [];
        for (let e = q.pop(); e; e = q.pop()) out.push([e.at, e.ev]);
        const want = times.map((t, i) => [t, i] as [number, number]).sort((a, b) => a[0] - b[0] || a[1] - b[1]);
        expect(out).toEqual(want);
      }),
    );
  });

  it('moves the clock to the popped event and never schedules into the past', () => {
    const q = new EventQueue<string>();
    q.push(10, 'a');
    q.push(5, 'b');
    expect(q.pop()!.ev).toBe('b');
    expect(q.now).toBe(5);
    q.push(1, 'late'); // scheduled at "now" (5), after everything already due then
    q.push(5, 'same');
    expect([q.pop()!, q.pop()!, q.pop()!].map((e) => [e.ev, e.at])).toEqual([
      ['late', 5],
      ['same', 5],
      ['a', 10],
    ]);
    expect(q.pop()).toBeNull();
    expect(q.now).toBe(10);
  });
});

describe('fleet-sim EventQueue recurrence', () => {
  /**
   * Events at random times, some of which push more when delivered, and one ticker: in the
   * reference it pushes its next occurrence each time it is delivered; recurring, it is pushed once
   * and only its last occurrence is delivered. A cut (at the k-th delivered event) makes the
   * pending occurrence the last. Both deliver the other events and the ticker's last in the same
   * order, at the same times.
   */
  it('orders silent occurrences as delivered ones that push their successor', () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 0, max: 30 }), { minLength: 1, maxLength: 60 }),
        fc.array(fc.integer({ min: 0, max: 4 }), { minLength: 1, maxLength: 20 }),
        fc.integer({ min: 0, max: 40 }),
        fc.integer({ min: 0, max: 30 }),
        (times, gaps, cutAt, start) => {
          // Ticks at start + cumulative gaps (ties with the other events included).
          const ticks = Float64Array.from(gaps.map((_, i) => start + gaps.slice(0, i + 1).reduce((a, b) => a + b, 0)));
          const run = (recurring: boolean): string[] => {
            const rec = { times: ticks, next: 0, last: ticks.length - 1 };
            const q = new EventQueue<string>((ev) => (recurring && ev === 'tick' ? rec : null));
            times.forEach((t, i) => {
              q.push(t, `e${i}`);
            });
            q.push(ticks[0], 'tick');
            let tick = 0;
            let last = ticks.length - 1;
            let delivered = 0;
            const out: string[] = [];
            for (let e = q.pop(); e; e = q.pop()) {
              if (e.ev === 'tick') {
                if (!recurring && tick < last) {
                  q.push(ticks[++tick], 'tick');
                  out.push('(tick)');
                  continue;
                }
                out.push(`tick@${e.at}`);
                continue;
              }
              out.push(`${e.ev}@${e.at}`);
              // Some events schedule another (ties with the ticks' next times).
              if (e.ev.length < 4 && Number(e.ev.slice(1)) % 3 === 0) q.push(e.at + 2, `${e.ev}x`);
              if (++delivered === cutAt) {
                if (recurring) rec.last = rec.next;
                else last = tick;
              }
            }
            // The recurring queue's silent occurrences stand for the reference's undelivered ticks.
            if (recurring) for (let k = 0; k < q.silent; k++) out.push('(tick)');
            return out.filter((x) => x !== '(tick)').concat(out.filter((x) => x === '(tick)'));
          };
          expect(run(true)).toEqual(run(false));
        },
      ),
      { numRuns: 300, seed: 3 },
    );
  });
});
