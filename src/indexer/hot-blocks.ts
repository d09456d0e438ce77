// Hot blocks: the holder records of the few blocks with many holders (a fleet's shared system
// prompt: block 0 of every prompt is one, with one record per instance) copied into one contiguous
// array, in their list order, for the walk's seeds. Walking a block's linked list is a chain of
// dependent cache misses (each record sits in its holder's chain of records, far from the next);
// reading the copy is sequential. A copy holds each record's id, holder, run and position in run,
// and a speculative record's expiry (beside the rows), and follows every change of its block's list:
// records.ts calls added() when a record is made (the list's new head), removed() when one is freed,
// moved() when one moves to another run and expires() when a speculative one's expiry changes, so a
// copy is never stale (what the walk reads live besides: run lengths, holder tables). A
// copy is kept through those changes, not dropped: in the fleet simulation every booking adds or
// expires a speculative record of block 0, and a copy dropped at each change was never read (every
// seed of block 0 walked its ~850-record list: most of the walk's time). The expiries are kept too:
// a fifth of a fleet's block-0 records are speculative, and reading each one's expiry from the
// record rows was a cache miss each (half of the seed's time once the copy was read).

/** Blocks with fewer records are walked through their list (the copy would not pay). */
export const HOT_MIN_RECORDS = 32;
/** Copies kept (most recently made replaces the oldest). */
const ENTRIES = 4;
/** Row of a copy: [record, holder, run, position]. */
export const HB = 4;

export class HotBlocks {
  private readonly lo = new Int32Array(ENTRIES);
  private readonly hi = new Int32Array(ENTRIES);
  /** Records in each copy (0: the entry is empty). */
  private readonly count = new Int32Array(ENTRIES);
  private readonly rows: Int32Array[] = Array.from({ length: ENTRIES }, () => new Int32Array(HOT_MIN_RECORDS * HB));
  /** Per row, the record's expiry if its holder is speculative (else 0, never read). */
  private readonly exps: Float64Array[] = Array.from({ length: ENTRIES }, () => new Float64Array(HOT_MIN_RECORDS));
  private live = 0;
  private nextEntry = 0;

  /** The copy of block (lo, hi), or -1; size(e) rows of data(e). */
  find(lo: number, hi: number): number {
    if (this.live === 0) return -1;
    for (let e = 0; e < ENTRIES; e++) if (this.count[e] > 0 && this.lo[e] === lo && this.hi[e] === hi) return e;
    return -1;
  }

  size(e: number): number {
    return this.count[e];
  }

  data(e: number): Int32Array {
    return this.rows[e];
  }

  /** The expiries of copy e's rows (a speculative record's; 0 for a confirmed one). */
  expiries(e: number): Float64Array {
    return this.exps[e];
  }

  /** Record r (holder, run, position; expiry if speculative, else 0) was made on block (lo, hi): the head of its list, the copy's first row. */
  added(lo: number, hi: number, r: number, holder: number, run: number, pos: number, exp: number): void {
    if (this.live === 0) return;
    const e = this.find(lo, hi);
    if (e < 0) return;
    const m = this.count[e];
    let rows = this.rows[e];
    let exps = this.exps[e];
    if ((m + 1) * HB > rows.length) {
      const more = new Int32Array(rows.length * 2);
      more.set(rows.subarray(0, m * HB), HB);
      this.rows[e] = rows = more;
      const moreExps = new Float64Array(exps.length * 2);
      moreExps.set(exps.subarray(0, m), 1);
      this.exps[e] = exps = moreExps;
    } else {
      rows.copyWithin(HB, 0, m * HB);
      exps.copyWithin(1, 0, m);
    }
    exps[0] = exp;
    rows[0] = r;
    rows[1] = holder;
    rows[2] = run;
    rows[3] = pos;
    this.count[e] = m + 1;
  }

  /** Record r of block (lo, hi) was freed: its row leaves the copy (the others keep their order). */
  removed(lo: number, hi: number, r: number): void {
    if (this.live === 0) return;
    const e = this.find(lo, hi);
    if (e < 0) return;
    const k = this.rowOf(e, r);
    if (k < 0) return this.drop(e);
    const m = this.count[e];
    if (m === 1) return this.drop(e);
    this.rows[e].copyWithin(k * HB, (k + 1) * HB, m * HB);
    this.exps[e].copyWithin(k, k + 1, m);
    this.count[e] = m - 1;
  }

  /** Record r of block (lo, hi) moved to position pos of run `run`. */
  moved(lo: number, hi: number, r: number, run: number, pos: number): void {
    if (this.live === 0) return;
    const e = this.find(lo, hi);
    if (e < 0) return;
    const k = this.rowOf(e, r);
    if (k < 0) return this.drop(e);
    this.rows[e][k * HB + 2] = run;
    this.rows[e][k * HB + 3] = pos;
  }

  /** Speculative record r of block (lo, hi) expires at `exp` now. */
  expires(lo: number, hi: number, r: number, exp: number): void {
    if (this.live === 0) return;
    const e = this.find(lo, hi);
    if (e < 0) return;
    const k = this.rowOf(e, r);
    if (k < 0) return this.drop(e);
    this.exps[e][k] = exp;
  }

  /** The row of record r in copy e, or -1 (a scan: ~1 us for a fleet's block 0, at a change, not at a query). */
  private rowOf(e: number, r: number): number {
    const rows = this.rows[e];
    for (let k = this.count[e] - 1; k >= 0; k--) if (rows[k * HB] === r) return k;
    return -1;
  }

  private drop(e: number): void {
    this.count[e] = 0;
    this.live--;
  }

  /** Room for a copy of n rows of block (lo, hi); fill data(e) and expiries(e), then commit(e, n). */
  open(n: number): number {
    const e = this.nextEntry;
    this.nextEntry = (e + 1) % ENTRIES;
    if (this.count[e] > 0) {
      this.count[e] = 0;
      this.live--;
    }
    if (this.rows[e].length < n * HB) {
      let m = this.rows[e].length;
      while (m < n * HB) m *= 2;
      this.rows[e] = new Int32Array(m);
      this.exps[e] = new Float64Array(m / HB);
    }
    return e;
  }

  commit(e: number, lo: number, hi: number, n: number): void {
    this.lo[e] = lo;
    this.hi[e] = hi;
    this.count[e] = n;
    this.live++;
  }

  /** Records were renumbered (compacted): record r of every copy is now map[r]. */
  renumber(map: Int32Array): void {
    for (let e = 0; e < ENTRIES; e++) {
      const rows = this.rows[e];
      for (let k = 0; k < this.count[e]; k++) rows[k * HB] = map[rows[k * HB]];
    }
  }

  get byteLength(): number {
    return this.rows.reduce((s, r) => s + r.byteLength, 0) + this.exps.reduce((s, x) => s + x.byteLength, 0);
  }
}
