// Open-addressing hash table keyed by a u64 (lo/hi int32 halves), rows of `stride` int32 words
// stored inline: [keyLo, keyHi, used, payload...]. One probe touches one cache line, which is what
// makes the index fast (struct-of-arrays layouts cost a cache miss per field). Linear probing with
// backward-shift deletion (no tombstones). Slot numbers change on insert (growth) and remove.
// Capacities need not be powers of two: a key's home row is its hash scaled to the capacity (the
// high bits of hash x capacity), so the table grows by 1.5x, not 2x (a doubled table of millions of
// blocks sits at a quarter to half of its fill limit, ~20 bytes per block of empty rows).
export class U64Table {
  data: Int32Array;
  private cap: number;
  private _size = 0;

  /** Rows held before the table grows: capacity x maxLoad. */
  private limit: number;

  /**
   * `maxLoad`: the fill at which the table grows (by 1.5x). 0.5 keeps probe runs short for lookup-heavy
   * tables (the index walk); a table looked up only by writes (engine-hash maps) can trade probe
   * length for memory.
   */
  constructor(
    readonly stride: number,
    initialCapacity = 1024,
    private readonly maxLoad = 0.5,
  ) {
    if (stride < 3) throw new RangeError('stride must leave room for key and used flag');
    if (!(maxLoad > 0 && maxLoad <= 0.9)) throw new RangeError('maxLoad must be in (0, 0.9]');
    let cap = 16;
    while (cap * maxLoad < initialCapacity) cap <<= 1;
    this.data = new Int32Array(cap * stride);
    this.cap = cap;
    this.limit = Math.floor(cap * maxLoad);
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

  /** Home row of a key in a table of `cap` rows: the mixed hash's fraction of 2^32, scaled. */
  static home(lo: number, hi: number, cap: number): number {
    let h = Math.imul(lo ^ Math.imul(hi, 0x9e3779b1), 0x85ebca6b);
    h ^= h >>> 15;
    return Math.floor(((h >>> 0) * cap) / 4294967296);
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
    for (let i = from; i < to; i++) acc ^= d[U64Table.home(view[2 * i] | 0, view[2 * i + 1] | 0, cap) * st];
    return acc;
  }

  /** Slot of the key, or -1. */
  find(lo: number, hi: number): number {
    const d = this.data;
    const st = this.stride;
    const cap = this.cap;
    lo |= 0;
    hi |= 0;
    let s = U64Table.home(lo, hi, cap);
    for (;;) {
      const o = s * st;
      if (d[o + 2] === 0) return -1;
      if (d[o] === lo && d[o + 1] === hi) return s;
      if (++s === cap) s = 0;
    }
  }

  /** Slot of the key, inserting an empty row (payload zeroed) when absent. `created` tells which. */
  insert(lo: number, hi: number): number {
    if (this._size + 1 > this.limit) this.grow();
    lo |= 0;
    hi |= 0;
    const d = this.data;
    const st = this.stride;
    const cap = this.cap;
    let s = U64Table.home(lo, hi, cap);
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
      if (++s === cap) s = 0;
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
      if (++j === cap) j = 0;
      const oj = j * st;
      if (d[oj + 2] === 0) break;
      const home = U64Table.home(d[oj], d[oj + 1], cap);
      const inRange = hole <= j ? home > hole && home <= j : home > hole || home <= j;
      if (inRange) continue;
      d.copyWithin(hole * st, oj, oj + st);
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

  private grow(): void {
    const old = this.data;
    const st = this.stride;
    const oldCap = this.cap;
    const cap = oldCap + (oldCap >> 1);
    this.data = new Int32Array(cap * st);
    this.cap = cap;
    this.limit = Math.floor(cap * this.maxLoad);
    const d = this.data;
    for (let s = 0; s < oldCap; s++) {
      const o = s * st;
      if (old[o + 2] === 0) continue;
      let t = U64Table.home(old[o], old[o + 1], cap);
      while (d[t * st + 2] !== 0) if (++t === cap) t = 0;
      d.set(old.subarray(o, o + st), t * st);
    }
  }
}
