// The simulation's clock: a binary min-heap of events ordered by (time, seq), seq being the order
// of scheduling. Events at the same virtual time therefore run in the order they were scheduled,
// which makes a run a pure function of its inputs. The keys live in typed arrays beside the
// events (a sift reads contiguous numbers, and a queued event costs no object of its own).
//
// An event may recur (`Recurrence`): pushed once at its first time, it comes back at each next
// time as if it had been pushed again when it came due (a new sequence number then), and is
// delivered only at its last. The occurrences before are silent: they order the queue exactly as
// delivered events pushing their successor would, and nobody is told (an engine's quiet window:
// its passes in between change nothing the rest of the simulation sees).

export interface Scheduled<E> {
  at: number;
  seq: number;
  ev: E;
}

/** An event's occurrences at times[next..last]; the one owning it may move `last` down to `next` (no occurrence after the pending one). */
export interface Recurrence {
  times: Float64Array;
  next: number;
  last: number;
}

export class EventQueue<E> {
  private at = new Float64Array(1024);
  private seqs = new Float64Array(1024);
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
    if (this.n === this.at.length) this.grow();
    const A = this.at;
    const S = this.seqs;
    const V = this.evs;
    let i = this.n++;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!(t < A[p] || (t === A[p] && s < S[p]))) break;
      A[i] = A[p];
      S[i] = S[p];
      V[i] = V[p];
      i = p;
    }
    A[i] = t;
    S[i] = s;
    V[i] = ev;
  }

  /** The next event, advancing the clock to its time; null when none is left. */
  pop(): Scheduled<E> | null {
    const A = this.at;
    const S = this.seqs;
    const V = this.evs;
    for (;;) {
      if (this.n === 0) return null;
      const r = this.recurrence(V[0]);
      if (r === null || r.next >= r.last) break;
      // A silent occurrence: the event comes back at its next time, sequenced now.
      this.clock = A[0];
      this.passed++;
      this.siftDown(r.times[++r.next], this.seq++, V[0], this.n);
    }
    const top: Scheduled<E> = { at: A[0], seq: S[0], ev: V[0] };
    const n = --this.n;
    if (n > 0) this.siftDown(A[n], S[n], V[n], n);
    V[n] = undefined as E; // no reference kept to a delivered event
    this.clock = top.at;
    return top;
  }

  /** Place (t, s, ev) from the root down in a heap of n entries. */
  private siftDown(t: number, s: number, ev: E, n: number): void {
    const A = this.at;
    const S = this.seqs;
    const V = this.evs;
    let i = 0;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= n) break;
      const r = l + 1;
      const c = r < n && (A[r] < A[l] || (A[r] === A[l] && S[r] < S[l])) ? r : l;
      if (!(A[c] < t || (A[c] === t && S[c] < s))) break;
      A[i] = A[c];
      S[i] = S[c];
      V[i] = V[c];
      i = c;
    }
    A[i] = t;
    S[i] = s;
    V[i] = ev;
  }

  private grow(): void {
    const at = new Float64Array(this.at.length * 2);
    at.set(this.at);
    this.at = at;
    const seqs = new Float64Array(this.seqs.length * 2);
    seqs.set(this.seqs);
    this.seqs = seqs;
  }
}
