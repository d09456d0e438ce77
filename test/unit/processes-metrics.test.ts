// /metrics of `serve --workers`: counters and histograms add up over the processes; kvrouter gauges
// of shared state take the largest value; per-process gauges and Node's own metrics add up.
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { aggregateMetrics, processMetrics } from '../../src/processes/metrics.js';

function processRegistry(requests: number, indexBlocks: number, queue: number, latency: number[]): Registry {
  const r = new Registry();
  new Counter({ name: 'kvrouter_requests_total', help: 'h', labelNames: ['instance'], registers: [r] }).inc(
    { instance: 'e0' },
    requests,
  );
  new Gauge({ name: 'kvrouter_index_blocks', help: 'h', registers: [r] }).set(indexBlocks);
  new Gauge({ name: 'kvrouter_queue_depth', help: 'h', registers: [r] }).set(queue);
  new Gauge({ name: 'process_resident_memory_bytes', help: 'h', registers: [r] }).set(1000);
  const h = new Histogram({ name: 'kvrouter_ttft_seconds', help: 'h', buckets: [0.1, 1], registers: [r] });
  for (const x of latency) h.observe(x);
  return r;
}

const value = (text: string, line: string): number =>
  Number(new RegExp(`^${line.replace(/[{}"+]/g, '\\$&')} (\\S+)$`, 'm').exec(text)?.[1]);

describe('aggregated metrics of router processes', () => {
  it('adds up work and keeps shared state whole', async () => {
    const a = processRegistry(3, 120, 1, [0.05, 0.5]);
    const b = processRegistry(2, 118, 2, [2]);
    const text = await aggregateMetrics([await processMetrics(a), await processMetrics(b)]);
    expect(value(text, 'kvrouter_requests_total{instance="e0"}')).toBe(5);
    expect(value(text, 'kvrouter_index_blocks')).toBe(120);
    expect(value(text, 'kvrouter_queue_depth')).toBe(3);
    expect(value(text, 'process_resident_memory_bytes')).toBe(2000);
    expect(value(text, 'kvrouter_ttft_seconds_count')).toBe(3);
    expect(value(text, 'kvrouter_ttft_seconds_bucket{le="0.1"}')).toBe(1);
    expect(value(text, 'kvrouter_ttft_seconds_bucket{le="1"}')).toBe(2);
  });
});
