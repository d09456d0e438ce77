// Active health probes: GET <probe_path> on every instance. The upstream pool's health interceptor
// records the outcome (a 5xx, a refused connection or a timeout is a failure), as for any request.
import type { RouterConfig } from '../config/schema.js';
import type { ModelRuntime } from './models.js';

export function startProbes(
  models: () => ModelRuntime[],
  health: () => RouterConfig['health'],
): { stop(): void } {
  const cfg0 = health();
  if (cfg0.probe_interval_ms === 0) return { stop() {} };
  let running = false;
  const probeAll = async () => {
    if (running) return;
    running = true;
    const cfg = health();
    try {
      await Promise.all(
        models().flatMap((m) =>
          m.instances.map(async (i) => {
            // Timeouts are undici's (not an abort signal): they count as the engine's failure.
            const r = await i.upstream.pool.request({ path: i.upstream.basePath + cfg.probe_path, method: 'GET', headersTimeout: cfg.probe_timeout_ms, bodyTimeout: cfg.probe_timeout_ms }).catch(() => null);
            await r?.body.dump().catch(() => undefined);
          }),
        ),
      );
    } finally {
      running = false;
    }
  };
  const timer = setInterval(() => void probeAll(), cfg0.probe_interval_ms);
  timer.unref();
  return { stop: () => clearInterval(timer) };
}
