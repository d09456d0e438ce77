// The simulation's clock: a binary min-heap of events ordered by (time, seq), seq being the order
// of scheduling. Events at the same virtual time therefore run in the order they were scheduled,
// which makes a run a pure function of its inputs.

export interface Scheduled<E> {
  at: number;
  seq: number;
  ev: E;
}

export class EventQueue<E> {
  private heap: Array<Scheduled<E>> = [];
  private seq = 0;
  private clock = 0;

  /** Virtual time of the event being processed (ms). */
  get now(): number {
    return this.clock;
  }

  get size(): number {
    return this.heap.length;
  }

  /** Schedule `ev` at `at` (never before the current time). */
  push(at: number, ev: E): void {
    const item: Scheduled<E> = { at: at < this.clock ? this.clock : at, seq: this.seq++, ev };
    const h = this.heap;
    let i = h.length;
    h.push(item);
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!before(item, h[p])) break;
      h[i] = h[p];
      i = p;
    }
    h[i] = item;
  }

  /** The next event, advancing the clock to its time; null when none is left. */
  pop(): Scheduled<E> | null {
    const h = this.heap;
    if (h.length === 0) return null;
    const top = h[0];
    const last = h.pop()!;
    if (h.length > 0) {
      let i = 0;
      const n = h.length;
      for (;;) {
        const l = 2 * i + 1;
        if (l >= n) break;
        const r = l + 1;
        const c = r < n && before(h[r], h[l]) ? r : l;
        if (!before(h[c], last)) break;
        h[i] = h[c];
        i = c;
      }
      h[i] = last;
    }
    this.clock = top.at;
    return top;
  }
}

function before<E>(a: Scheduled<E>, b: Scheduled<E>): boolean {
  return a.at < b.at || (a.at === b.at && a.seq < b.seq);
}
