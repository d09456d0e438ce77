// Open-addressing hash table keyed by a u64 (lo/hi int32 halves), rows of `stride` int32 words
// stored inline: [keyLo, keyHi, used, payload...]. One probe touches one cache line, which is what
// makes the index fast (struct-of-arrays layouts cost a cache miss per field). Linear probing with
// backward-shift deletion (no tombstones). Slot numbers change on insert (growth) and remove.
export class U64Table {
  data: Int32Array;
  private mask: number;
  private _size = 0;

  /** Rows held before the table doubles: capacity x maxLoad. */
  private limit: number;

  /**
   * `maxLoad`: the fill at which the table doubles. 0.5 keeps probe runs short for lookup-heavy
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
    this.mask = cap - 1;
    this.limit = Math.floor(cap * maxLoad);
  }

  get size(): number {
    return this._size;
  }

  get byteLength(): number {
    return this.data.byteLength;
  }

  get capacity(): number {
    return this.mask + 1;
  }

  static home(lo: number, hi: number, mask: number): number {
    let h = Math.imul(lo ^ Math.imul(hi, 0x9e3779b1), 0x85ebca6b);
    h ^= h >>> 15;
    return h & mask;
  }

  /**
   * Load the home rows of keys [from, to) of a hash view (lo/hi pairs). The loads are independent,
   * so the CPU overlaps their cache misses; a lookup loop that follows then mostly hits cache.
   * Returns a value derived from the loads so they cannot be optimized away.
   */
  touch(view: Int32Array | Uint32Array, from: number, to: number): number {
    const d = this.data;
    const st = this.stride;
    const mask = this.mask;
    let acc = 0;
    for (let i = from; i < to; i++) acc ^= d[U64Table.home(view[2 * i] | 0, view[2 * i + 1] | 0, mask) * st];
    return acc;
  }

  /** Slot of the key, or -1. */
  find(lo: number, hi: number): number {
    const d = this.data;
    const st = this.stride;
    const mask = this.mask;
    lo |= 0;
    hi |= 0;
    let s = U64Table.home(lo, hi, mask);
    for (;;) {
      const o = s * st;
      if (d[o + 2] === 0) return -1;
      if (d[o] === lo && d[o + 1] === hi) return s;
      s = (s + 1) & mask;
    }
  }

  /** Slot of the key, inserting an empty row (payload zeroed) when absent. `created` tells which. */
  insert(lo: number, hi: number): number {
    if (this._size + 1 > this.limit) this.grow();
    lo |= 0;
    hi |= 0;
    const d = this.data;
    const st = this.stride;
    let s = U64Table.home(lo, hi, this.mask);
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
      s = (s + 1) & this.mask;
    }
  }

  /** Whether the last insert() created the row. */
  created = false;

  /** Delete the row at a slot, shifting later members of its probe run back. */
  removeSlot(slot: number): void {
    const d = this.data;
    const st = this.stride;
    const mask = this.mask;
    let hole = slot;
    let j = slot;
    for (;;) {
      j = (j + 1) & mask;
      const oj = j * st;
      if (d[oj + 2] === 0) break;
      const home = U64Table.home(d[oj], d[oj + 1], mask);
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
    for (let s = 0; s <= this.mask; s++) if (d[s * st + 2] !== 0) fn(s);
  }

  clear(): void {
    this.data.fill(0);
    this._size = 0;
  }

  private grow(): void {
    this.rehash((this.mask + 1) * 2);
  }

  /**
   * Halve the capacity while the rows would fill at most half the new capacity's limit: a table
   * emptied well below its peak (a sweep of expired bookings) gives the memory back, and keeps a
   * growth step of room, so that it does not grow again on the next inserts (shrinking at <= 1/4 of
   * the limit, growing at the limit). Whether it shrank.
   */
  shrink(): boolean {
    let cap = this.mask + 1;
    while (cap > 16 && this._size <= Math.floor(((cap / 2) * this.maxLoad) / 2)) cap >>= 1;
    if (cap === this.mask + 1) return false;
    this.rehash(cap);
    return true;
  }

  private rehash(cap: number): void {
    const old = this.data;
    const st = this.stride;
    const oldCap = this.mask + 1;
    this.data = new Int32Array(cap * st);
    this.mask = cap - 1;
    this.limit = Math.floor(cap * this.maxLoad);
    const d = this.data;
    for (let s = 0; s < oldCap; s++) {
      const o = s * st;
      if (old[o + 2] === 0) continue;
      let t = U64Table.home(old[o], old[o + 1], this.mask);
      while (d[t * st + 2] !== 0) t = (t + 1) & this.mask;
      d.set(old.subarray(o, o + st), t * st);
    }
  }
}
