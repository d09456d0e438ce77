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
