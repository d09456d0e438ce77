// Smoke test of `kvrouter bench cluster --quick`: the built CLI runs every policy and its JSON report
// holds plausible values. No timing thresholds: the machine may be busy.
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { runCli } from '../helpers/procs.js';
import { ordered } from '../helpers/report.js';

const POLICIES = ['kv', 'kv-no-tier', 'approx', 'round-robin', 'random', 'least-loaded', 'session'];
const dir = mkdtempSync(join(tmpdir(), 'bench-cluster-test-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface Dist {
  n: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
}

interface Result {
  policy: string;
  requests: { sent: number; ok: number; errors: number; firstErrors: string[] };
  ttftMs: Dist;
  e2eMs: Dist;
  throughput: { requestsPerS: number; outputTokensPerS: number };
  hitRate: { engines: number; gpu: number; host: number; usage: number };
  imbalance: { busyCov: number; requestCov: number };
  cpu: { router: number | null };
  preemptions: number;
  engines: Array<{ requests: number; busyS: number }>;
  ttftCdf: number[];
  ttftPrediction: { requests: number; p50: number; p90: number; bias: number } | null;
}

describe('kvrouter bench cluster --quick', () => {
  it('reports every policy with plausible values', async () => {
    // No flags: the default workload is the Mooncake trace committed under bench/traces/.
    const json = join(dir, 'report.json');
    const out = join(dir, 'out');
    const { code, stderr } = await runCli(['bench', 'cluster', '--quick', '--json', json, '--out', out]);
    expect(code, stderr).toBe(0);

    const report = JSON.parse(readFileSync(json, 'utf8')) as {
      workload: { name: string; requests: number };
      oracle: { hitRate: number; requests: number };
      config: { perfModel: string; model: string };
      policies: string[];
      results: Result[];
    };
    expect(report.workload.name).toMatch(/mooncake|conversation/);
    // The engines' default pass times: Qwen3-8B measured on an H200.
    expect([report.config.perfModel, report.config.model]).toEqual(['h200-qwen3-8b', 'Qwen/Qwen3-8B']);
    expect(report.policies).toEqual(POLICIES);
    const oracle = report.oracle.hitRate;
    expect(oracle).toBeGreaterThan(0);
    expect(oracle).toBeLessThan(1);
    for (const r of report.results) {
      const at = `policy ${r.policy}`;
      expect(r.requests.sent, at).toBe(report.workload.requests);
      expect(r.requests.ok, `${at}: ${r.requests.firstErrors.join('; ')}`).toBe(r.requests.sent);
      expect(r.ttftMs.n, at).toBe(r.requests.ok);
      ordered(r.ttftMs);
      ordered(r.e2eMs);
      // TTFT <= E2E request by request, so also quantile by quantile.
      expect(r.ttftMs.p50, at).toBeLessThanOrEqual(r.e2eMs.p50);
      expect(r.ttftCdf.length).toBe(101);
      // Every response carried the router's predicted TTFT (x-kvrouter-predicted-ttft-ms).
      expect(r.ttftPrediction?.requests, at).toBe(r.requests.ok);
      expect(r.ttftPrediction!.p90, at).toBeGreaterThanOrEqual(r.ttftPrediction!.p50);
      expect([...r.ttftCdf].sort((a, b) => a - b)).toEqual(r.ttftCdf);

      expect(r.throughput.requestsPerS, at).toBeGreaterThan(0);
      expect(r.throughput.outputTokensPerS, at).toBeGreaterThan(0);
      for (const h of [r.hitRate.engines, r.hitRate.gpu, r.hitRate.host, r.hitRate.usage])
        expect(h, at).toBeGreaterThanOrEqual(0);
      expect(r.hitRate.gpu + r.hitRate.host, at).toBeCloseTo(r.hitRate.engines, 9);
      // First admissions can never beat an infinite cache; re-admissions after preemption query again.
      expect(r.hitRate.usage, at).toBeLessThanOrEqual(oracle + 1e-9);
      if (r.preemptions === 0) expect(r.hitRate.engines, at).toBeLessThanOrEqual(oracle + 1e-9);

      expect(
        r.engines.reduce((a, e) => a + e.requests, 0),
        at,
      ).toBe(r.requests.sent);
      expect(r.imbalance.busyCov, at).toBeGreaterThanOrEqual(0);
      expect(r.imbalance.requestCov, at).toBeGreaterThanOrEqual(0);
      if (r.cpu.router !== null) expect(r.cpu.router, at).toBeGreaterThan(0);
    }
    // round-robin spreads requests exactly evenly.
    const rr = report.results.find((r) => r.policy === 'round-robin')!;
    expect(
      Math.max(...rr.engines.map((e) => e.requests)) - Math.min(...rr.engines.map((e) => e.requests)),
    ).toBeLessThanOrEqual(1);

    for (const f of ['cluster.md', 'cluster.json', 'samples.jsonl']) expect(existsSync(join(out, f)), f).toBe(true);
    for (const f of ['ttft-cdf.svg', 'hit-rate.svg', 'engine-load.svg'])
      expect(readFileSync(join(out, f), 'utf8')).toMatch(/^<svg [^>]*>[\s\S]*<\/svg>\n$/);
  }, 480_000);
});
