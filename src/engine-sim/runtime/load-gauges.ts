// The engine's load gauges under vLLM's names, from a rank's CoreStats: the one mapping of the
// engine's state to `vllm:num_requests_*` / `vllm:kv_cache_usage_perc`. The HTTP engine exports
// them through prom-client (metrics.ts); the fleet simulation samples them in virtual time and
// hands the samples to the router's own reader (`loadsFromSamples`). No prom-client here.
import type { PromSample } from '../../engine-load/prom-text.js';
import type { CoreStats } from '../core/engine-core.js';

export interface LoadGauge {
  name: string;
  help: string;
  pick: (s: CoreStats) => number;
}

export const LOAD_GAUGES: readonly LoadGauge[] = [
  { name: 'vllm:num_requests_running', help: 'Number of requests in model execution batches.', pick: (s) => s.running },
  { name: 'vllm:num_requests_waiting', help: 'Number of requests waiting to be processed.', pick: (s) => s.waiting },
  { name: 'vllm:kv_cache_usage_perc', help: 'KV-cache usage. 1 means 100 percent usage.', pick: (s) => s.kvUsage },
];

/** The samples a scrape of these gauges reads for one rank (labels as vLLM v1: model_name, engine). */
export function loadGaugeSamples(model: string, rank: number, s: CoreStats): PromSample[] {
  const labels = { model_name: model, engine: String(rank) };
  return LOAD_GAUGES.map((g) => ({ name: g.name, labels, value: g.pick(s) }));
}
