// The query: the tier walk over a prompt's seq hashes (see walk()), for every holder (query) or for
// the scheduler's candidate list in its order (overlapsFor, with the LRU estimate of each device
// prefix). Scratch arrays are indexed by candidate id and holder id and stamped with the query id,
// so a query clears nothing; the walk sizes them itself. See README.md (module map).
import { CandidateIds } from '../common/candidate-ids.js';
import { grow, hashView, recordMix } from './layout.js';
import { HB, HOT_MIN_RECORDS } from './hot-blocks.js';
import { TIER_BIT } from './tiers.js';
import { IndexWrites } from './writes.js';

// Row offsets read here (a module-local copy: see records.ts RECORD_LAYOUT), and NONE (= layout.ts NONE).
const NONE = -1;
const R = 8;
const R_HOLDER = 2;
const R_NEXT_E = 3;
const R_POS = 7;
const R_RUN = 6;
const T = 4;
const T_HEAD = 3;
const T_SIG = 2;
/** This module's copy of the row offsets (checked against RECORD_LAYOUT). */
export const WALK_LAYOUT = { R, R_HOLDER, R_NEXT_E, R_POS, R_RUN, T, T_HEAD, T_SIG };

/** Query ids wrap here; the stamps are cleared then, so an old stamp never passes for a new query. */
const QUERY_ID_LIMIT = 0x3fffffff;
/** A predicted stop of a shared-pool holder (other nodes name a tracked candidate, or NONE). */
const SHARED = -2;
// predicted-stop node: [who (candidate, SHARED or NONE), tier bit, next in its depth's list] (the
// record mixes are summed per depth, in the depth's row)
const Q = 3;
const GPU = TIER_BIT.GPU;
const GPU_CPU = TIER_BIT.GPU | TIER_BIT.CPU;
const TOUCH_WINDOW = 64;
/** Tables up to this size (a typical L2 cache) are walked without prefetching. */
const PREFETCH_MIN_BYTES = 1 << 20;
/** A level still extending (its depth is fixed when it stops). */
const EXT = -1;
// Candidate scratch row: the query stamp, the overlapsFor stamp, the three levels (EXT while open),
// and the live holders per level (any, device, device + host).
const C = 8;
const C_STAMP = 0;
const C_WANT = 1;
const C_DEV = 2;
const C_HOST = 3;
const C_DISK = 4;
const C_ANY = 5;
const C_GPU = 6;
const C_HOSTS = 7;
// Predicted-stop row per depth: the seed stamp, the first node of its list, the XOR of the list's mixes.
const B = 4;
const B_STAMP = 0;
const B_HEAD = 1;
const B_MIX = 2;

export interface CandidateOverlap {
  instance: string;
  dpRank: number;
  /** Longest prefix (blocks) on the device tier. */
  device: number;
  /** Longest prefix on device + host. */
  host: number;
  /** Longest prefix on any of the instance's own tiers (device + host + disk + external). */
  disk: number;
}

export interface OverlapResult {
  /** Complete blocks in the query. */
  queriedBlocks: number;
  /** Candidates with at least one matched block. */
  candidates: CandidateOverlap[];
  /** Longest contiguous prefix held by shared-pool backends (readable by every instance). */
  sharedBlocks: number;
}

/** Overlaps of a list of candidates, in the list's order (0 for a candidate holding none of the prompt). */
export interface CandidateOverlaps {
  device: Int32Array;
  host: Int32Array;
  disk: Int32Array;
  /** The device prefix left after the prefill queued there (survivingPrefix); `device` without allocations. */
  surviving: Int32Array;
  /** Longest contiguous prefix held by shared-pool backends. */
  shared: number;
}

export abstract class IndexWalk extends IndexWrites {
  /** The candidate list overlapsFor() resolved last, and its ids (valid while no candidate id was added). */
  private readonly listIds = new CandidateIds();
  private readonly candidateId = (instance: string, dpRank: number): number =>
    this.candIds.get(instance, dpRank) ?? NONE;
  /**
   * Query scratch, a row of C per candidate id (stamps, levels, live holders per level): a stop
   * reads and writes one cache line of it, not one per field.
   */
  protected qc = new Int32Array(64 * C);
  /** Candidates still walking (those whose disk level has ended are skipped, and dropped on the next settle). */
  protected qAlive = new Int32Array(64);
  protected qTracked = new Int32Array(64);
  /** Until the first settle after block 0 the live candidates are the tracked ones: qAlive is not written twice. */
  protected qAliveInTracked = false;
  protected qAliveN = 0;
  protected qLive = 0;
  protected qTrackedN = 0;
  /**
   * Kept when qKeepFirst, for eviction judgements: the holder's record of block 0 in query qhFirstQ;
   * the last seed (qhSeedK-th of query qhSeedQ) that found it and where that seed predicted it stops.
   * Between seeds every prediction held, so a holder holds nothing from that stop, or from the next
   * seed that did not find it, to the end of the walk.
   */
  protected qhFirst = new Int32Array(16);
  protected qhFirstQ = new Int32Array(16);
  protected qhSeedQ = new Int32Array(16);
  protected qhSeedK = new Int32Array(16);
  protected qhSeedEnd = new Int32Array(16);
  protected qSeedDepth = new Int32Array(16);
  protected qKeepFirst = false;
  /**
   * Per candidate id, the query whose eviction judgement reads its holders' seeds (allocations > 0):
   * a seed keeps the five fields above only for their holders (a block 0 seed wrote them for its ~850
   * records, a cache line each in five arrays, where a decision judges the few loaded candidates).
   */
  protected qJudged = new Int32Array(64);
  protected qSeeds = 0;
  protected qSharedN = 0;
  // predicted stops of the current seed: per depth a row of B (its list of nodes, rows of Q, and the
  // XOR of their mixes); a depth whose stamp is not the seed's (qSeedId) has none (a later seed voids a
  // seed's lists)
  protected qb = new Int32Array(256 * B);
  /** Seeds ever made (wrapping like query ids): the stamp of the current seed's depth lists. */
  protected qSeedId = 0;
  protected qNodes = new Int32Array(256 * Q);
  protected qNodeN = 0;
  /** A seed's records read from a block's list (rows of HB, see readRecords). */
  protected qRows = new Int32Array(64 * HB);
  protected queryId = 0;
  /** The ids overlapsFor() marked wanted last (C_WANT), and the mark (the query id it was made in). */
  private wantIds: Int32Array | null = null;
  private wantId = 0;
  /** Where the last walk ended: a level still open (EXT) after it reaches this depth. */
  protected qEnd = 0;
  /** Where prefetch loads go (see U64Table.touch). */
  protected sink = 0;

  /**
   * Walk the prompt's seq hashes and report, per (instance, dp rank), the longest contiguous prefix
   * on the device tier, on device+host, and on any own tier; plus the shared pool's prefix.
   * Speculative records count as device blocks until they expire.
   */
  query(seq: BigUint64Array, now: number, limitInstances?: ReadonlySet<string>): OverlapResult {
    this.qKeepFirst = false;
    const shared = this.walk(seq, now, this.nextQueryId(), limitInstances, false);
    return { queriedBlocks: seq.length, candidates: this.collect(), sharedBlocks: shared };
  }

  /**
   * The same walk for a list of candidates (the scheduler's): their prefixes in the list's order,
   * 0 for a candidate that holds none of the prompt, and no result object per candidate. With
   * `allocations` (blocks the prefill queued on each candidate will allocate; 0 for none),
   * `surviving` is survivingPrefix() of each device prefix, starting from the records the walk read.
   */
  overlapsFor(
    seq: BigUint64Array,
    now: number,
    candidates: ReadonlyArray<{ instance: string; dpRank: number }>,
    allocations?: ArrayLike<number>,
    into?: Int32Array,
  ): CandidateOverlaps {
    const qid = this.nextQueryId();
    const k = candidates.length;
    const ids = this.candidateIds(candidates);
    const qc = this.qc;
    // The list's wanted marks stand while its ids do (the same array): marked again for another list.
    if (ids !== this.wantIds) {
      this.wantIds = ids;
      this.wantId = qid;
      for (let j = 0; j < k; j++) if (ids[j] !== NONE) qc[C * ids[j] + C_WANT] = qid;
    }
    this.qKeepFirst = allocations !== undefined;
    if (allocations !== undefined) {
      const judged = this.qJudged;
      for (let j = 0; j < k; j++) if (ids[j] !== NONE && allocations[j] > 0) judged[ids[j]] = qid;
    }
    const shared = this.walk(seq, now, qid, undefined, true);
    // One buffer for the three columns (a typed array this size is a backing store allocation each),
    // or the caller's (`into`, 4 x the candidates: the answer is then valid until it reuses it).
    const reuse = into !== undefined && into.length >= 4 * k;
    const columns = reuse ? into : new Int32Array(3 * k);
    if (reuse) columns.fill(0, 0, 3 * k);
    const device = columns.subarray(0, k);
    const host = columns.subarray(k, 2 * k);
    const disk = columns.subarray(2 * k, 3 * k);
    const end = this.qEnd;
    for (let j = 0; j < k; j++) {
      const id = ids[j];
      if (id === NONE || qc[C * id + C_STAMP] !== qid) continue;
      const dv = qc[C * id + C_DEV];
      const hs = qc[C * id + C_HOST];
      const dk = qc[C * id + C_DISK];
      device[j] = dv === EXT ? end : dv;
      host[j] = hs === EXT ? end : hs;
      disk[j] = dk === EXT ? end : dk;
    }
    let surviving = device;
    if (allocations) {
      if (reuse) {
        surviving = columns.subarray(3 * k, 4 * k);
        surviving.set(device);
      } else surviving = device.slice();
      const sv = hashView(seq);
      for (let j = 0; j < k; j++) {
        if (device[j] === 0 || !(allocations[j] > 0)) continue;
        const h = this.gpuHolderOf(ids[j]);
        if (h === NONE) continue;
        surviving[j] = this.surviving(
          h,
          sv,
          device[j],
          allocations[j],
          this.qhFirstQ[h] === qid ? this.qhFirst[h] : NONE,
          this.heldUntil(h, qid, seq.length),
        );
      }
    }
    return { device, host, disk, surviving, shared };
  }

  /** After a walk that kept seeds (qKeepFirst): the holder holds no block of the prompt from here to the walk's end. */
  protected heldUntil(h: number, qid: number, n: number): number {
    if (this.qhSeedQ[h] !== qid) return n;
    const k = this.qhSeedK[h];
    const end = this.qhSeedEnd[h];
    return k === this.qSeeds - 1 ? end : Math.min(end, this.qSeedDepth[k + 1]);
  }

  protected candidateIds(candidates: ReadonlyArray<{ instance: string; dpRank: number }>): Int32Array {
    return this.listIds.of(candidates, this.cands.length, this.candidateId);
  }

  protected nextQueryId(): number {
    this.sizeScratch();
    if (++this.queryId > QUERY_ID_LIMIT) {
      this.queryId = 1;
      this.qc.fill(0);
      this.wantIds = null;
      this.qhFirstQ.fill(0);
      this.qhSeedQ.fill(0);
      this.qJudged.fill(0);
    }
    return this.queryId;
  }

  /** Scratch covers every candidate and holder id (writes make ids; the query sizes its own arrays). */
  private sizeScratch(): void {
    if (this.qAlive.length < this.cands.length) {
      let n = this.qAlive.length;
      while (n < this.cands.length) n *= 2;
      this.qc = grow(this.qc, n * C);
      this.qAlive = grow(this.qAlive, n);
      this.qTracked = grow(this.qTracked, n);
      this.qJudged = grow(this.qJudged, n);
    }
    if (this.qhFirst.length < this.holders.length) {
      let n = this.qhFirst.length;
      while (n < this.holders.length) n *= 2;
      this.qhFirst = grow(this.qhFirst, n);
      this.qhFirstQ = grow(this.qhFirstQ, n);
      this.qhSeedQ = grow(this.qhSeedQ, n);
      this.qhSeedK = grow(this.qhSeedK, n);
      this.qhSeedEnd = grow(this.qhSeedEnd, n);
    }
  }

  /**
   * The tier walk. Cost: one probe per block walked, plus the records of the blocks where the holder
   * set is not the one predicted, plus O(1) per holder that stops.
   *
   * A holder's blocks are mostly the chains it stored, so each record read predicts the depth at
   * which its holder stops: the end of its run (see `runs` above). Holders are bucketed by that
   * depth; at each block those due leave the prediction, and the XOR of the predicted holders' record
   * mixes must equal the row's signature (an XOR over the block's records, expiries included). If
   * it does, the holder set is the predicted one: the same trust the signature already had when the
   * walk skipped a block whose signature equalled the previous block's (false agreement ~2^-31).
   * If it does not (a chain stored in pieces, a branch, a newcomer), the block's records are read
   * and predict afresh. Per candidate, counts of live holders per level say when a level ends.
   */
  protected walk(
    seq: BigUint64Array,
    now: number,
    qid: number,
    limit: ReadonlySet<string> | undefined,
    wanted: boolean,
  ): number {
    const sv = hashView(seq);
    const n = seq.length;
    this.qTrackedN = 0;
    this.qAliveN = 0;
    this.qAliveInTracked = false;
    this.qLive = 0;
    this.qSeeds = 0;
    this.qNodeN = 0;
    if (n === 0) return 0;
    if (this.qb.length <= n * B) {
      let m = this.qb.length / B;
      while (m <= n) m *= 2;
      this.qb = new Int32Array(m * B);
    }
    const { table, qb, qc } = this;
    const tbl = table.data;
    // A table that fits in cache gains nothing from prefetching (it only hashes every block twice).
    const prefetch = table.byteLength > PREFETCH_MIN_BYTES;
    if (prefetch) this.sink ^= table.touch(sv, 0, Math.min(n, TOUCH_WINDOW));
    let slot = table.find(sv[0], sv[1]);
    if (slot === NONE) return 0;
    // (Nothing to settle after block 0's seed: every candidate it tracks has a holder there.)
    this.seedBlock(slot, 0, n, now, qid, limit, wanted);
    // Nodes grow while seeding: read them again after each seedBlock.
    let nodes = this.qNodes;
    let seedId = this.qSeedId;
    let predicted = tbl[slot * T + T_SIG];
    let sharedAlive = this.qSharedN > 0;
    let shared = 0;
    if (this.qLive === 0 && !sharedAlive) return 0;
    let i = 1;
    for (; i < n; i++) {
      // Window by window, pull the next blocks' rows into cache ahead of the walk (one cache miss
      // per block otherwise bounds a long query); a walk that stops early wastes at most a window.
      if (prefetch && (i & (TOUCH_WINDOW - 1)) === 0) this.sink ^= table.touch(sv, i, Math.min(n, i + TOUCH_WINDOW));
      slot = table.find(sv[2 * i], sv[2 * i + 1]);
      if (slot === NONE) break;
      const sig = tbl[slot * T + T_SIG];
      if (qb[B * i + B_STAMP] !== seedId) {
        // Nobody due to stop and the holder set as predicted: every live level extends.
        if (sig === predicted) continue;
      } else {
        // Holders due to stop here: without them, is the holder set the predicted one?
        predicted ^= qb[B * i + B_MIX];
        if (sig === predicted) {
          // It is: they stop here, and so do the levels left without a holder.
          for (let k = qb[B * i + B_HEAD]; k !== NONE; k = nodes[k * Q + 2]) {
            const c = nodes[k * Q];
            if (c === SHARED) this.qSharedN--;
            if (c < 0 || qc[C * c + C_DISK] !== EXT) continue;
            const b = nodes[k * Q + 1];
            if (--qc[C * c + C_ANY] === 0) {
              if (qc[C * c + C_DEV] === EXT) qc[C * c + C_DEV] = i;
              if (qc[C * c + C_HOST] === EXT) qc[C * c + C_HOST] = i;
              qc[C * c + C_DISK] = i;
              this.qLive--;
              continue;
            }
            if (b & GPU && --qc[C * c + C_GPU] === 0 && qc[C * c + C_DEV] === EXT) qc[C * c + C_DEV] = i;
            if (b & GPU_CPU && --qc[C * c + C_HOSTS] === 0 && qc[C * c + C_HOST] === EXT) qc[C * c + C_HOST] = i;
          }
          if (sharedAlive && this.qSharedN === 0) {
            shared = i;
            sharedAlive = false;
          }
          if (this.qLive === 0 && !sharedAlive) return shared;
          continue;
        }
      }
      // Not the holder set predicted (a chain stored in pieces, a branch, a newcomer): read this
      // block's records and predict afresh from them.
      this.seedBlock(slot, i, n, now, qid, undefined, false);
      nodes = this.qNodes;
      seedId = this.qSeedId;
      predicted = sig;
      this.settleAll(i);
      if (sharedAlive && this.qSharedN === 0) {
        shared = i;
        sharedAlive = false;
      }
      if (this.qLive === 0 && !sharedAlive) return shared;
    }
    // Every level still open reaches the last block walked (read as such: no pass over the candidates).
    this.qEnd = i;
    return sharedAlive ? i : shared;
  }

  /**
   * Read block i's records: every holder on it is predicted from here (its record's mix, the end of
   * its run, what it means for the answer); counts restart from these holders. At block 0 this is
   * where candidates start being tracked (those `limit` or the stamps admit).
   */
  protected seedBlock(
    slot: number,
    i: number,
    n: number,
    now: number,
    qid: number,
    limit: ReadonlySet<string> | undefined,
    wanted: boolean,
  ): void {
    const { qc, qTracked } = this;
    const alive = this.qAliveInTracked ? qTracked : this.qAlive;
    for (let k = 0; k < this.qAliveN; k++) {
      const o = C * alive[k];
      qc[o + C_ANY] = 0;
      qc[o + C_GPU] = 0;
      qc[o + C_HOSTS] = 0;
    }
    // Seeds from before this block no longer stand: a new stamp voids their depth lists, and their nodes are reused.
    if (++this.qSeedId > QUERY_ID_LIMIT) {
      this.qSeedId = 1;
      this.qb.fill(0);
    }
    const seedId = this.qSeedId;
    const wantId = this.wantId;
    const seedK = this.qSeeds++;
    const keep = this.qKeepFirst;
    if (keep) {
      if (seedK === this.qSeedDepth.length) this.qSeedDepth = grow(this.qSeedDepth, seedK * 2);
      this.qSeedDepth[seedK] = i;
    }
    const { recExp, runLen, hCand, hBit, hSpec, hMix0, qJudged } = this;
    const qb = this.qb;
    // The block's records as rows [record, holder, run, position], in list order: a hot block's
    // contiguous copy, or the list read once into scratch (and kept as a copy when the block has many).
    const tbl = this.table.data;
    const lo = tbl[slot * T];
    const hi = tbl[slot * T + 1];
    const e = this.hot.find(lo, hi);
    let rows: Int32Array;
    let m: number;
    // A copy's expiries beside its rows (a list's are read from the records).
    let exps: Float64Array | null = null;
    if (e >= 0) {
      rows = this.hot.data(e);
      exps = this.hot.expiries(e);
      m = this.hot.size(e);
    } else {
      m = this.readRecords(tbl[slot * T + T_HEAD]);
      rows = this.qRows;
      if (m >= HOT_MIN_RECORDS) this.keepHot(lo, hi, rows, m);
    }
    let k = 0;
    // Room for a node per record, made once (nodes grow while seeding: the walk reads them again).
    if ((k + m) * Q > this.qNodes.length) {
      let size = this.qNodes.length;
      while ((k + m) * Q > size) size *= 2;
      this.qNodes = grow(this.qNodes, size);
    }
    const nodes = this.qNodes;
    let shared = 0;
    let aliveN = this.qAliveN;
    let trackedN = this.qTrackedN;
    let live = this.qLive;
    for (let j = 0; j < m; j++) {
      const r = rows[j * HB];
      const h = rows[j * HB + 1];
      const run = rows[j * HB + 2];
      const pos = rows[j * HB + 3];
      const spec = hSpec[h] === 1;
      const exp = spec ? (exps !== null ? exps[j] : recExp[r]) : 0;
      const b = hBit[h];
      // Who the holder counts for: a tracked candidate's level, the shared pool, or nobody.
      const c = hCand[h];
      let who = NONE;
      if (c === NONE) {
        who = SHARED;
        shared++;
      } else if (!spec || exp > now) {
        if (qc[C * c + C_STAMP] === qid) {
          if (qc[C * c + C_DISK] === EXT) who = c;
        } else if (
          i === 0 &&
          (wanted ? qc[C * c + C_WANT] === wantId : limit === undefined || limit.has(this.cands[c].instance))
        ) {
          // First seen (block 0): tracked from here; a level is open once a holder counts for it.
          qc[C * c + C_STAMP] = qid;
          qc[C * c + C_DEV] = 0;
          qc[C * c + C_HOST] = 0;
          qc[C * c + C_DISK] = EXT;
          qc[C * c + C_ANY] = 0;
          qc[C * c + C_GPU] = 0;
          qc[C * c + C_HOSTS] = 0;
          qTracked[trackedN++] = c;
          aliveN++;
          live++;
          who = c;
        }
        if (who >= 0) {
          qc[C * c + C_ANY]++;
          // At block 0 a level opens with its first holder, so the seed leaves nothing to settle there.
          if (b & GPU) {
            qc[C * c + C_GPU]++;
            if (i === 0) qc[C * c + C_DEV] = EXT;
          }
          if (b & GPU_CPU) {
            qc[C * c + C_HOSTS]++;
            if (i === 0) qc[C * c + C_HOST] = EXT;
          }
        }
      }
      // Where it is predicted to stop: the end of its run. A node goes into that depth's list.
      const end = i + Math.max(1, runLen[run] - pos);
      // (Only the holders of candidates whose eviction is judged: overlapsFor reads no other's.)
      if (keep && c !== NONE && qJudged[c] === qid) {
        if (i === 0) {
          this.qhFirst[h] = r;
          this.qhFirstQ[h] = qid;
        }
        this.qhSeedQ[h] = qid;
        this.qhSeedK[h] = seedK;
        this.qhSeedEnd[h] = end;
      }
      if (end < n) {
        const mix = spec ? recordMix(h, exp) : hMix0[h];
        nodes[k * Q] = who;
        nodes[k * Q + 1] = b;
        // Without a branch (depths are in no order): an old stamp means an empty list, mask -1.
        const o = B * end;
        const d = qb[o + B_STAMP] ^ seedId;
        const stale = (d | -d) >> 31;
        nodes[k * Q + 2] = qb[o + B_HEAD] | stale;
        qb[o + B_MIX] = (qb[o + B_MIX] & ~stale) ^ mix;
        qb[o + B_STAMP] = seedId;
        qb[o + B_HEAD] = k++;
      }
    }
    this.qAliveN = aliveN;
    this.qTrackedN = trackedN;
    if (i === 0) this.qAliveInTracked = true;
    this.qLive = live;
    this.qNodeN = k;
    this.qSharedN = shared;
  }

  /** The records of a block's list (from its head) as rows of HB in qRows, in list order; returns their count. */
  private readRecords(head: number): number {
    const rec = this.rec;
    let rows = this.qRows;
    let j = 0;
    for (let r = head; r !== NONE; r = rec[r * R + R_NEXT_E], j++) {
      if ((j + 1) * HB > rows.length) this.qRows = rows = grow(rows, rows.length * 2);
      rows[j * HB] = r;
      rows[j * HB + 1] = rec[r * R + R_HOLDER];
      rows[j * HB + 2] = rec[r * R + R_RUN];
      rows[j * HB + 3] = rec[r * R + R_POS];
    }
    return j;
  }

  /** Keep the m rows just read of block (lo, hi) as its hot-block copy (see hot-blocks.ts). */
  private keepHot(lo: number, hi: number, rows: Int32Array, m: number): void {
    const hot = this.hot;
    const e = hot.open(m);
    hot.data(e).set(rows.subarray(0, m * HB));
    const exps = hot.expiries(e);
    const { hSpec, recExp } = this;
    for (let j = 0; j < m; j++) exps[j] = hSpec[rows[j * HB + 1]] === 1 ? recExp[rows[j * HB]] : 0;
    hot.commit(e, lo, hi, m);
  }

  /** After a seed: end the levels without a live holder at block i; drop candidates with none (and compact the list). */
  protected settleAll(i: number): void {
    const { qAlive, qc } = this;
    const alive = this.qAliveInTracked ? this.qTracked : qAlive;
    this.qAliveInTracked = false;
    let kept = 0;
    for (let k = 0; k < this.qAliveN; k++) {
      const c = alive[k];
      if (qc[C * c + C_DISK] !== EXT) continue;
      if (qc[C * c + C_ANY] === 0) {
        if (qc[C * c + C_DEV] === EXT) qc[C * c + C_DEV] = i;
        if (qc[C * c + C_HOST] === EXT) qc[C * c + C_HOST] = i;
        qc[C * c + C_DISK] = i;
        continue;
      }
      if (qc[C * c + C_GPU] === 0 && qc[C * c + C_DEV] === EXT) qc[C * c + C_DEV] = i;
      if (qc[C * c + C_HOSTS] === 0 && qc[C * c + C_HOST] === EXT) qc[C * c + C_HOST] = i;
      qAlive[kept++] = c;
    }
    this.qAliveN = kept;
    this.qLive = kept;
  }

  // Kept out of query(): V8 deopts a hot loop whose exit path has no type feedback yet.
  protected collect(): CandidateOverlap[] {
    const out: CandidateOverlap[] = [];
    const { qc, qEnd } = this;
    for (let k = 0; k < this.qTrackedN; k++) {
      const c = this.qTracked[k];
      const cand = this.cands[c];
      const device = qc[C * c + C_DEV];
      const host = qc[C * c + C_HOST];
      const disk = qc[C * c + C_DISK];
      out.push({
        instance: cand.instance,
        dpRank: cand.dpRank,
        device: device === EXT ? qEnd : device,
        host: host === EXT ? qEnd : host,
        disk: disk === EXT ? qEnd : disk,
      });
    }
    return out;
  }
}
