// Which workers hold each booked block (an inverted map of the workers' in-flight blocks), so that
// one pass over a prompt answers every worker's held prefix: O(blocks walked) per decision plus O(1)
// per worker, or O(log drop points) probes of its own blocks for one whose stop the pass could not
// name. Whoever holds block i of a prompt holds blocks 0..i (bookings hold whole prompts and a seq
// hash names its whole prefix), so along the prompt the set of workers only shrinks: an unchanged
// count is an unchanged set, a count one lower names the worker that stopped by the XOR of the ids,
// and where several stop at once the block is a drop point, where those workers' own blocks say
// which of them stopped.
import { CandidateIds } from '../common/candidate-ids.js';
import { grow, NONE } from '../indexer/layout.js';
import { U64Table } from '../indexer/u64-table.js';

// table row: [lo, hi, used, workers holding it, XOR of their ids, root list + 1 (0: none)]
const BT = 6;
const B_COUNT = 3;
const B_XOR = 4;
const B_ROOT = 5;
const PASS_LIMIT = 0x3fffffff;
/** Tables past this size (a typical L2 cache) are prefetched a window ahead of the pass, as the index walk does. */
const PREFETCH_MIN_BYTES = 1 << 20;
const TOUCH_WINDOW = 64;
const NO_BLOCKS = new Int32Array(0);

export class BookedBlocks {
  private readonly table = new U64Table(BT, 1024);
  /** Each worker's own in-flight blocks (WorkerLoad's table), by id: what heldPrefix() probes. */
  private readonly own: Array<U64Table | undefined> = [];
  /** Worker ids by instance and dp rank: kept while the instance is in the pool (a candidate list's ids stay valid). */
  private readonly names = new Map<string, number[]>();
  private readonly freeIds: number[] = [];
  private ids = 0;
  /** Changes when an id is given (CandidateIds' validity: a candidate without one may have one now). */
  private version = 0;
  /** Changes when ids are taken back (an instance left: its ids may name other workers later). */
  private taken = 0;
  private readonly listIds = new CandidateIds();
  private readonly idOrNone = (instance: string, dpRank: number): number => this.names.get(instance)?.[dpRank] ?? NONE;
  // per worker id: the pass that knows its held prefix, and that prefix
  private seen = new Int32Array(64);
  private depth = new Int32Array(64);
  /**
   * The workers that booked a block as a prompt's first (a root), per such block: a prompt's block 0
   * is a root, so where the list names every holder of the pass's block 0, a worker not in it holds
   * none of the prompt without a probe of its own blocks (most of a fleet's candidates). A list only
   * ever names holders of its block, so equal sizes mean the same set.
   */
  private roots: number[][] = [];
  private readonly freeRoots: number[] = [];
  /** Per worker id: the pass whose block 0 it holds (valid when `rootsKnown`). */
  private rootMark = new Int32Array(64);
  private rootsKnown = false;
  /** Blocks of the current pass's prompt where several workers stopped at once (ascending). */
  private dropAt = new Int32Array(16);
  /**
   * The id of a drop point's one remaining holder, or -1 where several hold it: most drop points
   * (the end of a shared prefix, one request's own blocks after it) keep one, whom the XOR names,
   * and every other worker is known not to hold it without a probe of its own blocks (a cache miss each).
   */
  private dropOnly = new Int32Array(16);
  private drops = 0;
  /** Where the current pass ended: the first block no worker holds (or the prompt's length); 0: block 0 unheld. */
  private end = 0;
  private pass = 0;
  /** The current pass's prompt (its seq hashes' halves). */
  private sv: Int32Array = NO_BLOCKS;
  /** Where prefetch loads go (see U64Table.touch). */
  private sink = 0;

  /** The worker's id, made on first use; `blocks` is its own table of in-flight blocks. */
  idOf(instance: string, dpRank: number, blocks: U64Table): number {
    let ranks = this.names.get(instance);
    if (!ranks) this.names.set(instance, (ranks = []));
    let id = ranks[dpRank];
    if (id === undefined) {
      id = this.freeIds.pop() ?? this.ids++;
      if (id >= this.seen.length) {
        const n = this.seen.length * 2;
        this.seen = grow(this.seen, n);
        this.depth = grow(this.depth, n);
        this.rootMark = grow(this.rootMark, n);
      }
      ranks[dpRank] = id;
      this.version++;
    }
    this.own[id] = blocks;
    return id;
  }

  /** The worker holds no block now (its last request ended): its empty table is not probed. */
  idle(id: number): void {
    this.own[id] = undefined;
  }

  /** The instance left the pool (its workers hold no block any more): its ids are reused. */
  dropInstance(instance: string): void {
    const ranks = this.names.get(instance);
    if (!ranks) return;
    for (const id of ranks) {
      if (id === undefined) continue;
      this.freeIds.push(id);
      this.own[id] = undefined;
    }
    this.taken++;
    this.names.delete(instance);
  }

  /**
   * Load the table rows of blocks [from, to) of `sv` ahead of their add() or remove(), when the
   * table is past a cache's size (the misses overlap; U64Table.touch).
   */
  prefetch(sv: Int32Array, from: number, to: number): void {
    if (this.table.byteLength > PREFETCH_MIN_BYTES) this.sink ^= this.table.touch(sv, from, to);
  }

  /** Worker `id` now holds the block (its first booking of it); `root`: as a prompt's first block. */
  add(id: number, lo: number, hi: number, root = false): void {
    const s = this.table.insert(lo, hi);
    const d = this.table.data;
    d[s * BT + B_COUNT]++;
    d[s * BT + B_XOR] ^= id;
    if (!root) return;
    let r = d[s * BT + B_ROOT] - 1;
    if (r < 0) {
      r = this.freeRoots.pop() ?? this.roots.push([]) - 1;
      d[s * BT + B_ROOT] = r + 1;
    }
    this.roots[r].push(id);
  }

  /** Worker `id` no longer holds the block (its last booking of it ended). */
  remove(id: number, lo: number, hi: number): void {
    const s = this.table.find(lo, hi);
    if (s === NONE) return;
    const d = this.table.data;
    d[s * BT + B_XOR] ^= id;
    const r = d[s * BT + B_ROOT] - 1;
    if (r >= 0) {
      const list = this.roots[r];
      const at = list.indexOf(id);
      if (at >= 0) {
        list[at] = list[list.length - 1];
        list.pop();
      }
    }
    if (--d[s * BT + B_COUNT] <= 0) {
      if (r >= 0) {
        this.roots[r].length = 0;
        this.freeRoots.push(r);
      }
      this.table.removeSlot(s);
    }
  }

  /** Distinct blocks some worker holds. */
  get size(): number {
    return this.table.size;
  }

  /**
   * One pass over the prompt (`sv`: its seq hashes' [lo, hi] halves, `n` blocks): afterwards
   * heldPrefix(id) is each worker's held prefix of it, until the next pass or booking change.
   */
  walk(sv: Int32Array, n: number): void {
    if (++this.pass > PASS_LIMIT) {
      this.pass = 1;
      this.seen.fill(0);
      this.rootMark.fill(0);
    }
    this.sv = sv;
    this.drops = 0;
    this.end = 0;
    this.rootsKnown = false;
    if (n === 0) return;
    const { table, seen, depth } = this;
    // A large table (a fleet's in-flight prompts) misses cache on every probe: load a window of rows
    // ahead at once, so the misses overlap (U64Table.touch).
    const prefetch = table.byteLength > PREFETCH_MIN_BYTES;
    if (prefetch) this.sink ^= table.touch(sv, 0, Math.min(n, TOUCH_WINDOW));
    let s = table.find(sv[0], sv[1]);
    if (s === NONE) return;
    let d = table.data;
    let count = d[s * BT + B_COUNT];
    let xor = d[s * BT + B_XOR];
    const pass = this.pass;
    const root = d[s * BT + B_ROOT] - 1;
    if (root >= 0 && this.roots[root].length === count) {
      const list = this.roots[root];
      for (let k = 0; k < list.length; k++) this.rootMark[list[k]] = pass;
      this.rootsKnown = true;
    }
    let i = 1;
    for (; i < n; i++) {
      if (prefetch && (i & (TOUCH_WINDOW - 1)) === 0) this.sink ^= table.touch(sv, i, Math.min(n, i + TOUCH_WINDOW));
      s = table.find(sv[2 * i], sv[2 * i + 1]);
      if (s === NONE) break;
      d = table.data;
      const c = d[s * BT + B_COUNT];
      const x = d[s * BT + B_XOR];
      if (c === count && x === xor) continue; // the same workers (the set only shrinks)
      const w = x ^ xor;
      if (c === count - 1 && w < this.ids && seen[w] !== pass) {
        // One worker stopped here: the XOR of the ids names it.
        seen[w] = pass;
        depth[w] = i;
      } else {
        // Several stopped here: a drop point, where each of them is found by its own blocks.
        if (this.drops === this.dropAt.length) {
          this.dropAt = grow(this.dropAt, this.drops * 2);
          this.dropOnly = grow(this.dropOnly, this.drops * 2);
        }
        this.dropOnly[this.drops] = c === 1 ? x : -1;
        this.dropAt[this.drops++] = i;
      }
      count = c;
      xor = x;
    }
    this.end = i;
  }

  /** Worker `id`'s held prefix of the prompt of the last walk(), in blocks (0 for NONE). */
  heldPrefix(id: number): number {
    if (id < 0 || this.end === 0) return 0;
    if (this.seen[id] === this.pass) return this.depth[id];
    // Not named by the pass: it holds none of the prompt, or it stopped at a drop point or at the
    // pass's end. Which: the first drop point it does not hold (a binary search of its own blocks).
    const own = this.own[id];
    const sv = this.sv;
    let held = 0;
    const holdsFirst = this.rootsKnown
      ? this.rootMark[id] === this.pass
      : own !== undefined && own.find(sv[0], sv[1]) !== NONE;
    if (holdsFirst && own !== undefined) {
      const at = this.dropAt;
      let lo = 0;
      let hi = this.drops;
      while (lo < hi) {
        const mid = (lo + hi) >>> 1;
        const only = this.dropOnly[mid];
        if (only >= 0 ? only === id : own.find(sv[2 * at[mid]], sv[2 * at[mid] + 1]) !== NONE) lo = mid + 1;
        else hi = mid;
      }
      held = lo === this.drops ? this.end : at[lo];
    }
    this.seen[id] = this.pass;
    this.depth[id] = held;
    return held;
  }

  /** One worker's held prefix of the last walk()'s prompt. */
  heldPrefixOf(instance: string, dpRank: number): number {
    return this.heldPrefix(this.idOrNone(instance, dpRank));
  }

  /** Changes when idsOf is given another list than the one before (not when only ids change). */
  get listEpoch(): number {
    return this.listIds.lists;
  }

  /** The candidates' worker ids (NONE: none given), in the list's order (no lookup for a list seen before). */
  idsOf(candidates: ReadonlyArray<{ instance: string; dpRank: number }>): Int32Array {
    return this.listIds.of(candidates, this.version, this.idOrNone, this.taken);
  }

  /** Each candidate's held prefix of the last walk()'s prompt, in the list's order (no lookup for a list seen before). */
  heldPrefixesOf(candidates: ReadonlyArray<{ instance: string; dpRank: number }>): Int32Array {
    return this.heldPrefixesOfIds(this.idsOf(candidates));
  }

  /** The same for workers by id (idsOf), in order; into the caller's `into` when it is long enough (its first ids.length). */
  heldPrefixesOfIds(ids: Int32Array, into?: Int32Array): Int32Array {
    const reuse = into !== undefined && into.length >= ids.length;
    const out = reuse ? into : new Int32Array(ids.length);
    if (this.end === 0) {
      if (reuse) out.fill(0, 0, ids.length);
      return out;
    }
    for (let k = 0; k < ids.length; k++) out[k] = this.heldPrefix(ids[k]);
    return out;
  }
}
