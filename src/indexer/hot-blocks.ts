// Hot blocks: the holder records of the few blocks with many holders (a fleet's shared system
// prompt: block 0 of every prompt is one, with one record per instance) copied into one contiguous
// array, in their list order, for the walk's seeds. Walking a block's linked list is a chain of
// dependent cache misses (each record sits in its holder's chain of records, far from the next);
// reading the copy is sequential. A copy holds each record's id, holder, run and position in run,
// and stays valid while no record of the block is made, freed or moved to another run: records.ts
// calls invalidate() on each of those, so a copy is never stale (what the walk reads live besides:
// run lengths, expiries, holder tables).

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

  /** A record of block (lo, hi) was made, freed or moved to another run: its copy is stale. */
  invalidate(lo: number, hi: number): void {
    if (this.live === 0) return;
    for (let e = 0; e < ENTRIES; e++) {
      if (this.count[e] > 0 && this.lo[e] === lo && this.hi[e] === hi) {
        this.count[e] = 0;
        this.live--;
      }
    }
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
