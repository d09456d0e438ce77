// Engine load scraping: every `engine_metrics.interval_ms`, read each instance's Prometheus metrics
// into the EngineLoadView. A failed scrape leaves the last one to age out (engine_metrics.stale_ms).
import type { RouterConfig } from '../config/schema.js';
import { type EngineLoadView, loadsFromSamples } from '../engine-load/load-view.js';
import { parsePromSamples } from '../engine-load/prom-text.js';
import type { ModelRuntime } from './models.js';

export function startEngineScrape(models: () => ModelRuntime[], cfg: () => RouterConfig, view: EngineLoadView, now: () => number): { stop(): void; runOnce(): Promise<void> } {
  let running = false;
  const runOnce = async () => {
    const c = cfg().engine_metrics;
    if (running || !c.scrape) return;
    running = true;
    try {
      const seen = new Set<string>();
      await Promise.all(
        models().flatMap((m) =>
          m.instances.map(async (i) => {
            if (seen.has(i.id)) return;
            seen.add(i.id);
            const timeout = Math.max(50, Math.min(c.interval_ms, 5000));
            const r = await i.upstream.pool.request({ path: i.upstream.basePath + c.path, method: 'GET', headersTimeout: timeout, bodyTimeout: timeout }).catch(() => null);
            if (!r) return;
            if (r.statusCode !== 200) return void (await r.body.dump().catch(() => undefined));
            const text = await r.body.text().catch(() => null);
            const loads = text === null ? null : loadsFromSamples(parsePromSamples(text), now());
            if (loads) view.set(i.id, loads);
          }),
        ),
      );
    } finally {
      running = false;
    }
  };
  let timer: NodeJS.Timeout | null = null;
  const schedule = () => {
    timer = setTimeout(() => void runOnce().finally(schedule), cfg().engine_metrics.interval_ms);
    timer.unref();
  };
  void runOnce().finally(schedule);
  return {
    stop: () => {
      if (timer) clearTimeout(timer);
      timer = null;
    },
    runOnce,
  };
}
