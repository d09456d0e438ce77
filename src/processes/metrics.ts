// /metrics of `serve --workers N`: one router to Prometheus. Counters and histograms add up over the
// processes. A kvrouter gauge describes state every process sees whole (the index, instance health,
// bookings: replica sync gives each process every booking), so it is the largest of the processes'
// values, not their sum; the few that count a process's own work add up. Node's own metrics keep
// prom-client's choices (CPU and memory add up, event-loop lag averages).
import { AggregatorRegistry, type Registry } from 'prom-client';
import type { MetricsJson } from './messages.js';

/** kvrouter gauges that count one process's own work. */
const PER_PROCESS_GAUGES = new Set(['kvrouter_queue_depth', 'kvrouter_epp_streams']);

const isRouterGauge = (m: MetricsJson[number]): boolean =>
  (m.type as unknown as string) === 'gauge' &&
  !PER_PROCESS_GAUGES.has(m.name) &&
  (m.name.startsWith('kvrouter_') || m.name.startsWith('kv_') || m.name.startsWith('vllm:'));

/** A process's registry, marked for aggregation. */
export async function processMetrics(registry: Registry): Promise<MetricsJson> {
  const json = await registry.getMetricsAsJSON();
  for (const m of json) if (isRouterGauge(m)) m.aggregator = 'max';
  return json;
}

/** The exposition text of every process's metrics together. */
export async function aggregateMetrics(perProcess: readonly MetricsJson[]): Promise<string> {
  return AggregatorRegistry.aggregate(perProcess as MetricsJson[]).metrics();
}
