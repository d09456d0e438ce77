// A bounded log of recent routing decisions (for the dashboard), fed as a forward observer.
import type { DecisionRecord } from '../dashboard/source.js';
import type { ForwardObserver } from '../proxy/forward.js';
import { type Decision, overlapTokens } from '../scheduler/scheduler.js';

const EMPTY_SEQ = new BigUint64Array(0);

/** What a decision leaves behind: the few fields a record needs, made into one only when read. */
interface Entry {
  time: number;
  d: Decision;
  attempt: number;
}

export class DecisionLog implements ForwardObserver {
  /** A ring of the last `capacity` decisions: `next` is where the next one goes. */
  private readonly ring: Array<Entry | undefined>;
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
    this.ring = new Array<Entry | undefined>(capacity);
  }

  routed: NonNullable<ForwardObserver['routed']> = (d, attempt) => {
    const c = d.chosen!;
    if (attempt === 0) {
      this.promptTokens += d.isl;
      this.overlapTokens += Math.min(d.isl, Math.max(c.disk, c.shared) * d.blockSize);
    }
    // Records are built when the dashboard reads them, not on the request path. The entry keeps the
    // decision's candidates (made for this request, never changed after), not its block hashes.
    const e: Entry = { time: this.now(), d: { ...d, seq: EMPTY_SEQ }, attempt };
    this.ring[this.next] = e;
    this.next = (this.next + 1) % this.capacity;
    if (this.count < this.capacity) this.count++;
    this.logged++;
    if (this.listeners.size > 0) {
      const rec = this.record(e);
      for (const l of this.listeners) l(rec);
    }
  };

  private record({ time, d, attempt }: Entry): DecisionRecord {
    const c = d.chosen!;
    return {
      time,
      model: this.modelOf(c.instance),
      policy: d.policy,
      prompt_tokens: d.isl,
      chosen: c.instance,
      chosen_dp_rank: c.dpRank,
      overlap_tokens: Math.min(d.isl, Math.max(c.disk, c.shared) * d.blockSize),
      attempt,
      candidates: d.candidates.map((x) => ({
        instance: x.instance,
        dp_rank: x.dpRank,
        overlap: overlapTokens(x, d.blockSize),
        credited_blocks: x.creditedBlocks,
        prefill_blocks: x.prefillBlocks,
        decode_blocks: x.decodeBlocks,
        cost: x.cost,
        load: { active_prefill_tokens: x.load.activePrefillTokens, active_blocks: x.load.activeBlocks },
        busy: x.busy,
      })),
    };
  }

  finished: NonNullable<ForwardObserver['finished']> = (_i, status) => {
    this.total++;
    if (status >= 400) this.errors++;
  };

  /** The last `limit` decisions, oldest first. */
  recent(limit: number): DecisionRecord[] {
    const n = Math.max(0, Math.min(limit, this.count));
    const out: DecisionRecord[] = [];
    for (let k = n; k > 0; k--) out.push(this.record(this.ring[(this.next - k + this.capacity) % this.capacity]!));
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
    routed: (...a) => obs.forEach((o) => o.routed?.(...a)),
    firstByte: (...a) => obs.forEach((o) => o.firstByte?.(...a)),
    finished: (...a) => obs.forEach((o) => o.finished?.(...a)),
    retried: (...a) => obs.forEach((o) => o.retried?.(...a)),
    healthChanged: (...a) => obs.forEach((o) => o.healthChanged?.(...a)),
    reported: (...a) => obs.forEach((o) => o.reported?.(...a)),
  };
}
