// Active health probes: GET <probe_path> on every instance; results feed InstanceHealth.
import type { RouterConfig } from '../config/schema.js';
import type { ModelRuntime } from './models.js';

export function startProbes(
  models: () => ModelRuntime[],
  health: () => RouterConfig['health'],
  now: () => number,
  onChange: (instance: string, event: 'ejected' | 'readmitted') => void,
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
            try {
              const r = await i.upstream.pool.request({ path: i.upstream.basePath + cfg.probe_path, method: 'GET', headersTimeout: cfg.probe_timeout_ms, bodyTimeout: cfg.probe_timeout_ms, signal: AbortSignal.timeout(cfg.probe_timeout_ms) });
              await r.body.dump();
              if (r.statusCode < 500) {
                if (i.health.success()) onChange(i.id, 'readmitted');
              } else if (i.health.failure(now(), `probe HTTP ${r.statusCode}`)) onChange(i.id, 'ejected');
            } catch (err) {
              if (i.health.failure(now(), `probe: ${(err as Error).message}`)) onChange(i.id, 'ejected');
            }
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
