// A bounded log of recent routing decisions (for the dashboard), fed as a forward observer.
import type { DecisionRecord } from '../dashboard/source.js';
import type { ForwardObserver } from '../proxy/forward.js';
import { overlapTokens } from '../scheduler/scheduler.js';

/** Numbers kept per decision slot. */
const S_ATTEMPT = 0;
const S_ISL = 1;
const S_BLOCK_SIZE = 2;
const S_FIRST_ROW = 3;
const S_ROWS = 4;
const S_DP_RANK = 5;
const S_OVERLAP = 6;
const S_FIELDS = 7;
/** Numbers kept per candidate row. */
const C_DP = 0;
const C_DEVICE = 1;
const C_HOST = 2;
const C_DISK = 3;
const C_SHARED = 4;
const C_CREDITED = 5;
const C_PREFILL = 6;
const C_DECODE = 7;
const C_COST = 8;
const C_ACTIVE_PREFILL = 9;
const C_ACTIVE_BLOCKS = 10;
const C_BUSY = 11;
const C_FIELDS = 12;
/** Candidate rows kept per decision slot on average: more candidates per decision keep fewer decisions. */
const ROWS_PER_SLOT = 16;

/**
 * A ring of the last decisions in preallocated columns: a decision's numbers are copied into typed
 * arrays and its strings (instance ids, policy names: the router's own, long-lived) into plain
 * arrays, so the request path allocates nothing here. Keeping the Decision objects instead made
 * each request's candidates survive a few young-generation collections and be promoted, then die
 * in the old generation: most of the router's GC copying (docs/profile.md, round five).
 */
export class DecisionLog implements ForwardObserver {
  private readonly time: Float64Array;
  private readonly nums: Float64Array; // S_FIELDS per slot
  private readonly policy: string[];
  private readonly chosen: string[];
  private readonly rowNums: Float64Array;
  private readonly rowInstance: string[];
  private readonly rowCapacity: number;
  /** Candidate rows written since start (a slot's first row is an absolute row number). */
  private rows = 0;
  private next = 0;
  private count = 0;
  /** Decisions logged since start (the sequence number of the last one). */
  logged = 0;
  private readonly listeners = new Set<(d: DecisionRecord) => void>();
  promptTokens = 0;
  overlapTokens = 0;
  total = 0;
  errors = 0;

  constructor(
    private readonly capacity: number,
    private readonly modelOf: (instance: string) => string,
    private readonly now: () => number,
  ) {
    this.time = new Float64Array(capacity);
    this.nums = new Float64Array(capacity * S_FIELDS);
    this.policy = new Array<string>(capacity).fill('');
    this.chosen = new Array<string>(capacity).fill('');
    this.rowCapacity = Math.max(1, capacity * ROWS_PER_SLOT);
    this.rowNums = new Float64Array(this.rowCapacity * C_FIELDS);
    this.rowInstance = new Array<string>(this.rowCapacity).fill('');
  }

  routed: NonNullable<ForwardObserver['routed']> = (d, attempt) => {
    const c = d.chosen!;
    const overlap = Math.min(d.isl, Math.max(c.disk, c.shared) * d.blockSize);
    if (attempt === 0) {
      this.promptTokens += d.isl;
      this.overlapTokens += overlap;
    }
    const slot = this.next;
    const n = this.nums;
    const at = slot * S_FIELDS;
    const cands = d.candidates;
    const kept = Math.min(cands.length, this.rowCapacity);
    this.time[slot] = this.now();
    n[at + S_ATTEMPT] = attempt;
    n[at + S_ISL] = d.isl;
    n[at + S_BLOCK_SIZE] = d.blockSize;
    n[at + S_FIRST_ROW] = this.rows;
    n[at + S_ROWS] = kept;
    n[at + S_DP_RANK] = c.dpRank;
    n[at + S_OVERLAP] = overlap;
    this.policy[slot] = d.policy;
    this.chosen[slot] = c.instance;
    const rn = this.rowNums;
    for (let k = 0; k < kept; k++) {
      const x = cands[k];
      const row = this.rows++ % this.rowCapacity;
      const r = row * C_FIELDS;
      this.rowInstance[row] = x.instance;
      rn[r + C_DP] = x.dpRank;
      rn[r + C_DEVICE] = x.device;
      rn[r + C_HOST] = x.host;
      rn[r + C_DISK] = x.disk;
      rn[r + C_SHARED] = x.shared;
      rn[r + C_CREDITED] = x.creditedBlocks;
      rn[r + C_PREFILL] = x.prefillBlocks;
      rn[r + C_DECODE] = x.decodeBlocks;
      rn[r + C_COST] = x.cost;
      rn[r + C_ACTIVE_PREFILL] = x.load.activePrefillTokens;
      rn[r + C_ACTIVE_BLOCKS] = x.load.activeBlocks;
      rn[r + C_BUSY] = x.busy ? 1 : 0;
    }
    this.next = (slot + 1) % this.capacity;
    if (this.count < this.capacity) this.count++;
    this.logged++;
    if (this.listeners.size > 0) {
      const rec = this.record(slot);
      for (const l of this.listeners) l(rec);
    }
  };

  /** Whether a slot's candidate rows are still all there (newer decisions may have reused them). */
  private intact(slot: number): boolean {
    return this.rows - this.nums[slot * S_FIELDS + S_FIRST_ROW] <= this.rowCapacity;
  }

  private record(slot: number): DecisionRecord {
    const n = this.nums;
    const at = slot * S_FIELDS;
    const bs = n[at + S_BLOCK_SIZE];
    const first = n[at + S_FIRST_ROW];
    const candidates: DecisionRecord['candidates'] = [];
    for (let k = 0; k < n[at + S_ROWS]; k++) {
      const row = (first + k) % this.rowCapacity;
      const r = row * C_FIELDS;
      const rn = this.rowNums;
      candidates.push({
        instance: this.rowInstance[row],
        dp_rank: rn[r + C_DP],
        overlap: overlapTokens(
          { device: rn[r + C_DEVICE], host: rn[r + C_HOST], disk: rn[r + C_DISK], shared: rn[r + C_SHARED] },
          bs,
        ),
        credited_blocks: rn[r + C_CREDITED],
        prefill_blocks: rn[r + C_PREFILL],
        decode_blocks: rn[r + C_DECODE],
        cost: rn[r + C_COST],
        load: { active_prefill_tokens: rn[r + C_ACTIVE_PREFILL], active_blocks: rn[r + C_ACTIVE_BLOCKS] },
        busy: rn[r + C_BUSY] === 1,
      });
    }
    const chosen = this.chosen[slot];
    return {
      time: this.time[slot],
      model: this.modelOf(chosen),
      policy: this.policy[slot],
      prompt_tokens: n[at + S_ISL],
      chosen,
      chosen_dp_rank: n[at + S_DP_RANK],
      overlap_tokens: n[at + S_OVERLAP],
      attempt: n[at + S_ATTEMPT],
      candidates,
    };
  }

  finished: NonNullable<ForwardObserver['finished']> = (_i, status) => {
    this.total++;
    if (status >= 400) this.errors++;
  };

  /** The last `limit` decisions, oldest first (fewer when many candidates each used up the rows). */
  recent(limit: number): DecisionRecord[] {
    const n = Math.max(0, Math.min(limit, this.count));
    let kept = 0;
    while (kept < n && this.intact((this.next - kept - 1 + this.capacity) % this.capacity)) kept++;
    const out: DecisionRecord[] = [];
    for (let k = kept; k > 0; k--) out.push(this.record((this.next - k + this.capacity) % this.capacity));
    return out;
  }

  /** The decisions logged after sequence number `seq` (the last `limit` of them), oldest first. */
  since(seq: number, limit: number): DecisionRecord[] {
    return this.recent(Math.min(limit, Math.max(0, this.logged - seq)));
  }

  subscribe(l: (d: DecisionRecord) => void): () => void {
    this.listeners.add(l);
    return () => this.listeners.delete(l);
  }
}

/** Fan one observer call out to several observers. */
export function combineObservers(...obs: ForwardObserver[]): ForwardObserver {
  return {
    routed: (...a) =>
      obs.forEach((o) => {
        o.routed?.(...a);
      }),
    firstByte: (...a) =>
      obs.forEach((o) => {
        o.firstByte?.(...a);
      }),
    finished: (...a) =>
      obs.forEach((o) => {
        o.finished?.(...a);
      }),
    retried: (...a) =>
      obs.forEach((o) => {
        o.retried?.(...a);
      }),
    healthChanged: (...a) =>
      obs.forEach((o) => {
        o.healthChanged?.(...a);
      }),
    reported: (...a) =>
      obs.forEach((o) => {
        o.reported?.(...a);
      }),
  };
}
