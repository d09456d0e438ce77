// Which instances serve which LoRA adapter of which base model: from the config (listed per model or
// per instance) and from the engines themselves (vLLM lists loaded adapters in /v1/models with their
// `parent`). Pure: the discovery adapter (src/router/adapter-discovery.ts) feeds it.

export interface AdapterRoute {
  adapter: string;
  /** The base model's configured name. */
  model: string;
  /** Instances serving the adapter (configured or discovered). */
  instances: ReadonlySet<string>;
}

interface Entry {
  model: string;
  adapters: ReadonlySet<string>;
}

export class AdapterDirectory {
  private readonly configured = new Map<string, Entry>();
  private readonly discovered = new Map<string, Entry>();
  private index: Map<string, AdapterRoute> | null = null;

  /** Adapters the config lists for an instance (replaces the earlier list; empty removes it). */
  setConfigured(instance: string, model: string, adapters: Iterable<string>): void {
    this.set(this.configured, instance, model, adapters);
  }

  /** Adapters an instance reported itself (replaces what it reported before). */
  setDiscovered(instance: string, model: string, adapters: Iterable<string>): void {
    this.set(this.discovered, instance, model, adapters);
  }

  /** Drop everything discovery reported (discovery was turned off). */
  clearDiscovered(): void {
    if (this.discovered.size === 0) return;
    this.discovered.clear();
    this.index = null;
  }

  /** The instance left the pool. */
  forget(instance: string): void {
    this.configured.delete(instance);
    this.discovered.delete(instance);
    this.index = null;
  }

  /** Where an adapter is served, or null when no instance serves it. */
  resolve(adapter: string): AdapterRoute | null {
    return this.routes().get(adapter) ?? null;
  }

  /** Every adapter with its base model and instances, sorted by name. */
  list(): AdapterRoute[] {
    return [...this.routes().values()].sort((a, b) => (a.adapter < b.adapter ? -1 : a.adapter > b.adapter ? 1 : 0));
  }

  /** Adapters an instance serves. */
  adaptersOf(instance: string): string[] {
    return [
      ...new Set([
        ...(this.configured.get(instance)?.adapters ?? []),
        ...(this.discovered.get(instance)?.adapters ?? []),
      ]),
    ].sort();
  }

  private set(map: Map<string, Entry>, instance: string, model: string, adapters: Iterable<string>): void {
    const set = new Set(adapters);
    const old = map.get(instance);
    if (old && old.model === model && old.adapters.size === set.size && [...set].every((a) => old.adapters.has(a)))
      return;
    if (set.size === 0) map.delete(instance);
    else map.set(instance, { model, adapters: set });
    this.index = null;
  }

  private routes(): Map<string, AdapterRoute> {
    if (this.index) return this.index;
    const out = new Map<string, { adapter: string; model: string; instances: Set<string> }>();
    for (const map of [this.configured, this.discovered]) {
      for (const [instance, e] of map) {
        for (const adapter of e.adapters) {
          const r = out.get(adapter);
          // One adapter name belongs to one base model: the first that lists it (config first) keeps it.
          if (!r) out.set(adapter, { adapter, model: e.model, instances: new Set([instance]) });
          else if (r.model === e.model) r.instances.add(instance);
        }
      }
    }
    return (this.index = out);
  }
}
