// Holder sets of crowded blocks: for a block with many holder records (a fleet's shared system
// prompt: one record per instance, and one per instance's bookings), a bitset of the holder ids
// that have a record on it. A store asks "does this holder already hold the block, and does a
// booking of its instance?" for every block it writes; on a crowded block the answer through the
// block's linked list is a chain of up to ~2,000 dependent cache misses, through the set two bit
// reads. records.ts keeps each set exact: newRecord sets the holder's bit (a missing bit would make
// a duplicate record: test/unit/holder-sets.test.ts), freeRecord clears it (a stale bit would only
// cost a walk) and drops the set with the block's row. Sets are made by the store that finds a block crowded and
// live as long as its row, so their memory is bounded by the crowded blocks (<= 8 B per record).
import { U64Table } from './u64-table.js';

/** A block gets a set once a store walks this many records on it. */
export const CROWDED_MIN_RECORDS = 32;
/** Table row: [lo, hi, used, set index]. */
const S = 4;

export class HolderSets {
  private readonly table = new U64Table(S, 64);
  /** Words per set (32 holder ids each); widened when holder ids outgrow it. */
  private words = 8;
  private bits = new Int32Array(64 * 8);
  private free: number[] = [];
  private top = 0;

  get size(): number {
    return this.table.size;
  }

  /** The set of block (lo, hi), or -1. */
  find(lo: number, hi: number): number {
    if (this.table.size === 0) return -1;
    const s = this.table.find(lo, hi);
    return s === -1 ? -1 : this.table.data[s * S + 3];
  }

  has(set: number, holder: number): boolean {
    const w = holder >>> 5;
    return w < this.words && (this.bits[set * this.words + w] & (1 << (holder & 31))) !== 0;
  }

  /** An empty set for block (lo, hi) (which has none); fill it with add(). */
  create(lo: number, hi: number): number {
    let set = this.free.pop();
    if (set === undefined) {
      set = this.top++;
      if ((set + 1) * this.words > this.bits.length) {
        const b = new Int32Array(this.bits.length * 2);
        b.set(this.bits);
        this.bits = b;
      }
    }
    this.bits.fill(0, set * this.words, (set + 1) * this.words);
    const s = this.table.insert(lo, hi);
    this.table.data[s * S + 3] = set;
    return set;
  }

  add(set: number, holder: number): void {
    if (holder >>> 5 >= this.words) this.widen(holder);
    this.bits[set * this.words + (holder >>> 5)] |= 1 << (holder & 31);
  }

  remove(set: number, holder: number): void {
    if (holder >>> 5 < this.words) this.bits[set * this.words + (holder >>> 5)] &= ~(1 << (holder & 31));
  }

  /** The block's row is gone: so is its set. */
  drop(lo: number, hi: number): void {
    if (this.table.size === 0) return;
    const s = this.table.find(lo, hi);
    if (s === -1) return;
    this.free.push(this.table.data[s * S + 3]);
    this.table.removeSlot(s);
  }

  private widen(holder: number): void {
    let words = this.words;
    while (holder >>> 5 >= words) words *= 2;
    const b = new Int32Array(Math.max(this.top, 64) * words);
    for (let i = 0; i < this.top; i++) b.set(this.bits.subarray(i * this.words, (i + 1) * this.words), i * words);
    this.bits = b;
    this.words = words;
  }

  get byteLength(): number {
    return this.table.byteLength + this.bits.byteLength;
  }
}
