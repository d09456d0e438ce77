// A bounded log of recent routing decisions (for the dashboard), fed as a forward observer.
import type { DecisionRecord } from '../dashboard/source.js';
import type { ForwardObserver } from '../proxy/forward.js';
import { overlapTokens } from '../scheduler/scheduler.js';

export class DecisionLog implements ForwardObserver {
  private readonly ring: DecisionRecord[] = [];
  private readonly listeners = new Set<(d: DecisionRecord) => void>();
  promptTokens = 0;
  overlapTokens = 0;
  total = 0;
  errors = 0;

  constructor(
    private readonly capacity: number,
    private readonly modelOf: (instance: string) => string,
    private readonly now: () => number,
  ) {}

  routed: NonNullable<ForwardObserver['routed']> = (d, attempt) => {
    const c = d.chosen!;
    const overlap = Math.min(d.isl, Math.max(c.disk, c.shared) * d.blockSize);
    if (attempt === 0) {
      this.promptTokens += d.isl;
      this.overlapTokens += overlap;
    }
    const rec: DecisionRecord = {
      time: this.now(),
      model: this.modelOf(c.instance),
      policy: d.policy,
      prompt_tokens: d.isl,
      chosen: c.instance,
      chosen_dp_rank: c.dpRank,
      overlap_tokens: overlap,
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
    this.ring.push(rec);
    if (this.ring.length > this.capacity) this.ring.shift();
    for (const l of this.listeners) l(rec);
  };

  finished: NonNullable<ForwardObserver['finished']> = (_i, status) => {
    this.total++;
    if (status >= 400) this.errors++;
  };

  recent(limit: number): DecisionRecord[] {
    return this.ring.slice(-limit);
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
