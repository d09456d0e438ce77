// The dashboard of one `serve --workers` process, showing the whole router: before each snapshot
// it asks the other processes (through the primary) for what only they hold (their decisions since
// the last ask, request and prefix counts, queue depth, hit checks) and merges it into its own.
// Index, load and instance health are already the whole router's in every process.
import type { DashboardSnapshot, DashboardSource, DecisionRecord } from './source.js';

/** What one other process adds to the dashboard. */
export interface DashboardPart {
  /** Names the process (a replacement has another pid, and starts its decision count again). */
  pid: number;
  /** Decisions it has logged since it started. */
  seq: number;
  /** Its decisions after the asker's cursor (the most recent, at most a backfill's worth). */
  decisions: DecisionRecord[];
  prefix: DashboardSnapshot['prefix'];
  requests: DashboardSnapshot['requests'];
  queue_depth: number;
  /** Its closed-loop verdicts per instance. */
  hit_check: Record<string, { agree: number; over: number; under: number }>;
}

/** Decisions of the other processes kept for a backfill. */
const REMOTE_DECISIONS = 200;

/**
 * `ask(cursors)` returns the other processes' parts; `cursors` maps a pid to the last decision
 * seq seen from it (absent: send the most recent ones).
 */
export function wholeRouterSource(
  local: DashboardSource,
  ask: (cursors: Record<string, number>) => Promise<DashboardPart[]>,
): DashboardSource {
  let parts: DashboardPart[] = [];
  const cursors: Record<string, number> = {};
  let remote: DecisionRecord[] = [];
  const listeners = new Set<(d: DecisionRecord) => void>();
  let inflight: Promise<void> | null = null;
  const refresh = async () => {
    parts = await ask({ ...cursors });
    const fresh: DecisionRecord[] = [];
    for (const p of parts) {
      cursors[String(p.pid)] = p.seq;
      fresh.push(...p.decisions);
    }
    fresh.sort((a, b) => a.time - b.time);
    remote = remote.concat(fresh).slice(-REMOTE_DECISIONS);
    for (const d of fresh) for (const l of listeners) l(d);
  };
  return {
    refresh() {
      // One question at a time: callers that come while one is out share its answer.
      inflight ??= refresh().finally(() => (inflight = null));
      return inflight;
    },
    snapshot() {
      const s = local.snapshot();
      for (const p of parts) {
        s.prefix.prompt_tokens += p.prefix.prompt_tokens;
        s.prefix.overlap_tokens += p.prefix.overlap_tokens;
        s.requests.total += p.requests.total;
        s.requests.errors += p.requests.errors;
        s.queue_depth += p.queue_depth;
        for (const i of s.instances) {
          const h = p.hit_check[i.id];
          if (!h) continue;
          i.hit_check.agree += h.agree;
          i.hit_check.over += h.over;
          i.hit_check.under += h.under;
        }
      }
      return s;
    },
    recentDecisions(limit) {
      const all = local.recentDecisions(limit).concat(remote.slice(-limit));
      return all.sort((a, b) => a.time - b.time).slice(-limit);
    },
    onDecision(listener) {
      const off = local.onDecision(listener);
      listeners.add(listener);
      return () => {
        off();
        listeners.delete(listener);
      };
    },
  };
}
