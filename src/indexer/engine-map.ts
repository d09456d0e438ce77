// A (backend, dp rank) group's engine hashes (dual key): engine hash -> the record that carries it,
// whose seq hash is the router's. Open addressing with linear probing and backward-shift deletion,
// as U64Table, with rows [engLo, record + 1] (0 = empty): the key's high half is read from the
// record (`eng`, the index's recEng: a row points at a live record carrying its hash, records.ts
// setEngineHash / unmapRecord), so a row is 8 bytes; a probe reads the record only where the low
// halves agree, and the home row comes from the low half alone. Any capacity, growing by 1.25x once 0.8 full: a fleet's router holds one map
// per engine, and a power-of-two table that doubles is 40-80 % full. Only writes and resolve()
// look it up, never the query walk.

const ROW = 2;
const REC = 1;
const MAX_LOAD = 0.8;

export class EngineMap {
  private data: Int32Array;
  private cap: number;
  private limit: number;
  private _size = 0;

  /**
   * `floor`: the capacity shrink() keeps at least (a map sized for what its group is expected to
   * hold keeps that size through sweeps).
   */
  constructor(
    initialCapacity = 64,
    private readonly floor = 8,
  ) {
    this.cap = Math.max(8, initialCapacity);
    this.data = new Int32Array(this.cap * ROW);
    this.limit = Math.floor(this.cap * MAX_LOAD);
  }

  /** A map that holds n hashes before it grows and keeps that room (n = 0: the default, growing from 64 rows). */
  static holding(n: number): EngineMap {
    if (n <= 0) return new EngineMap();
    const cap = Math.floor(n / MAX_LOAD) + 1;
    return new EngineMap(cap, cap);
  }

  get size(): number {
    return this._size;
  }

  get byteLength(): number {
    return this.data.byteLength;
  }

  /**
   * A key's home row, from its low half only: deletion and growth move rows without reading their
   * records (a record read is a cache miss at fleet scale). Engine hashes are hashes: their low halves
   * spread; keys that share one share a home and are told apart by the record's high half.
   */
  private home(lo: number): number {
    let h = Math.imul(lo, 0x85ebca6b);
    h ^= h >>> 15;
    h = Math.imul(h, 0xc2b2ae35);
    h ^= h >>> 13;
    // The high bits scaled to the capacity.
    return Math.floor(((h >>> 0) * this.cap) / 4294967296);
  }

  /** Slot of the engine hash, or -1; `eng`: the records' engine hashes [lo, hi]. */
  find(lo: number, hi: number, eng: Int32Array): number {
    const d = this.data;
    const cap = this.cap;
    let s = this.home(lo);
    for (;;) {
      const o = s * ROW;
      const r = d[o + REC];
      if (r === 0) return -1;
      if (d[o] === lo && eng[2 * r - 1] === hi) return s;
      s = s + 1 === cap ? 0 : s + 1;
    }
  }

  /**
   * Load the home rows of engine hashes [from, to) of a hash view (lo/hi pairs), as U64Table.touch: the
   * loads are independent, so their cache misses overlap. A value derived from them (not to be optimized away).
   */
  touch(view: Int32Array, from: number, to: number): number {
    const d = this.data;
    let acc = 0;
    for (let i = from; i < to; i++) acc ^= d[this.home(view[2 * i]) * ROW + REC];
    return acc;
  }

  /**
   * The record of the first row from lo's home whose low half is lo, its high half unchecked (it is
   * the record's: reading it is the miss a prefetch overlaps), or -1: what find() mostly returns.
   */
  guess(lo: number): number {
    const d = this.data;
    const cap = this.cap;
    let s = this.home(lo);
    for (;;) {
      const o = s * ROW;
      const r = d[o + REC];
      if (r === 0) return -1;
      if (d[o] === lo) return r - 1;
      s = s + 1 === cap ? 0 : s + 1;
    }
  }

  /** The record at a slot. */
  record(slot: number): number {
    return this.data[slot * ROW + REC] - 1;
  }

  /** Point a slot at another record (one that carries the same engine hash). */
  setRecord(slot: number, r: number): void {
    this.data[slot * ROW + REC] = r + 1;
  }

  /** Map the engine hash record r carries (eng[2r], eng[2r + 1]) to r (inserted, or its row re-pointed). */
  set(r: number, eng: Int32Array): void {
    if (this._size + 1 > this.limit) this.rehash(Math.ceil(this.cap * 1.25));
    const lo = eng[2 * r];
    const hi = eng[2 * r + 1];
    const d = this.data;
    const cap = this.cap;
    let s = this.home(lo);
    for (;;) {
      const o = s * ROW;
      const x = d[o + REC];
      if (x === 0) {
        d[o] = lo;
        this._size++;
        break;
      }
      if (d[o] === lo && eng[2 * x - 1] === hi) break;
      s = s + 1 === cap ? 0 : s + 1;
    }
    d[s * ROW + REC] = r + 1;
  }

  /** Delete the row at a slot, shifting later members of its probe run back. */
  removeSlot(slot: number): void {
    const d = this.data;
    const cap = this.cap;
    let hole = slot;
    let j = slot;
    for (;;) {
      j = j + 1 === cap ? 0 : j + 1;
      const oj = j * ROW;
      if (d[oj + REC] === 0) break;
      const home = this.home(d[oj]);
      const inRange = hole <= j ? home > hole && home <= j : home > hole || home <= j;
      if (inRange) continue;
      d.copyWithin(hole * ROW, oj, oj + ROW);
      hole = j;
    }
    d[hole * ROW + REC] = 0;
    this._size--;
  }

  /**
   * Down to the fill a growth leaves (0.8 / 1.25) once the rows fill at most half the limit (the
   * group's engine evicted most of what it held, or its blocks were cleared): the hysteresis between
   * 0.4 and 0.8 keeps a shrunk map from growing again on the next stores. Whether it shrank.
   */
  shrink(): boolean {
    if (this.cap <= this.floor || this._size > this.limit / 2) return false;
    this.rehash(Math.max(this.floor, Math.ceil(this._size / (MAX_LOAD / 1.25))));
    return true;
  }

  /** Records were renumbered (compacted): row r points at map[r]. */
  renumber(map: Int32Array): void {
    const d = this.data;
    for (let o = REC; o < d.length; o += ROW) if (d[o] !== 0) d[o] = map[d[o] - 1] + 1;
  }

  private rehash(cap: number): void {
    const old = this.data;
    const oldCap = this.cap;
    this.cap = cap;
    this.limit = Math.floor(this.cap * MAX_LOAD);
    this.data = new Int32Array(this.cap * ROW);
    const d = this.data;
    for (let s = 0; s < oldCap; s++) {
      const o = s * ROW;
      const r = old[o + REC];
      if (r === 0) continue;
      let t = this.home(old[o]);
      while (d[t * ROW + REC] !== 0) t = t + 1 === this.cap ? 0 : t + 1;
      d[t * ROW] = old[o];
      d[t * ROW + REC] = r;
    }
  }
}
