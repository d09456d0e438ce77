// Active health probes: GET <probe_path> on every instance. The upstream pool's health interceptor
// records the outcome (a 5xx, a refused connection or a timeout is a failure), as for any request.
import type { RouterConfig } from '../config/schema.js';
import type { ModelRuntime } from './models.js';

/** While probes are off (`probe_interval_ms` 0), how often a reload turning them on is noticed. */
const OFF_RECHECK_MS = 1000;

/** Probes every `probe_interval_ms` as the running config says it (a reload changes, starts or stops them). */
export function startProbes(
  models: () => ModelRuntime[],
  health: () => RouterConfig['health'],
): { stop(): void } {
  let timer: NodeJS.Timeout | null = null;
  let stopped = false;
  const schedule = () => {
    if (stopped) return;
    const every = health().probe_interval_ms;
    // The next round is timed from the end of this one: rounds never overlap.
    timer = setTimeout(() => void (every === 0 ? Promise.resolve() : probeAll()).catch(() => undefined).finally(schedule), every === 0 ? OFF_RECHECK_MS : every);
    timer.unref();
  };
  const probeAll = async () => {
    const cfg = health();
    await Promise.all(
      models().flatMap((m) =>
        m.instances.map(async (i) => {
          // Timeouts are undici's (not an abort signal): they count as the engine's failure.
          const r = await i.upstream.pool.request({ path: i.upstream.basePath + cfg.probe_path, method: 'GET', headersTimeout: cfg.probe_timeout_ms, bodyTimeout: cfg.probe_timeout_ms }).catch(() => null);
          await r?.body.dump().catch(() => undefined);
        }),
      ),
    );
  };
  schedule();
  return {
    stop: () => {
      stopped = true;
      if (timer) clearTimeout(timer);
    },
  };
}
