// Engine load scraping: every `engine_metrics.interval_ms`, read each instance's Prometheus metrics
// into the EngineLoadView. A failed scrape leaves the last one to age out (engine_metrics.stale_ms).
import type { RouterConfig } from '../config/schema.js';
import { type EngineLoadView, loadsFromSamples } from '../engine-load/load-view.js';
import { parsePromSamples } from '../engine-load/prom-text.js';
import { startInstancePoll } from './instance-poll.js';
import type { ModelRuntime } from './models.js';

export function startEngineScrape(
  models: () => ModelRuntime[],
  cfg: () => RouterConfig,
  view: EngineLoadView,
  now: () => number,
): { stop(): void; runOnce(): Promise<void> } {
  return startInstancePoll(models, {
    path: () => cfg().engine_metrics.path,
    intervalMs: () => cfg().engine_metrics.interval_ms,
    enabled: () => cfg().engine_metrics.scrape,
    maxBytes: 16 << 20,
    take: (_m, i, body) => {
      const loads = loadsFromSamples(parsePromSamples(body.toString('utf8')), now());
      if (loads) view.set(i.id, loads);
    },
  });
}
