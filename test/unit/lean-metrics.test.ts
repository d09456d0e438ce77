// Lean metric children against prom-client's own: the same observations must export the same
// text, the same JSON and the same `--workers` aggregate (src/common/lean-metrics.ts).
import { AggregatorRegistry, Counter, Histogram, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { LeanCounter, LeanHistogram } from '../../src/common/lean-metrics.js';
import { mulberry32 } from '../../src/common/prng.js';

const BUCKETS = [0.0001, 0.001, 0.01, 0.1, 1, 10];
const MODELS = ['qwen', 'llama', 'a"b\\c'];
const OUTCOMES = ['done', 'upstream_error', 'client_abort'];

function pair() {
  const libReg = new Registry();
  const leanReg = new Registry();
  const cfg = {
    name: 'kvr_seconds',
    help: 'Request time',
    labelNames: ['model', 'outcome'] as const,
    buckets: BUCKETS,
  };
  const lib = new Histogram({ ...cfg, labelNames: [...cfg.labelNames], registers: [libReg] });
  const lean = new LeanHistogram({ ...cfg, labelNames: [...cfg.labelNames], registers: [leanReg] });
  const ccfg = { name: 'kvr_requests_total', help: 'Requests', labelNames: ['model', 'status'] };
  const libCount = new Counter({ ...ccfg, registers: [libReg] });
  const leanCount = new LeanCounter({ ...ccfg, registers: [leanReg] });
  return { libReg, leanReg, lib, lean, libCount, leanCount };
}

describe('LeanHistogram and LeanCounter', () => {
  it('export what prom-client exports for the same observations (text, JSON, aggregate)', async () => {
    const rand = mulberry32(7);
    const p = pair();
    for (let i = 0; i < 5000; i++) {
      const model = MODELS[Math.floor(rand() * MODELS.length)];
      const outcome = OUTCOMES[Math.floor(rand() * OUTCOMES.length)];
      // Values on bucket bounds, between them, above the last and negative.
      const r = rand();
      const v =
        r < 0.2
          ? BUCKETS[Math.floor(rand() * BUCKETS.length)]
          : r < 0.25
            ? 20 + rand()
            : r < 0.3
              ? -rand()
              : rand() * rand();
      p.lib.observe({ model, outcome }, v);
      p.lean.child({ model, outcome }).observe(v);
      const status = rand() < 0.9 ? '200' : '502';
      const by = rand() < 0.95 ? 1 : 0; // inc(0) still makes the series
      p.libCount.inc({ model, status }, by);
      p.leanCount.child({ model, status }).inc(by);
    }
    const libText = await p.libReg.metrics();
    expect(libText).toContain('kvr_seconds_bucket{le="0.01",model="qwen"');
    expect(await p.leanReg.metrics()).toBe(libText);
    const libJson = await p.libReg.getMetricsAsJSON();
    const leanJson = await p.leanReg.getMetricsAsJSON();
    expect(leanJson).toEqual(libJson);
    expect(await AggregatorRegistry.aggregate([leanJson, leanJson]).metrics()).toBe(
      await AggregatorRegistry.aggregate([libJson, libJson]).metrics(),
    );
  });

  it('reset zeroes the bound children, which keep counting afterwards', async () => {
    const p = pair();
    const child = p.lean.child({ model: 'qwen', outcome: 'done' });
    const c = p.leanCount.child({ model: 'qwen', status: '200' });
    child.observe(0.5);
    c.inc();
    p.lean.reset();
    p.leanCount.reset();
    expect(await p.leanReg.metrics()).toBe(await p.libReg.metrics());
    child.observe(0.05);
    c.inc(2);
    p.lib.observe({ model: 'qwen', outcome: 'done' }, 0.05);
    p.libCount.inc({ model: 'qwen', status: '200' }, 2);
    expect(await p.leanReg.metrics()).toBe(await p.libReg.metrics());
    expect(await p.leanReg.metrics()).toContain('kvr_requests_total{model="qwen",status="200"} 2');
  });

  it('keeps series observed through the library API beside its children', async () => {
    const p = pair();
    p.lean.observe({ model: 'llama', outcome: 'done' }, 0.2);
    p.lean.child({ model: 'qwen', outcome: 'done' }).observe(0.2);
    const text = await p.leanReg.metrics();
    expect(text).toContain('kvr_seconds_count{model="llama",outcome="done"} 1');
    expect(text).toContain('kvr_seconds_count{model="qwen",outcome="done"} 1');
  });

  it('keeps a missing label apart from an empty one, as prom-client does', async () => {
    const p = pair();
    p.lib.observe({ model: 'q' }, 0.5);
    p.lib.observe({ model: 'q', outcome: '' }, 0.5);
    p.lean.child({ model: 'q' }).observe(0.5);
    p.lean.child({ model: 'q', outcome: '' }).observe(0.5);
    expect(await p.leanReg.metrics()).toBe(await p.libReg.metrics());
  });

  it('refuses what prom-client refuses', () => {
    const p = pair();
    expect(() => p.lean.child({ model: 'q', outcome: 'done' }).observe(Number.NaN)).toThrow(TypeError);
    expect(() => p.leanCount.child({ model: 'q', status: '200' }).inc(-1)).toThrow(/decrease/);
    expect(() => p.lean.child({ model: 'q', nope: 'x' } as never)).toThrow(/nope/);
  });
});
