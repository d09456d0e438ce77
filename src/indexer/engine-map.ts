// A (backend, dp rank) group's engine hashes (dual key): engine hash -> the record that carries it,
// whose seq hash is the router's. Open addressing with linear probing and backward-shift deletion,
// as U64Table, with rows [engLo, engHi, record + 1] (0 = empty), but of any capacity, growing by
// 1.25x once 0.8 full: a fleet's router holds one map per engine, and a power-of-two table that
// doubles is 40-80 % full (up to 30 bytes per dual-key block; this one 15-19). Only writes and
// resolve() look it up, never the query walk, so its home (the hash scaled to the capacity, not
// masked) costs the query nothing.

const ROW = 3;
const REC = 2;
const MAX_LOAD = 0.8;

export class EngineMap {
  private data: Int32Array;
  private cap: number;
  private limit: number;
  private _size = 0;

  constructor(initialCapacity = 64) {
    this.cap = Math.max(8, initialCapacity);
    this.data = new Int32Array(this.cap * ROW);
    this.limit = Math.floor(this.cap * MAX_LOAD);
  }

  get size(): number {
    return this._size;
  }

  get byteLength(): number {
    return this.data.byteLength;
  }

  private home(lo: number, hi: number): number {
    let h = Math.imul(lo ^ Math.imul(hi, 0x9e3779b1), 0x85ebca6b);
    h ^= h >>> 15;
    h = Math.imul(h, 0xc2b2ae35);
    h ^= h >>> 13;
    // The high bits scaled to the capacity (exact in a double: < 2^32 x 2^31).
    return Math.floor(((h >>> 0) * this.cap) / 4294967296);
  }

  /** Slot of the engine hash, or -1. */
  find(lo: number, hi: number): number {
    const d = this.data;
    const cap = this.cap;
    let s = this.home(lo, hi);
    for (;;) {
      const o = s * ROW;
      if (d[o + REC] === 0) return -1;
      if (d[o] === lo && d[o + 1] === hi) return s;
      s = s + 1 === cap ? 0 : s + 1;
    }
  }

  /** The record at a slot. */
  record(slot: number): number {
    return this.data[slot * ROW + REC] - 1;
  }

  /** Point a slot at another record. */
  setRecord(slot: number, r: number): void {
    this.data[slot * ROW + REC] = r + 1;
  }

  /** Map the engine hash to record r (inserted, or its row re-pointed). */
  set(lo: number, hi: number, r: number): void {
    if (this._size + 1 > this.limit) this.grow();
    const d = this.data;
    const cap = this.cap;
    let s = this.home(lo, hi);
    for (;;) {
      const o = s * ROW;
      if (d[o + REC] === 0) {
        d[o] = lo;
        d[o + 1] = hi;
        this._size++;
        break;
      }
      if (d[o] === lo && d[o + 1] === hi) break;
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
      const home = this.home(d[oj], d[oj + 1]);
      const inRange = hole <= j ? home > hole && home <= j : home > hole || home <= j;
      if (inRange) continue;
      d.copyWithin(hole * ROW, oj, oj + ROW);
      hole = j;
    }
    d[hole * ROW + REC] = 0;
    this._size--;
  }

  private grow(): void {
    this.rehash(Math.ceil(this.cap * 1.25));
  }

  /**
   * Down to the fill a growth leaves (0.8 / 1.25) once the rows fill at most half the limit (the
   * group's engine evicted most of what it held, or its blocks were cleared): the hysteresis between
   * 0.4 and 0.8 keeps a shrunk map from growing again on the next stores. Whether it shrank.
   */
  shrink(): boolean {
    if (this.cap <= 8 || this._size > this.limit / 2) return false;
    this.rehash(Math.max(8, Math.ceil(this._size / (MAX_LOAD / 1.25))));
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
      if (old[o + REC] === 0) continue;
      let t = this.home(old[o], old[o + 1]);
      while (d[t * ROW + REC] !== 0) t = t + 1 === this.cap ? 0 : t + 1;
      d[t * ROW] = old[o];
      d[t * ROW + 1] = old[o + 1];
      d[t * ROW + REC] = old[o + REC];
    }
  }
}
