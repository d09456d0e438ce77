// LoRA adapter discovery: every `lora.discover_interval_ms`, ask each instance's /v1/models which
// adapters it serves (vLLM lists each loaded adapter with `parent` = the base model, as engine-sim
// does) and tell the AdapterDirectory. An instance that does not answer keeps what it said last.
import type { RouterConfig } from '../config/schema.js';
import type { AdapterDirectory } from '../lora/directory.js';
import type { ModelRuntime } from './models.js';

interface ModelCard {
  id?: unknown;
  parent?: unknown;
}

/** Adapter ids in a /v1/models answer whose parent is one of the base model's names. */
export function adaptersIn(body: unknown, baseNames: ReadonlySet<string>): string[] | null {
  const data = (body as { data?: unknown } | null)?.data;
  if (!Array.isArray(data)) return null;
  const out: string[] = [];
  for (const card of data as ModelCard[]) {
    if (typeof card?.id === 'string' && typeof card.parent === 'string' && baseNames.has(card.parent) && !baseNames.has(card.id)) out.push(card.id);
  }
  return out;
}

export function startAdapterDiscovery(models: () => ModelRuntime[], cfg: () => RouterConfig, dir: AdapterDirectory): { stop(): void; runOnce(): Promise<void> } {
  let running = false;
  const runOnce = async () => {
    if (running || !cfg().lora.discover) return;
    running = true;
    try {
      await Promise.all(
        models().flatMap((m) => {
          const names = new Set([m.name, ...m.cfg.aliases]);
          return m.instances.map(async (i) => {
            const timeout = Math.min(5000, cfg().lora.discover_interval_ms);
            const r = await i.upstream.pool.request({ path: `${i.upstream.basePath}/v1/models`, method: 'GET', headersTimeout: timeout, bodyTimeout: timeout }).catch(() => null);
            if (!r) return;
            const body = r.statusCode === 200 ? await r.body.json().catch(() => null) : await r.body.dump().then(() => null, () => null);
            const found = adaptersIn(body, names);
            if (found) dir.setDiscovered(i.id, m.name, found);
          });
        }),
      );
    } finally {
      running = false;
    }
  };
  let timer: NodeJS.Timeout | null = null;
  const schedule = () => {
    timer = setTimeout(() => void runOnce().finally(schedule), cfg().lora.discover_interval_ms);
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
