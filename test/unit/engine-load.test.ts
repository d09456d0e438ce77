import { describe, expect, it } from 'vitest';
import { EngineLoadView, loadsFromSamples } from '../../src/engine-load/load-view.js';
import { parseProm, parsePromSamples } from '../../src/engine-load/prom-text.js';
import { TieredIndexer } from '../../src/indexer/namespaces.js';
import type { CostWeights } from '../../src/scheduler/cost.js';
import { type RouteInput, Scheduler } from '../../src/scheduler/scheduler.js';

const VLLM = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="Qwen/Qwen3-0.6B"} 3.0
vllm:num_requests_running{engine="1",model_name="Qwen/Qwen3-0.6B"} 1.0
vllm:num_requests_waiting{engine="0",model_name="Qwen/Qwen3-0.6B"} 5.0
vllm:num_requests_waiting{engine="1",model_name="Qwen/Qwen3-0.6B"} 0.0
vllm:kv_cache_usage_perc{engine="0",model_name="Qwen/Qwen3-0.6B"} 0.93
vllm:gpu_cache_usage_perc{engine="0",model_name="Qwen/Qwen3-0.6B"} 0.5
vllm:prefix_cache_hits_total{engine="0",model_name="a \\"quoted\\" name"} 12 1700000000000
`;

describe('Prometheus text', () => {
  it('parses samples with labels (escaped quotes, timestamps) and sums by name', () => {
    const s = parsePromSamples(VLLM);
    expect(s).toHaveLength(7);
    expect(s[6]).toEqual({
      name: 'vllm:prefix_cache_hits_total',
      labels: { engine: '0', model_name: 'a "quoted" name' },
      value: 12,
    });
    expect(parseProm(VLLM).get('vllm:num_requests_running')).toBe(4);
    expect(parseProm('up 1\nbad line\n').get('up')).toBe(1);
  });

  it('reads per-rank load, prefers the current vLLM usage gauge, and SGLang names', () => {
    const l = loadsFromSamples(parsePromSamples(VLLM), 7)!;
    expect(l.get(0)).toEqual({ running: 3, waiting: 5, kvUsage: 0.93, at: 7 });
    expect(l.get(1)).toEqual({ running: 1, waiting: 0, kvUsage: null, at: 7 });
    const sg = loadsFromSamples(
      parsePromSamples(
        'sglang:num_running_reqs{dp_rank="2"} 4\nsglang:num_queue_reqs{dp_rank="2"} 1\nsglang:token_usage{dp_rank="2"} 0.4\n',
      ),
      1,
    )!;
    expect(sg.get(2)).toEqual({ running: 4, waiting: 1, kvUsage: 0.4, at: 1 });
    expect(loadsFromSamples(parsePromSamples('process_cpu_seconds_total 3\n'), 1)).toBeNull();
  });

  it('ages scrapes out', () => {
    const v = new EngineLoadView();
    v.set('a', loadsFromSamples(parsePromSamples(VLLM), 1000)!);
    expect(v.get('a', 0, 2000, 5000)?.waiting).toBe(5);
    expect(v.get('a', 0, 7000, 5000)).toBeNull();
    expect(v.get('a', 3, 2000, 5000)).toBeNull();
  });
});

describe('blending engine load with bookings', () => {
  const ns = { model: 'm', blockSize: 4, loraName: null, salt: null, tenant: 'default' };
  const W: CostWeights = {
    model: 'time',
    overlapWeight: 1,
    medium: { cpu: 0.75, disk: 0.25, shared: 0.5 },
    trackActiveBlocks: true,
    decodeInterference: 0.1,
  };
  const base = (engine: RouteInput['engineLoad']): RouteInput => ({
    ns,
    candidates: [
      { instance: 'a', dpRank: 0 },
      { instance: 'b', dpRank: 0 },
    ],
    tokens: Array.from({ length: 400 }, (_, i) => i + 1),
    policy: 'kv',
    weights: W,
    temperature: 0,
    engineLoad: engine,
    engineWeights: { waiting: 1, running: 1, kvUsageMs: 0 },
  });

  it('sees load the router did not book, and never counts a booked request twice', () => {
    const s = new Scheduler(new TieredIndexer(), () => 0);
    const busyA = (i: string) =>
      i === 'a' ? { running: 6, waiting: 4, kvUsage: 0.5, at: 0 } : { running: 0, waiting: 0, kvUsage: 0.1, at: 0 };
    // Bookings alone: a tie; with the engines' view, a is busy and b wins whatever the tie-break.
    expect(new Set(s.decide(base(null), 0).candidates.map((c) => c.cost)).size).toBe(1);
    const d = s.decide(base(busyA), 0);
    expect(d.chosen!.instance).toBe('b');
    expect(new Scheduler(new TieredIndexer(), () => 0.99).decide(base(busyA), 0).chosen!.instance).toBe('b');
    const a = d.candidates.find((c) => c.instance === 'a')!;
    expect(a.unbookedRequests).toBe(10);
    expect(a.queueMs).toBeGreaterThan(0);
    // The router's own 10 bookings on a are exactly what the engine reports: nothing unbooked.
    for (let i = 0; i < 10; i++) s.active.book(`r${i}`, 'a', 0, new BigUint64Array(0), 0, 0);
    expect(s.decide(base(busyA), 0).candidates.find((c) => c.instance === 'a')!.unbookedRequests).toBe(0);
  });
});
