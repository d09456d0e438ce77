// The set of ZMQ listeners, one per registration key. The HTTP API (/register, /unregister), YAML
// pools and the --workers flag drive it; /workers and /metrics read it.
import type { Registry as PromRegistry } from 'prom-client';
import { type IndexWriter, registerInIndex } from '../indexer/writer.js';
import { DEFAULT_INGEST_LIMITS, type IngestLimits } from './listener-ingest.js';
import { type EventMetrics, type StatusCounts, createEventMetrics } from './metrics.js';
import type { Registration, Registry } from './registry.js';
import { DEFAULT_LISTENER_OPTIONS, type ListenerOptions, type ListenerStats, ZmqListener } from './zmq-listener.js';

export interface ListenerPoolDeps {
  registry: Registry;
  /** Every listener writes the index through it (the relay passes its tap). */
  writer: IndexWriter;
  /** Ranks and adapters one publisher may create (default DEFAULT_INGEST_LIMITS). */
  ingestLimits?: IngestLimits;
  /** prom-client registry to register kv_events_* metrics in (default: no metrics). */
  metrics?: PromRegistry;
  options?: Partial<ListenerOptions>;
  /** Clock in ms (default Date.now). */
  now?: () => number;
}

// Fields that make a registration a different publisher: re-adding with any of them changed replaces
// (and purges) the old listener.
const SAME_PUBLISHER: ReadonlyArray<keyof Registration> = [
  'endpoint',
  'replayEndpoint',
  'type',
  'model',
  'loraName',
  'blockSize',
  'additionalSalt',
  'topic',
  'backendId',
  'shared',
];

export class ListenerPool {
  private readonly listeners = new Map<string, ZmqListener>();
  private readonly closing = new Set<Promise<void>>();
  private readonly metrics: EventMetrics;
  private readonly opts: ListenerOptions;
  private readonly now: () => number;
  private closed = false;

  constructor(private readonly deps: ListenerPoolDeps) {
    this.opts = { ...DEFAULT_LISTENER_OPTIONS, ...deps.options };
    this.now = deps.now ?? Date.now;
    this.metrics = createEventMetrics(deps.metrics, () => this.statusCounts());
  }

  /** Start listening for a registration (non-blocking; status starts `pending`). Idempotent per key. */
  add(reg: Registration): void {
    if (this.closed) throw new Error('ListenerPool is closed');
    const old = this.listeners.get(reg.key);
    if (old) {
      if (SAME_PUBLISHER.every((f) => old.reg[f] === reg[f])) return;
      this.track(this.stopListener(reg.key, old));
    }
    registerInIndex(this.deps.writer, reg);
    const l = new ZmqListener(
      reg,
      {
        registry: this.deps.registry,
        writer: this.deps.writer,
        metrics: this.metrics,
        now: this.now,
        limits: this.deps.ingestLimits ?? DEFAULT_INGEST_LIMITS,
      },
      this.opts,
    );
    this.listeners.set(reg.key, l);
    l.start();
  }

  /** Stop a listener: its blocks and ordering state are purged at once, then its sockets close. */
  async remove(key: string): Promise<void> {
    const l = this.listeners.get(key);
    if (!l) return;
    await this.stopListener(key, l);
  }

  /** Stop every listener (purging their streams) and wait for all sockets to close. */
  async close(): Promise<void> {
    this.closed = true;
    const all = [...this.listeners.entries()].map(([k, l]) => this.stopListener(k, l));
    await Promise.allSettled([...all, ...this.closing]);
    this.metrics.detach();
  }

  stats(): ListenerStats[] {
    return [...this.listeners.values()].map((l) => l.stats());
  }

  stat(key: string): ListenerStats | undefined {
    return this.listeners.get(key)?.stats();
  }

  has(key: string): boolean {
    return this.listeners.has(key);
  }

  get size(): number {
    return this.listeners.size;
  }

  statusCounts(): StatusCounts {
    const c: StatusCounts = { pending: 0, active: 0, paused: 0, failed: 0 };
    for (const l of this.listeners.values()) c[l.currentStatus]++;
    return c;
  }

  private stopListener(key: string, l: ZmqListener): Promise<void> {
    if (this.listeners.get(key) === l) this.listeners.delete(key);
    return l.stop(true);
  }

  private track(p: Promise<void>): void {
    this.closing.add(p);
    void p.finally(() => this.closing.delete(p));
  }
}
