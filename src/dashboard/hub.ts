// Fans the router's state out to dashboard streams: one snapshot per tick (computed once, shared by
// every client) and each routing decision as it happens. Everything is bounded: clients, decisions
// per client per second, and bytes a slow client may lag behind (then decisions are dropped and
// counted; far behind, it is disconnected). The timer and the decision subscription exist only
// while a client is connected.
import type { DashboardSource, DecisionRecord } from './source.js';
import { sseComment, sseFrame } from './sse.js';

export interface HubOptions {
  /** Snapshot period (ms). */
  intervalMs: number;
  /** Concurrent streams; further ones are refused. */
  maxClients: number;
  /** Decisions sent to one client per second at most (bursts up to this many). */
  maxDecisionsPerSecond: number;
  /** Bytes a client may have queued before its decisions are dropped; 4x this disconnects it. */
  maxBufferedBytes: number;
  /** Decisions replayed to a client when it connects. */
  backfill: number;
}

export const DEFAULT_HUB_OPTIONS: HubOptions = {
  intervalMs: 1000,
  maxClients: 32,
  maxDecisionsPerSecond: 50,
  maxBufferedBytes: 1 << 20,
  backfill: 25,
};

interface Client {
  controller: ReadableStreamDefaultController<Uint8Array>;
  /** Its first snapshot and backfill are sent (decisions before them are in the backfill). */
  ready: boolean;
  budget: number;
  refilledAt: number;
  dropped: number;
}

const encoder = new TextEncoder();

export class DashboardHub {
  private readonly clients = new Set<Client>();
  private timer: NodeJS.Timeout | null = null;
  private unsubscribe: (() => void) | null = null;

  constructor(
    private readonly source: DashboardSource,
    private readonly opts: HubOptions = DEFAULT_HUB_OPTIONS,
    private readonly now: () => number = Date.now,
  ) {}

  /** Connected streams. */
  get size(): number {
    return this.clients.size;
  }

  /** A new SSE body for one client, or null when `maxClients` are connected. */
  open(signal?: AbortSignal): ReadableStream<Uint8Array> | null {
    if (this.clients.size >= this.opts.maxClients || signal?.aborted) return null;
    let client: Client | undefined;
    const onAbort = () => client && this.drop(client, true);
    return new ReadableStream<Uint8Array>(
      {
        start: (controller) => {
          client = {
            controller,
            ready: false,
            budget: this.opts.maxDecisionsPerSecond,
            refilledAt: this.now(),
            dropped: 0,
          };
          this.clients.add(client);
          signal?.addEventListener('abort', onAbort, { once: true });
          this.send(client, sseComment('kvrouter dashboard stream'));
          const c = client;
          const first = () => {
            if (!this.clients.has(c)) return;
            this.send(c, this.snapshotFrame(this.snapshotJson(), 0));
            this.send(c, sseFrame('decisions', this.source.recentDecisions(this.opts.backfill)));
            c.ready = true;
          };
          // Other processes to ask: the first snapshot and the backfill wait for their answer (else
          // they would show what was fetched when a stream was last open).
          const refresh = this.source.refresh;
          if (refresh)
            void refresh
              .call(this.source)
              .catch(() => undefined)
              .finally(first);
          else first();
          this.ensureRunning();
        },
        cancel: () => {
          signal?.removeEventListener('abort', onAbort);
          if (client) this.drop(client, false);
        },
      },
      new ByteLengthQueuingStrategy({ highWaterMark: this.opts.maxBufferedBytes }),
    );
  }

  /** End every stream and stop the timer. */
  close(): void {
    for (const c of [...this.clients]) this.drop(c, true);
  }

  private ensureRunning(): void {
    if (this.timer) return;
    this.timer = setInterval(() => this.tick(), this.opts.intervalMs);
    this.timer.unref();
    this.unsubscribe = this.source.onDecision((d) => this.decision(d));
  }

  private drop(c: Client, closeStream: boolean): void {
    if (!this.clients.delete(c)) return;
    if (closeStream) {
      try {
        c.controller.close();
      } catch {
        // already closed or errored by the consumer
      }
    }
    if (this.clients.size === 0) {
      if (this.timer) clearInterval(this.timer);
      this.timer = null;
      this.unsubscribe?.();
      this.unsubscribe = null;
    }
  }

  /** A `snapshot` event carrying a SnapshotEvent, spliced from JSON computed once per tick. */
  private snapshotFrame(snapshotJson: string, dropped: number): Uint8Array {
    return encoder.encode(`event: snapshot\ndata: {"dropped_decisions":${dropped},"snapshot":${snapshotJson}}\n\n`);
  }

  /** The snapshot as JSON; a failing source becomes an error object, never an exception here. */
  private snapshotJson(): string {
    try {
      return JSON.stringify(this.source.snapshot());
    } catch (err) {
      return JSON.stringify({ error: (err as Error).message });
    }
  }

  /** Enqueue, dropping the client if its stream can no longer take data (never throws into a timer). */
  private send(c: Client, frame: Uint8Array): void {
    try {
      c.controller.enqueue(frame);
    } catch {
      this.drop(c, false);
    }
  }

  private refreshing = false;

  private tick(): void {
    const refresh = this.source.refresh;
    if (!refresh) return this.broadcast();
    // The other processes answer asynchronously; a tick that finds the last question still out is skipped.
    if (this.refreshing) return;
    this.refreshing = true;
    void refresh
      .call(this.source)
      .catch(() => undefined)
      .finally(() => {
        this.refreshing = false;
        if (this.clients.size > 0) this.broadcast();
      });
  }

  private broadcast(): void {
    const json = this.snapshotJson();
    for (const c of [...this.clients]) {
      if (!c.ready) continue;
      if ((c.controller.desiredSize ?? 0) < -3 * this.opts.maxBufferedBytes) {
        this.drop(c, true); // far behind: a stuck or very slow reader
        continue;
      }
      this.send(c, this.snapshotFrame(json, c.dropped));
      c.dropped = 0;
    }
  }

  private decision(d: DecisionRecord): void {
    if (this.clients.size === 0) return;
    const frame = sseFrame('decision', d);
    const t = this.now();
    for (const c of [...this.clients]) {
      if (!c.ready) continue;
      const rate = this.opts.maxDecisionsPerSecond;
      c.budget = Math.min(rate, c.budget + ((t - c.refilledAt) / 1000) * rate);
      c.refilledAt = t;
      if (c.budget < 1 || (c.controller.desiredSize ?? 0) <= 0) {
        c.dropped++;
        continue;
      }
      c.budget -= 1;
      this.send(c, frame);
    }
  }
}
