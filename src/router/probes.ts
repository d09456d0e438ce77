// Active health probes: GET <probe_path> on every instance. The upstream pool's health interceptor
// records the outcome (a 5xx, a refused connection or a timeout is a failure), as for any request.
import type { RouterConfig } from '../config/schema.js';
import type { ModelRuntime } from './models.js';

/** Longest sleep between looks at the running config: a reload's new interval (or probes turned on) is seen this soon. */
const RECHECK_MS = 1000;

/**
 * Probes every `probe_interval_ms` as the running config says it, counted from the end of the last
 * round (rounds never overlap): a reload changes, starts or stops them within a second.
 */
export function startProbes(models: () => ModelRuntime[], health: () => RouterConfig['health']): { stop(): void } {
  let timer: NodeJS.Timeout | null = null;
  let stopped = false;
  let lastEnd = performance.now();
  const probeAll = async () => {
    const cfg = health();
    await Promise.all(
      models().flatMap((m) =>
        m.instances.map(async (i) => {
          // Timeouts are undici's (not an abort signal): they count as the engine's failure.
          const r = await i.upstream.pool
            .request({
              path: i.upstream.basePath + cfg.probe_path,
              method: 'GET',
              headersTimeout: cfg.probe_timeout_ms,
              bodyTimeout: cfg.probe_timeout_ms,
            })
            .catch(() => null);
          await r?.body.dump().catch(() => undefined);
        }),
      ),
    );
  };
  const schedule = () => {
    if (stopped) return;
    const every = health().probe_interval_ms;
    const due = every > 0 ? every - (performance.now() - lastEnd) : Infinity;
    timer = setTimeout(
      () => {
        if (stopped) return;
        if (due > RECHECK_MS) return schedule(); // not yet (or off): look at the config again
        void probeAll()
          .catch(() => undefined)
          .finally(() => {
            lastEnd = performance.now();
            schedule();
          });
      },
      Math.max(0, Math.min(RECHECK_MS, due)),
    );
    timer.unref();
  };
  schedule();
  return {
    stop: () => {
      stopped = true;
      if (timer) clearTimeout(timer);
    },
  };
}
