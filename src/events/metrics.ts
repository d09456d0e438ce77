// Prometheus metrics of KV-event ingestion, created against a prom-client Registry the caller owns.
// Listeners call the small EventMetrics interface; without a registry it is a no-op.
import { Counter, Gauge, Histogram, type Registry as PromRegistry } from 'prom-client';
import type { ApplyStatus } from '../indexer/kv-event.js';
import type { ListenerStatus } from './registry.js';

export type ReplayResult = 'ok' | 'history_lost' | 'failed' | 'timeout' | 'overflow';
export type PurgeReason =
  | 'gap_no_replay'
  | 'replay_failed'
  | 'history_lost'
  | 'replay_rounds'
  | 'held_overflow'
  | 'seq_regression'
  | 'publisher_changed'
  | 'cleared'
  | 'disconnected'
  | 'silence'
  | 'decode_error'
  | 'unregistered';

export interface EventMetrics {
  /** Events (or, for gap/purged/decode_error, occurrences) by outcome. */
  applied(status: ApplyStatus, n?: number): void;
  replay(result: ReplayResult): void;
  purged(reason: PurgeReason, blocks: number): void;
  /** now - batch timestamp, seconds. */
  lag(seconds: number): void;
  /** Stop reporting this pool's listener gauges (pool closed). */
  detach(): void;
}

export type StatusCounts = Record<ListenerStatus, number>;

export const NOOP_METRICS: EventMetrics = {
  applied: () => {},
  replay: () => {},
  purged: () => {},
  lag: () => {},
  detach: () => {},
};

const STATUSES: readonly ListenerStatus[] = ['pending', 'active', 'paused', 'failed'];
// Several pools may share one registry (tests, embedded indexers): metrics are registered once and
// the listener gauge sums every attached pool.
const sources = new WeakMap<PromRegistry, Set<() => StatusCounts>>();

function getOrCreate<T>(reg: PromRegistry, name: string, make: () => T): T {
  return (reg.getSingleMetric(name) as T | undefined) ?? make();
}

export function createEventMetrics(reg: PromRegistry | undefined, listenerStatuses: () => StatusCounts): EventMetrics {
  if (!reg) return NOOP_METRICS;
  let set = sources.get(reg);
  if (!set) sources.set(reg, (set = new Set()));
  set.add(listenerStatuses);
  const pools = set;

  const applied = getOrCreate(
    reg,
    'kv_events_applied_total',
    () =>
      new Counter({
        name: 'kv_events_applied_total',
        help: 'KV events by outcome (gap, purged and decode_error count occurrences)',
        labelNames: ['status'],
        registers: [reg],
      }),
  ) as Counter<'status'>;
  const replays = getOrCreate(
    reg,
    'kv_events_replays_total',
    () =>
      new Counter({
        name: 'kv_events_replays_total',
        help: 'Replay requests to publishers by result',
        labelNames: ['result'],
        registers: [reg],
      }),
  ) as Counter<'result'>;
  const purges = getOrCreate(
    reg,
    'kv_events_purges_total',
    () =>
      new Counter({
        name: 'kv_events_purges_total',
        help: 'Stream purges by reason',
        labelNames: ['reason'],
        registers: [reg],
      }),
  ) as Counter<'reason'>;
  const purgedBlocks = getOrCreate(
    reg,
    'kv_events_purged_blocks_total',
    () =>
      new Counter({
        name: 'kv_events_purged_blocks_total',
        help: 'Blocks dropped from the index by purges',
        registers: [reg],
      }),
  ) as Counter;
  const lag = getOrCreate(
    reg,
    'kv_events_lag_seconds',
    () =>
      new Histogram({
        name: 'kv_events_lag_seconds',
        help: 'Now minus the batch timestamp at apply time',
        buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30],
        registers: [reg],
      }),
  ) as Histogram;
  getOrCreate(
    reg,
    'kv_event_listeners',
    () =>
      new Gauge({
        name: 'kv_event_listeners',
        help: 'KV event listeners by status',
        labelNames: ['status'],
        registers: [reg],
        collect() {
          const sum: StatusCounts = { pending: 0, active: 0, paused: 0, failed: 0 };
          for (const src of pools) {
            const c = src();
            for (const s of STATUSES) sum[s] += c[s];
          }
          for (const s of STATUSES) this.set({ status: s }, sum[s]);
        },
      }),
  );

  return {
    applied: (status, n = 1) => applied.inc({ status }, n),
    replay: (result) => replays.inc({ result }),
    purged: (reason, blocks) => {
      purges.inc({ reason });
      purgedBlocks.inc(blocks);
      applied.inc({ status: 'purged' });
    },
    lag: (s) => lag.observe(s),
    detach: () => pools.delete(listenerStatuses),
  };
}
