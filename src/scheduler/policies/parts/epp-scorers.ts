// The endpoint picker's scorers and picker shared by the GIE and llm-d profiles (reimplemented from
// kubernetes-sigs/gateway-api-inference-extension at 1748e82: pkg/epp/framework/plugins/scheduling/
// scorer/{queuedepth/queue.go, kvcacheutilization/kvcache_utilization.go}, picker/maxscore/picker.go,
// pkg/epp/scheduling/scheduler_profile.go; unchanged in llm-d/llm-d-router at ebab687). A profile's
// score is the sum over its scorers of weight x the scorer's value clamped to [0, 1]; the picker
// takes the highest, uniformly among equals (it shuffles, then sorts stably).
import type { EngineLoad } from '../../../engine-load/load-view.js';
import { argminRandomTies } from './workers.js';

/** Waiting requests: (max - q) / (max - min) over the candidates, 1 for all when they are equal. */
export function queueScores(waiting: readonly number[]): number[] {
  let min = Infinity;
  let max = -Infinity;
  for (const q of waiting) {
    if (q < min) min = q;
    if (q > max) max = q;
  }
  return waiting.map((q) => (max === min ? 1 : (max - q) / (max - min)));
}

/** KV cache utilisation: 1 - usage (0..1). */
export const kvUtilizationScore = (usage: number): number => 1 - usage;

export const clamp01 = (x: number): number => (x < 0 ? 0 : x > 1 ? 1 : x);

/**
 * An endpoint's gauges as the picker reads them. A candidate the router has no fresh scrape of
 * scores as an endpoint whose metrics are still zero (what the EPP holds before its first scrape):
 * an empty queue and an empty cache. (The EPP keeps scoring the last values it scraped; the router
 * drops a scrape older than engine_metrics.stale_ms, so a stale endpoint looks idle here.)
 */
export function gauges(e: EngineLoad | null): { waiting: number; kvUsage: number } {
  return { waiting: e?.waiting ?? 0, kvUsage: e?.kvUsage ?? 0 };
}

/** Index of the highest total, uniformly among equal totals; -1 for none. */
export const maxScore = (totals: readonly number[], rand: () => number): number =>
  argminRandomTies(
    totals.map((t) => -t),
    rand,
  );
