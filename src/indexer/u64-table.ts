// Open-addressing hash table keyed by a u64 (lo/hi int32 halves), rows of `stride` int32 words
// stored inline: [keyLo, keyHi, used, payload...]. One probe touches one cache line, which is what
// makes the index fast (struct-of-arrays layouts cost a cache miss per field). Linear probing with
// backward-shift deletion (no tombstones). Slot numbers change on insert (growth) and remove.
// Capacities m x 2^j (m = 4..7): a power of two (m = 4) homes a key by a mask of its mixed hash;
// otherwise by the top 24 bits of the hash times m, shifted right by 24 - j. A table grows by
// doubling, and past `fine.fromRows` rows in steps of 1.14-1.25x (m + 1), at `fine.maxLoad`: a
// huge table's empty rows cost the most memory (the fleet's routers hold millions of blocks).
export class U64Table {
  data: Int32Array;
  private cap: number;
  /** cap - 1: the home of a power-of-two table (mul = 4). */
  private mask: number;
  /** Capacity = mul << (24 - shift), mul in 4..7. */
  private mul = 4;
  private shift = 22;
  private _size = 0;

  /** Rows held before the table grows: capacity x its load. */
  private limit: number;

  /**
   * `maxLoad`: the fill at which the table doubles (0.5 keeps probe runs short for lookup-heavy
   * tables). `fine`: from `fromRows` rows on, it grows in steps of 1.14-1.25x once `maxLoad` full
   * (the block table: 56-70 % full past 64 MB instead of 35-70 %).
   */
  constructor(
    readonly stride: number,
    initialCapacity = 1024,
    private readonly maxLoad = 0.5,
    private readonly fine: { fromRows: number; maxLoad: number } | null = null,
  ) {
    if (stride < 3) throw new RangeError('stride must leave room for key and used flag');
    for (const l of [maxLoad, fine?.maxLoad ?? maxLoad])
      if (!(l > 0 && l <= 0.9)) throw new RangeError('maxLoad must be in (0, 0.9]');
    while (this.loadOf(this.rows()) * this.rows() < initialCapacity) this.step(1);
    this.cap = this.rows();
    this.mask = this.cap - 1;
    this.data = new Int32Array(this.cap * stride);
    this.limit = Math.floor(this.cap * this.loadOf(this.cap));
  }

  /** Rows of the current (mul, shift). */
  private rows(): number {
    return this.mul << (24 - this.shift);
  }

  private loadOf(rows: number): number {
    return this.fine !== null && rows > this.fine.fromRows ? this.fine.maxLoad : this.maxLoad;
  }

  /** One capacity step up (1) or down (-1): x2, or past fine.fromRows m +/- 1. */
  private step(dir: 1 | -1): void {
    const fine =
      this.fine !== null && (dir === 1 ? this.rows() >= this.fine.fromRows : this.rows() > this.fine.fromRows);
    if (!fine) this.shift -= dir;
    else if (dir === 1 && this.mul === 7) {
      this.mul = 4;
      this.shift--;
    } else if (dir === -1 && this.mul === 4) {
      this.mul = 7;
      this.shift++;
    } else this.mul += dir;
    if (this.shift < (this.mul === 4 ? -4 : 0)) throw new RangeError('U64Table: too many rows');
  }

  get size(): number {
    return this._size;
  }

  get byteLength(): number {
    return this.data.byteLength;
  }

  get capacity(): number {
    return this.cap;
  }

  /** A key's home row: its mixed hash masked, or (mul > 4) its top 24 bits x mul / 2^shift (< capacity). */
  private home(lo: number, hi: number): number {
    let h = Math.imul(lo ^ Math.imul(hi, 0x9e3779b1), 0x85ebca6b);
    h ^= h >>> 15;
    return this.mul === 4 ? h & this.mask : Math.imul(h >>> 8, this.mul) >>> this.shift;
  }

  /**
   * Load the home rows of keys [from, to) of a hash view (lo/hi pairs). The loads are independent,
   * so the CPU overlaps their cache misses; a lookup loop that follows then mostly hits cache.
   * Returns a value derived from the loads so they cannot be optimized away.
   */
  touch(view: Int32Array | Uint32Array, from: number, to: number): number {
    const d = this.data;
    const st = this.stride;
    const cap = this.cap;
    let acc = 0;
    for (let i = from; i < to; i++) acc ^= d[this.home(view[2 * i] | 0, view[2 * i + 1] | 0) * st];
    return acc;
  }

  /** Slot of the key, or -1. */
  find(lo: number, hi: number): number {
    const d = this.data;
    const st = this.stride;
    const cap = this.cap;
    lo |= 0;
    hi |= 0;
    let s = this.home(lo, hi);
    for (;;) {
      const o = s * st;
      if (d[o + 2] === 0) return -1;
      if (d[o] === lo && d[o + 1] === hi) return s;
      s = s + 1 === cap ? 0 : s + 1;
    }
  }

  /** Slot of the key, inserting an empty row (payload zeroed) when absent. `created` tells which. */
  insert(lo: number, hi: number): number {
    if (this._size + 1 > this.limit) {
      this.step(1);
      this.rehash();
    }
    lo |= 0;
    hi |= 0;
    const d = this.data;
    const st = this.stride;
    const cap = this.cap;
    let s = this.home(lo, hi);
    for (;;) {
      const o = s * st;
      if (d[o + 2] === 0) {
        d[o] = lo;
        d[o + 1] = hi;
        d[o + 2] = 1;
        for (let k = 3; k < st; k++) d[o + k] = 0;
        this._size++;
        this.created = true;
        return s;
      }
      if (d[o] === lo && d[o + 1] === hi) {
        this.created = false;
        return s;
      }
      s = s + 1 === cap ? 0 : s + 1;
    }
  }

  /** Whether the last insert() created the row. */
  created = false;

  /** Delete the row at a slot, shifting later members of its probe run back. */
  removeSlot(slot: number): void {
    const d = this.data;
    const st = this.stride;
    const cap = this.cap;
    let hole = slot;
    let j = slot;
    for (;;) {
      j = j + 1 === cap ? 0 : j + 1;
      const oj = j * st;
      if (d[oj + 2] === 0) break;
      const home = this.home(d[oj], d[oj + 1]);
      const inRange = hole <= j ? home > hole && home <= j : home > hole || home <= j;
      if (inRange) continue;
      const oh = hole * st;
      for (let k = 0; k < st; k++) d[oh + k] = d[oj + k];
      hole = j;
    }
    d[hole * st + 2] = 0;
    this._size--;
  }

  forEachSlot(fn: (slot: number) => void): void {
    const d = this.data;
    const st = this.stride;
    for (let s = 0; s < this.cap; s++) if (d[s * st + 2] !== 0) fn(s);
  }

  clear(): void {
    this.data.fill(0);
    this._size = 0;
  }

  /**
   * Step the capacity down while the rows would fill at most half the smaller table's limit, once
   * they fill at most a quarter of this one's: a table emptied well below its peak (a sweep of expired
   * bookings) gives the memory back, and the hysteresis keeps it from growing again on the next
   * inserts. Whether it shrank.
   */
  shrink(): boolean {
    if (this.cap <= 16 || this._size > this.limit / 4) return false;
    const from = this.cap;
    for (;;) {
      const { mul, shift } = this;
      this.step(-1);
      const rows = this.rows();
      if (rows < 16 || this._size > (rows * this.loadOf(rows)) / 2) {
        this.mul = mul;
        this.shift = shift;
        break;
      }
    }
    if (this.rows() === from) return false;
    this.rehash();
    return true;
  }

  /** Rebuild at the capacity of the current (mul, shift). */
  private rehash(): void {
    const old = this.data;
    const st = this.stride;
    const oldCap = this.cap;
    const cap = this.rows();
    this.data = new Int32Array(cap * st);
    this.cap = cap;
    this.mask = cap - 1;
    this.limit = Math.floor(cap * this.loadOf(cap));
    const d = this.data;
    // Row by row, word by word: a subarray per row (for set()) was most of a rehash's time and
    // garbage (the block table moves millions of rows as it grows).
    for (let s = 0; s < oldCap; s++) {
      const o = s * st;
      if (old[o + 2] === 0) continue;
      let t = this.home(old[o], old[o + 1]);
      while (d[t * st + 2] !== 0) t = t + 1 === cap ? 0 : t + 1;
      const to = t * st;
      for (let k = 0; k < st; k++) d[to + k] = old[o + k];
    }
  }
}
