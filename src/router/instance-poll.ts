// One loop for reading something from every instance periodically (LoRA discovery, engine
// metrics): a GET per instance on its upstream pool, with a total deadline and a size cap, results
// handed to `take`; at most one round at a time; nothing after stop().
import { readCapped } from '../api/body.js';
import type { InstanceRuntime } from '../proxy/forward.js';
import type { ModelRuntime } from './models.js';

export interface InstancePoll {
  /** Path on the instance's base URL. */
  path: () => string;
  intervalMs: () => number;
  enabled: () => boolean;
  /** Largest answer read (larger ones are dropped). */
  maxBytes: number;
  /** A 200 answer's body of an instance of a model. */
  take: (m: ModelRuntime, i: InstanceRuntime, body: Buffer) => void;
}

export function startInstancePoll(
  models: () => ModelRuntime[],
  poll: InstancePoll,
): { stop(): void; runOnce(): Promise<void> } {
  let running = false;
  let stopped = false;
  let timer: NodeJS.Timeout | null = null;
  const runOnce = async () => {
    if (running || stopped || !poll.enabled()) return;
    running = true;
    try {
      const deadline = Math.max(50, Math.min(poll.intervalMs(), 5000));
      const seen = new Set<string>();
      await Promise.all(
        models().flatMap((m) =>
          m.instances.map(async (i) => {
            if (seen.has(i.id)) return;
            seen.add(i.id);
            // A total deadline (undici's own timeouts are idle timeouts): one slow engine cannot hold the round.
            const signal = AbortSignal.timeout(deadline);
            const r = await i.upstream.pool
              .request({ path: i.upstream.basePath + poll.path(), method: 'GET', signal })
              .catch(() => null);
            if (!r) return;
            const body = await readCapped(r.statusCode === 200 ? r.body : null, poll.maxBytes, null).catch(() => null);
            if (r.statusCode !== 200 || body === null) {
              r.body.destroy();
              return;
            }
            if (!stopped) poll.take(m, i, body);
          }),
        ),
      );
    } finally {
      running = false;
    }
  };
  const schedule = () => {
    if (stopped) return;
    timer = setTimeout(() => void runOnce().finally(schedule), poll.intervalMs());
    timer.unref();
  };
  void runOnce().finally(schedule);
  return {
    stop: () => {
      stopped = true;
      if (timer) clearTimeout(timer);
      timer = null;
    },
    runOnce,
  };
}
