// Open-addressing hash map from a u64 key (given as lo/hi u32 halves) to a non-negative int32.
// Linear probing with backward-shift deletion (no tombstones), typed arrays only: ~12 bytes per
// slot, no per-entry objects, so a million keys cost ~24 MB at the 0.5 load factor we keep.
const EMPTY = -1;

export class U64Map {
  private keys: Uint32Array;
  private vals: Int32Array;
  private mask: number;
  private _size = 0;

  constructor(initialCapacity = 1024) {
    let cap = 16;
    while (cap < initialCapacity * 2) cap <<= 1;
    this.keys = new Uint32Array(cap * 2);
    this.vals = new Int32Array(cap).fill(EMPTY);
    this.mask = cap - 1;
  }

  get size(): number {
    return this._size;
  }

  /** Bytes held by the table's arrays. */
  get byteLength(): number {
    return this.keys.byteLength + this.vals.byteLength;
  }

  private slotOf(lo: number, hi: number): number {
    let h = Math.imul(lo ^ Math.imul(hi, 0x9e3779b1), 0x85ebca6b);
    h ^= h >>> 15;
    return h & this.mask;
  }

  /** Value for the key, or -1. */
  get(lo: number, hi: number): number {
    const keys = this.keys;
    const vals = this.vals;
    const mask = this.mask;
    let s = this.slotOf(lo, hi);
    for (;;) {
      const v = vals[s];
      if (v === EMPTY) return EMPTY;
      if (keys[2 * s] === lo && keys[2 * s + 1] === hi) return v;
      s = (s + 1) & mask;
    }
  }

  set(lo: number, hi: number, value: number): void {
    if (value < 0) throw new RangeError('U64Map values must be non-negative');
    if ((this._size + 1) * 2 > this.vals.length) this.grow();
    this.insert(lo >>> 0, hi >>> 0, value);
  }

  private insert(lo: number, hi: number, value: number): void {
    const keys = this.keys;
    const vals = this.vals;
    let s = this.slotOf(lo, hi);
    for (;;) {
      const v = vals[s];
      if (v === EMPTY) {
        keys[2 * s] = lo;
        keys[2 * s + 1] = hi;
        vals[s] = value;
        this._size++;
        return;
      }
      if (keys[2 * s] === lo && keys[2 * s + 1] === hi) {
        vals[s] = value;
        return;
      }
      s = (s + 1) & this.mask;
    }
  }

  /** Remove the key; returns its value or -1. */
  delete(lo: number, hi: number): number {
    const keys = this.keys;
    const vals = this.vals;
    const mask = this.mask;
    let s = this.slotOf(lo, hi);
    for (;;) {
      const v = vals[s];
      if (v === EMPTY) return EMPTY;
      if (keys[2 * s] === lo && keys[2 * s + 1] === hi) break;
      s = (s + 1) & mask;
    }
    const removed = vals[s];
    // Backward-shift: pull later members of the probe run into the hole.
    let hole = s;
    let j = s;
    for (;;) {
      j = (j + 1) & mask;
      if (vals[j] === EMPTY) break;
      const home = this.slotOf(keys[2 * j], keys[2 * j + 1]);
      // Move j into the hole unless its home lies cyclically in (hole, j].
      const inRange = hole <= j ? home > hole && home <= j : home > hole || home <= j;
      if (inRange) continue;
      keys[2 * hole] = keys[2 * j];
      keys[2 * hole + 1] = keys[2 * j + 1];
      vals[hole] = vals[j];
      hole = j;
    }
    vals[hole] = EMPTY;
    this._size--;
    return removed;
  }

  clear(): void {
    this.vals.fill(EMPTY);
    this._size = 0;
  }

  forEach(fn: (lo: number, hi: number, value: number) => void): void {
    const { keys, vals } = this;
    for (let s = 0; s < vals.length; s++) if (vals[s] !== EMPTY) fn(keys[2 * s], keys[2 * s + 1], vals[s]);
  }

  private grow(): void {
    const oldKeys = this.keys;
    const oldVals = this.vals;
    const cap = oldVals.length * 2;
    this.keys = new Uint32Array(cap * 2);
    this.vals = new Int32Array(cap).fill(EMPTY);
    this.mask = cap - 1;
    this._size = 0;
    for (let s = 0; s < oldVals.length; s++) {
      if (oldVals[s] !== EMPTY) this.insert(oldKeys[2 * s], oldKeys[2 * s + 1], oldVals[s]);
    }
  }
}
