// Hot blocks: the holder records of the few blocks with many holders (a fleet's shared system
// prompt: block 0 of every prompt is one, with one record per instance) copied into one contiguous
// array, in their list order, for the walk's seeds. Walking a block's linked list is a chain of
// dependent cache misses (each record sits in its holder's chain of records, far from the next);
// reading the copy is sequential. A copy holds each record's id, holder, run and position in run,
// and follows every change of its block's list: records.ts calls added() when a record is made (the
// list's new head), removed() when one is freed and moved() when one moves to another run, so a
// copy is never stale (what the walk reads live besides: run lengths, expiries, holder tables). A
// copy is kept through those changes, not dropped: in the fleet simulation every booking adds or
// expires a speculative record of block 0, and a copy dropped at each change was never read (every
// seed of block 0 walked its ~850-record list: most of the walk's time).

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

  /** Record r (holder, run, position) was made on block (lo, hi): the head of its list, the copy's first row. */
  added(lo: number, hi: number, r: number, holder: number, run: number, pos: number): void {
    if (this.live === 0) return;
    const e = this.find(lo, hi);
    if (e < 0) return;
    const m = this.count[e];
    let rows = this.rows[e];
    if ((m + 1) * HB > rows.length) {
      const more = new Int32Array(rows.length * 2);
      more.set(rows.subarray(0, m * HB), HB);
      this.rows[e] = rows = more;
    } else rows.copyWithin(HB, 0, m * HB);
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

  /** Room for a copy of n rows of block (lo, hi); fill data(e) and then commit(e, n). */
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
    return this.rows.reduce((s, r) => s + r.byteLength, 0);
  }
}
