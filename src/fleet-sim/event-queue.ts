// The simulation's clock: a binary min-heap of events ordered by (time, seq), seq being the order
// of scheduling. Events at the same virtual time therefore run in the order they were scheduled,
// which makes a run a pure function of its inputs. The keys live in typed arrays beside the
// events (a sift reads contiguous numbers, and a queued event costs no object of its own).

export interface Scheduled<E> {
  at: number;
  seq: number;
  ev: E;
}

export class EventQueue<E> {
  private at = new Float64Array(1024);
  private seqs = new Float64Array(1024);
  private evs: E[] = [];
  private n = 0;
  private seq = 0;
  private clock = 0;

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
    if (this.n === 0) return null;
    const A = this.at;
    const S = this.seqs;
    const V = this.evs;
    const top: Scheduled<E> = { at: A[0], seq: S[0], ev: V[0] };
    const n = --this.n;
    if (n > 0) {
      const t = A[n];
      const s = S[n];
      const ev = V[n];
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
    V[n] = undefined as E; // no reference kept to a delivered event
    this.clock = top.at;
    return top;
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
