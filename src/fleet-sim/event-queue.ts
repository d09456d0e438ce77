// The simulation's clock: a 4-ary min-heap of events ordered by (time, seq), seq being the order
// of scheduling. Events at the same virtual time therefore run in the order they were scheduled,
// which makes a run a pure function of its inputs. The keys live in one typed array beside the
// events, (time, seq) side by side, so that a node's four children are one 64-byte run (at most
// two cache lines: entry 4i + 1 starts 16 bytes into a 64-byte stride): a sift down reads half the
// levels of a binary heap (a run queues every open-loop send up front: 100,000 at 1,024 x
// 100,000). A queued or delivered event costs no object of its own.
//
// An event may recur (`Recurrence`): pushed once at its first time, it comes back at each next
// time as if it had been pushed again when it came due (a new sequence number then), and is
// delivered only at its last. The occurrences before are silent: they order the queue exactly as
// delivered events pushing their successor would, and nobody is told (an engine's quiet window:
// its passes in between change nothing the rest of the simulation sees).

/** An event's occurrences at times[next..last]; the one owning it may move `last` down to `next` (no occurrence after the pending one). */
export interface Recurrence {
  times: Float64Array;
  next: number;
  last: number;
}

export class EventQueue<E> {
  /** keys[2j] = entry j's time, keys[2j + 1] its seq; entry j's children are 4j + 1 .. 4j + 4. */
  private keys = new Float64Array(2 * 1024);
  private evs: E[] = [];
  private n = 0;
  private seq = 0;
  private clock = 0;
  private passed = 0;

  /** `recurrence`: an event's recurrence (null: it happens once). */
  constructor(private readonly recurrence: (ev: E) => Recurrence | null = () => null) {}

  /** Silent occurrences passed so far. */
  get silent(): number {
    return this.passed;
  }

  /** Virtual time of the event being processed (ms). */
  get now(): number {
    return this.clock;
  }

  get size(): number {
    return this.n;
  }

  /** Schedule `ev` at `at` (never before the current time). */
  push(at: number, ev: E): void {
    const t = at < this.clock ? this.clock : at;
    const s = this.seq++;
    if (2 * this.n === this.keys.length) this.grow();
    const K = this.keys;
    const V = this.evs;
    let i = this.n++;
    while (i > 0) {
      const p = (i - 1) >> 2;
      const pt = K[2 * p];
      if (!(t < pt || (t === pt && s < K[2 * p + 1]))) break;
      K[2 * i] = pt;
      K[2 * i + 1] = K[2 * p + 1];
      V[i] = V[p];
      i = p;
    }
    K[2 * i] = t;
    K[2 * i + 1] = s;
    V[i] = ev;
  }

  /** The next event, the clock advanced to its time (`now`); null when none is left. */
  pop(): E | null {
    const K = this.keys;
    const V = this.evs;
    for (;;) {
      if (this.n === 0) return null;
      const r = this.recurrence(V[0]);
      if (r === null || r.next >= r.last) break;
      // A silent occurrence: the event comes back at its next time, sequenced now.
      this.clock = K[0];
      this.passed++;
      this.siftDown(r.times[++r.next], this.seq++, V[0], this.n);
    }
    const ev = V[0];
    this.clock = K[0];
    const n = --this.n;
    if (n > 0) this.siftDown(K[2 * n], K[2 * n + 1], V[n], n);
    V[n] = undefined as E; // no reference kept to a delivered event
    return ev;
  }

  /** Place (t, s, ev) from the root down in a heap of n entries. */
  private siftDown(t: number, s: number, ev: E, n: number): void {
    const K = this.keys;
    const V = this.evs;
    let i = 0;
    for (;;) {
      const first = 4 * i + 1;
      if (first >= n) break;
      // The least of the (up to four) children.
      let c = first;
      let ct = K[2 * first];
      let cs = K[2 * first + 1];
      const end = first + 4 < n ? first + 4 : n;
      for (let j = first + 1; j < end; j++) {
        const jt = K[2 * j];
        if (jt < ct || (jt === ct && K[2 * j + 1] < cs)) {
          c = j;
          ct = jt;
          cs = K[2 * j + 1];
        }
      }
      if (!(ct < t || (ct === t && cs < s))) break;
      K[2 * i] = ct;
      K[2 * i + 1] = cs;
      V[i] = V[c];
      i = c;
    }
    K[2 * i] = t;
    K[2 * i + 1] = s;
    V[i] = ev;
  }

  private grow(): void {
    const keys = new Float64Array(this.keys.length * 2);
    keys.set(this.keys);
    this.keys = keys;
  }
}
