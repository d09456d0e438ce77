// The leaderboard's decision log (--decision-log FILE): one JSON line per routing decision, with
// every candidate's figures as the router saw them, to find out why a policy lost a cell (where did
// it leave a cached prefix, for what predicted queue). Candidates as arrays of DECISION_FIELDS.
import type { Decision } from '../../scheduler/scheduler.js';

/** The columns of each candidate row in the log. */
export const DECISION_FIELDS = [
  'instance',
  'device',
  'host',
  'indexedBlocks',
  'activeRequests',
  'activePrefillTokens',
  'queueMs',
  'prefillMs',
  'ttftMs',
  'cost',
] as const;

const r1 = (v: number) => (Number.isFinite(v) ? Math.round(v * 10) / 10 : null);

export function decisionLine(
  cell: { scenario: string; load: number; seed: number; policy: string },
  i: number,
  d: Decision,
  now: number,
): string {
  return JSON.stringify({
    ...cell,
    i,
    t: r1(now),
    isl: d.isl,
    // The prompt's first block hash (u64: as a string), naming its shared prefix.
    head: d.seq.length ? d.seq[0].toString() : null,
    chosen: d.chosen?.instance ?? null,
    reason: d.reason,
    candidates: d.candidates.map((c) => [
      c.instance,
      c.device,
      c.host,
      c.indexedBlocks,
      c.load.activeRequests,
      c.load.activePrefillTokens,
      r1(c.queueMs),
      r1(c.prefillMs),
      r1(c.ttftMs),
      r1(c.cost),
    ]),
  });
}
