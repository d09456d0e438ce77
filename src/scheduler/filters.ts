// The filter step: which scored candidates a policy may pick from, and why the others left (the
// explanation names the filter). Health, role (prefill / decode), LoRA and the gateway's subset hint
// narrow the candidate list before scoring, where the router builds it; these two need the scores.
import type { PolicySpec } from './policies/types.js';
import type { CandidateScore, RouteInput } from './scheduler.js';

export type FilterName = 'excluded' | 'busy';

/** A candidate a filter removed. */
export interface Filtered {
  filter: FilterName;
  instance: string;
  dpRank: number;
}

/**
 * `excluded`: instances a failed attempt of this request already tried; `busy`: over a busy
 * threshold (policies whose spec keeps the busy filter). Appends what each removed to `out`.
 */
export function filterCandidates(
  candidates: CandidateScore[],
  input: Pick<RouteInput, 'exclude'>,
  spec: Pick<PolicySpec, 'busyFilter'>,
  out: Filtered[],
): CandidateScore[] {
  let pool = candidates;
  if (input.exclude && input.exclude.size > 0)
    pool = keep(pool, 'excluded', (c) => !input.exclude!.has(c.instance), out);
  if (spec.busyFilter) pool = keep(pool, 'busy', (c) => !c.busy, out);
  return pool;
}

function keep(
  pool: CandidateScore[],
  filter: FilterName,
  ok: (c: CandidateScore) => boolean,
  out: Filtered[],
): CandidateScore[] {
  // Most decisions filter nothing: find the first removal before building a new list.
  let first = 0;
  while (first < pool.length && ok(pool[first])) first++;
  if (first === pool.length) return pool;
  const kept: CandidateScore[] = pool.slice(0, first);
  for (let i = first; i < pool.length; i++) {
    const c = pool[i];
    if (ok(c)) kept.push(c);
    else out.push({ filter, instance: c.instance, dpRank: c.dpRank });
  }
  return kept;
}
