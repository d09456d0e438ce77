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
        for (let e = q.pop(); e !== null; e = q.pop()) out.push([q.now, e]);
        const want = times.map((t, i) => [t, i] as [number, number]).sort((a, b) => a[0] - b[0] || a[1] - b[1]);
        expect(out).toEqual(want);
      }),
    );
  });

  /**
   * Pushes and pops interleaved, thousands queued (several levels of the heap, past its first
   * growth), many ties: the same order as a reference that scans a plain list for the least
   * (time, push order), and the same clock.
   */
  it('orders like a linear scan for the least (time, seq) under interleaved pushes and pops', () => {
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.integer({ min: 0, max: 6 }), fc.integer({ min: 0, max: 50 })), {
          minLength: 1,
          maxLength: 400,
        }),
        fc.integer({ min: 0, max: 3000 }),
        (ops, preload) => {
          const q = new EventQueue<number>();
          const ref: Array<{ at: number; seq: number }> = [];
          let seq = 0;
          let now = 0;
          const push = (at: number): void => {
            const t = Math.max(at, now);
            q.push(at, seq);
            ref.push({ at: t, seq: seq++ });
          };
          const popBoth = (): void => {
            let best = -1;
            for (let j = 0; j < ref.length; j++) {
              const b = best < 0 ? null : ref[best];
              if (b === null || ref[j].at < b.at || (ref[j].at === b.at && ref[j].seq < b.seq)) best = j;
            }
            const want = best < 0 ? null : ref.splice(best, 1)[0];
            const got = q.pop();
            if (want === null) {
              expect(got).toBeNull();
              return;
            }
            now = want.at;
            expect([got, q.now]).toEqual([want.seq, want.at]);
          };
          for (let k = 0; k < preload; k++) push((k * 7919) % 997);
          for (const [op, dt] of ops) {
            if (op < 3) push(now + dt);
            else if (op === 3)
              push(now - 1 + (dt % 3)); // at or before now: clamped to now
            else popBoth();
          }
          while (ref.length > 0) popBoth();
          expect(q.pop()).toBeNull();
          expect(q.size).toBe(0);
        },
      ),
      { numRuns: 60, seed: 11 },
    );
  });

  it('moves the clock to the popped event and never schedules into the past', () => {
    const q = new EventQueue<string>();
    q.push(10, 'a');
    q.push(5, 'b');
    expect(q.pop()).toBe('b');
    expect(q.now).toBe(5);
    q.push(1, 'late'); // scheduled at "now" (5), after everything already due then
    q.push(5, 'same');
    const popped: Array<[string | null, number]> = [];
    for (let k = 0; k < 3; k++) popped.push([q.pop(), q.now]);
    expect(popped).toEqual([
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
            for (let ev = q.pop(); ev !== null; ev = q.pop()) {
              const e = { ev, at: q.now };
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
