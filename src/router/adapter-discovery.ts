// LoRA adapter discovery: every `lora.discover_interval_ms`, ask each instance's /v1/models which
// adapters it serves (vLLM lists each loaded adapter with `parent` = the base model, as engine-sim
// does) and tell the AdapterDirectory. An instance that does not answer keeps what it said last.
import type { RouterConfig } from '../config/schema.js';
import type { AdapterDirectory } from '../lora/directory.js';
import { startInstancePoll } from './instance-poll.js';
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
    if (
      typeof card?.id === 'string' &&
      typeof card.parent === 'string' &&
      baseNames.has(card.parent) &&
      !baseNames.has(card.id)
    )
      out.push(card.id);
  }
  return out;
}

export function startAdapterDiscovery(
  models: () => ModelRuntime[],
  cfg: () => RouterConfig,
  dir: AdapterDirectory,
): { stop(): void; runOnce(): Promise<void> } {
  return startInstancePoll(models, {
    path: () => '/v1/models',
    intervalMs: () => cfg().lora.discover_interval_ms,
    enabled: () => cfg().lora.discover,
    maxBytes: 4 << 20,
    take: (m, i, body) => {
      let parsed: unknown = null;
      try {
        parsed = JSON.parse(body.toString('utf8'));
      } catch {
        return; // not JSON: keep what the instance said last
      }
      const found = adaptersIn(parsed, new Set([m.name, ...m.cfg.aliases]));
      if (found) dir.setDiscovered(i.id, m.name, found);
    },
  });
}
