// Which workers hold each booked block (an inverted map of the workers' in-flight blocks), so that
// one pass over a prompt answers every worker's held prefix: O(blocks walked + holders that stop)
// per decision, not a lookup into each candidate's own table (O(log prompt) cache misses each).
// Whoever holds block i of a prompt holds blocks 0..i (bookings hold whole prompts and a seq hash
// names its whole prefix), so along the prompt the set of workers only shrinks: an unchanged count
// is an unchanged set, a count one lower names the worker that stopped by the XOR of the ids, and
// only where several stop at once is the block's list read.
import { CandidateIds } from '../common/candidate-ids.js';
import { grow, NONE } from '../indexer/layout.js';
import { U64Table } from '../indexer/u64-table.js';

// table row: [lo, hi, used, workers holding it, XOR of their ids, first node of their list]
const BT = 6;
const B_COUNT = 3;
const B_XOR = 4;
const B_HEAD = 5;
// list node: [worker id, previous node, next node]
const NB = 3;
/** A worker still holding the prompt where the pass is (its depth is fixed when it stops). */
const EXT = -1;
const PASS_LIMIT = 0x3fffffff;

export class BookedBlocks {
  private readonly table = new U64Table(BT, 1024);
  private nodes = new Int32Array(NB * 1024);
  private nodeN = 0;
  private freeNodes = NONE;
  /** Worker ids by instance and dp rank: kept while the instance is in the pool (a candidate list's ids stay valid). */
  private readonly names = new Map<string, number[]>();
  private readonly freeIds: number[] = [];
  private ids = 0;
  /** Changes when an id is given (CandidateIds' validity: a candidate without one may have one now). */
  private version = 0;
  private readonly listIds = new CandidateIds();
  private readonly idOrNone = (instance: string, dpRank: number): number => this.names.get(instance)?.[dpRank] ?? NONE;
  // pass scratch, indexed by worker id: the pass that saw it at block 0, where it stopped (EXT: not
  // seen stopping), and the last list read ("seed") that still had it
  private seen = new Int32Array(64);
  private depth = new Int32Array(64);
  private seed = new Int32Array(64);
  /** The block of each seed of the current pass. */
  private seedAt = new Int32Array(16);
  private seeds = 0;
  /** Where the current pass ended: the first block no worker holds (or the prompt's length). */
  private end = 0;
  private pass = 0;

  /** The worker's id, made on first use. */
  idOf(instance: string, dpRank: number): number {
    let ranks = this.names.get(instance);
    if (!ranks) this.names.set(instance, (ranks = []));
    const found = ranks[dpRank];
    if (found !== undefined) return found;
    const id = this.freeIds.pop() ?? this.ids++;
    if (id >= this.seen.length) {
      const n = this.seen.length * 2;
      this.seen = grow(this.seen, n);
      this.depth = grow(this.depth, n);
      this.seed = grow(this.seed, n);
    }
    ranks[dpRank] = id;
    this.version++;
    return id;
  }

  /** The instance left the pool (its workers hold no block any more): its ids are reused. */
  dropInstance(instance: string): void {
    const ranks = this.names.get(instance);
    if (!ranks) return;
    for (const id of ranks) if (id !== undefined) this.freeIds.push(id);
    // (No version change: a stale list's id reads 0 until idOf() gives it to someone, which changes it.)
    this.names.delete(instance);
  }

  /** Worker `id` now holds the block; returns its node (what remove() takes). */
  add(id: number, lo: number, hi: number): number {
    let node = this.freeNodes;
    if (node !== NONE) this.freeNodes = this.nodes[node * NB + 2];
    else {
      node = this.nodeN++;
      if (node * NB >= this.nodes.length) this.nodes = grow(this.nodes, this.nodes.length * 2);
    }
    const s = this.table.insert(lo, hi);
    const d = this.table.data;
    const head = this.table.created ? NONE : d[s * BT + B_HEAD];
    const nodes = this.nodes;
    nodes[node * NB] = id;
    nodes[node * NB + 1] = NONE;
    nodes[node * NB + 2] = head;
    if (head !== NONE) nodes[head * NB + 1] = node;
    d[s * BT + B_HEAD] = node;
    d[s * BT + B_COUNT]++;
    d[s * BT + B_XOR] ^= id;
    return node;
  }

  /** The worker of `node` no longer holds the block. */
  remove(node: number, lo: number, hi: number): void {
    const s = this.table.find(lo, hi);
    if (s === NONE) return;
    const d = this.table.data;
    const nodes = this.nodes;
    const prev = nodes[node * NB + 1];
    const next = nodes[node * NB + 2];
    if (prev === NONE) d[s * BT + B_HEAD] = next;
    else nodes[prev * NB + 2] = next;
    if (next !== NONE) nodes[next * NB + 1] = prev;
    d[s * BT + B_XOR] ^= nodes[node * NB];
    nodes[node * NB + 2] = this.freeNodes;
    this.freeNodes = node;
    if (--d[s * BT + B_COUNT] <= 0) this.table.removeSlot(s);
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
    }
    this.seeds = 0;
    this.end = 0;
    if (n === 0) return;
    const { table } = this;
    let s = table.find(sv[0], sv[1]);
    if (s === NONE) return;
    this.readList(s, 0, true);
    let d = table.data;
    let count = d[s * BT + B_COUNT];
    let xor = d[s * BT + B_XOR];
    const { seen, depth } = this;
    const pass = this.pass;
    let i = 1;
    for (; i < n; i++) {
      s = table.find(sv[2 * i], sv[2 * i + 1]);
      if (s === NONE) break;
      d = table.data;
      const c = d[s * BT + B_COUNT];
      const x = d[s * BT + B_XOR];
      if (c === count && x === xor) continue; // the same workers (the set only shrinks)
      if (c === count - 1) {
        // One worker stopped here: the XOR of the ids names it.
        const w = x ^ xor;
        if (w >= 0 && w < this.ids && seen[w] === pass && depth[w] === EXT) {
          depth[w] = i;
          count = c;
          xor = x;
          continue;
        }
      }
      // Several stopped here: whoever is not on this block's list stopped at it.
      this.readList(s, i, false);
      count = c;
      xor = x;
    }
    this.end = i;
  }

  /** Read the workers on the block at slot `s` (block `i` of the prompt): a seed of the pass. */
  private readList(s: number, i: number, first: boolean): void {
    const k = this.seeds++;
    if (k === this.seedAt.length) this.seedAt = grow(this.seedAt, k * 2);
    this.seedAt[k] = i;
    const { nodes, seen, depth, seed, pass } = this;
    for (let node = this.table.data[s * BT + B_HEAD]; node !== NONE; node = nodes[node * NB + 2]) {
      const w = nodes[node * NB];
      if (first) {
        seen[w] = pass;
        depth[w] = EXT;
        seed[w] = 0;
      } else if (seen[w] === pass && depth[w] === EXT) seed[w] = k;
    }
  }

  /** Worker `id`'s held prefix of the prompt of the last walk(), in blocks (0 for NONE). */
  heldPrefix(id: number): number {
    if (id < 0 || this.seen[id] !== this.pass || this.seeds === 0) return 0;
    const d = this.depth[id];
    if (d !== EXT) return d;
    // Still held at its last seed: it stops at the next seed, or held to where the pass ended.
    const k = this.seed[id];
    return k === this.seeds - 1 ? this.end : this.seedAt[k + 1];
  }

  /** One worker's held prefix of the last walk()'s prompt. */
  heldPrefixOf(instance: string, dpRank: number): number {
    return this.heldPrefix(this.idOrNone(instance, dpRank));
  }

  /** Each candidate's held prefix of the last walk()'s prompt, in the list's order (no lookup for a list seen before). */
  heldPrefixesOf(candidates: ReadonlyArray<{ instance: string; dpRank: number }>): Int32Array {
    const ids = this.listIds.of(candidates, this.version, this.idOrNone);
    const out = new Int32Array(ids.length);
    if (this.seeds === 0) return out;
    for (let k = 0; k < ids.length; k++) out[k] = this.heldPrefix(ids[k]);
    return out;
  }
}
