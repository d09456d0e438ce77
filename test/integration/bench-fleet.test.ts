// `kvrouter bench fleet --quick` through the built CLI: the report's files and fields, plausible
// values, every booking released, and determinism (the same seed gives a byte-identical summary).
// No timing thresholds: the machine may be busy.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { oracleBeside } from '../../src/bench/fleet.js';
import { ROOT, runCli } from '../helpers/procs.js';
import { ordered } from '../helpers/report.js';

const dir = mkdtempSync(join(tmpdir(), 'bench-fleet-test-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface Dist {
  n: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
}

interface RouterTally {
  id: string;
  decisions: number;
  applied: Record<string, number>;
  sync: { sent: number; received: number };
  openBookings: number;
  index: { records: number; bytes: number };
}

interface Result {
  policy: string;
  requests: { sent: number; ok: number; errors: number };
  ttftMs: Dist;
  tpotMs: Dist;
  e2eMs: Dist;
  hitRate: { engines: number; usage: number };
  engines: Array<{ id: string; requests: number }>;
  ttftCdf: number[];
  ttftPrediction: { requests: number; p50: number; p90: number; bias: number } | null;
  fleet: {
    refused: number;
    goodput: { requests: number; share: number; perS: number };
    balance: { requests: { min: number; max: number; cov: number } };
    routers: RouterTally[];
    virtualS: number;
    events: number;
    scrape: { intervalMs: number; staleMs: number; scrapes: number } | null;
  };
}

interface Report {
  bench: string;
  oracle: { hitRate: number };
  config: { engines: number; routers: number; seed: number; syncDelayMs: number | null };
  policies: string[];
  results: Result[];
  wall?: unknown;
}

describe('kvrouter bench fleet --quick', () => {
  it('documents every flag in --help', async () => {
    const p = spawn(process.execPath, [join(ROOT, 'bin/kvrouter.js'), 'bench', 'fleet', '--help'], { cwd: ROOT });
    let out = '';
    p.stdout.on('data', (d: Buffer) => (out += d.toString()));
    const code = await new Promise((r) => p.on('exit', r));
    expect(code).toBe(0);
    for (const flag of [
      '--engines',
      '--routers',
      '--sync-delay-ms',
      '--kv-event-delay-ms',
      '--event-wire',
      '--perf-model',
      '--engine-hash',
      '--slo-ttft-ms',
      '--slo-tpot-ms',
      '--rate-per-engine',
      '--gpu-blocks',
      '--request-latency-ms',
      '--spread-bursts',
      '--scrape-interval-ms',
      '--quick',
    ])
      expect(out).toContain(flag);
  });

  it('writes the report, and the same seed gives a byte-identical summary', async () => {
    const a = join(dir, 'a');
    const b = join(dir, 'b');
    const json = join(dir, 'report.json');
    // random draws from the replicas' seeded generators: a leak of Math.random or the clock shows here;
    // gie reads the engines' scraped gauges (scrapes in virtual time).
    const policies = ['--policies', 'kv,round-robin,random,gie'];
    const first = await runCli(['bench', 'fleet', '--quick', ...policies, '--out', a, '--json', json]);
    expect(first.code, first.stderr).toBe(0);
    const second = await runCli(['bench', 'fleet', '--quick', ...policies, '--out', b]);
    expect(second.code, second.stderr).toBe(0);
    for (const f of ['fleet.json', 'fleet.md', 'summary.json', 'ttft-cdf.svg', 'hit-rate.svg', 'engine-requests.svg'])
      expect(existsSync(join(a, f)), f).toBe(true);
    const sa = readFileSync(join(a, 'summary.json'), 'utf8');
    expect(readFileSync(join(b, 'summary.json'), 'utf8')).toBe(sa);

    const s = JSON.parse(sa) as Report;
    expect(s.bench).toBe('fleet');
    expect(s.wall).toBeUndefined(); // wall-clock figures stay out of the summary
    expect(s.policies).toEqual(['kv', 'round-robin', 'random', 'gie']);
    const full = JSON.parse(readFileSync(json, 'utf8')) as Report & {
      wall: { policies: Array<{ decisionUs: { all: Dist } }>; v8Flags: string[] };
    };
    expect(full.wall.policies).toHaveLength(4);
    // Started without V8 flags, the bench relaunched itself with the young generation it runs fastest with.
    expect(full.wall.v8Flags).toEqual(['--max-semi-space-size=256']);
    expect(full.wall.policies[0].decisionUs.all.n).toBe(s.results[0].requests.sent);
    for (const r of s.results) {
      expect(r.requests.sent).toBeGreaterThan(0);
      expect(r.requests.ok).toBe(r.requests.sent);
      expect(r.fleet.refused).toBe(0);
      ordered(r.ttftMs);
      ordered(r.e2eMs);
      ordered(r.tpotMs);
      expect(r.ttftCdf).toHaveLength(101);
      // Every routed request's decision predicted a TTFT; the error is a fraction, p50 <= p90.
      expect(r.ttftPrediction?.requests).toBe(r.requests.ok);
      expect(r.ttftPrediction!.p50).toBeGreaterThan(0);
      expect(r.ttftPrediction!.p90).toBeGreaterThanOrEqual(r.ttftPrediction!.p50);
      // First-admission hits can never beat an infinite cache.
      expect(r.hitRate.usage).toBeGreaterThan(0);
      expect(r.hitRate.usage).toBeLessThanOrEqual(s.oracle.hitRate);
      expect(r.engines).toHaveLength(s.config.engines);
      expect(r.engines.reduce((a, e) => a + e.requests, 0)).toBe(r.requests.ok);
      expect(r.fleet.goodput.requests).toBeLessThanOrEqual(r.requests.ok);
      expect(r.fleet.virtualS).toBeGreaterThan(0);
      expect(r.fleet.routers).toHaveLength(1);
      for (const t of r.fleet.routers) {
        expect(t.decisions).toBe(r.requests.sent);
        expect(t.openBookings).toBe(0);
        // kv's index holds the engines' blocks; the others read no index (gie keeps its own per-pod LRU)
        // and hold at most predictions younger than their TTL: the simulated expiry sweep removed the rest.
        if (r.policy === 'kv') expect(t.index.records).toBeGreaterThan(0);
        else expect(t.index.records).toBe(0);
      }
    }
    const [kv, rr, random, gie] = s.results;
    // GIE's data layer: every 50 ms, stale after 2 s; scraped all through the run.
    expect(gie.fleet.scrape).toMatchObject({ intervalMs: 50, staleMs: 2000 });
    expect(gie.fleet.scrape!.scrapes).toBeGreaterThan(gie.fleet.virtualS * (1000 / 50) * s.config.engines * 0.9);
    expect(kv.fleet.scrape).toBeNull();
    expect(random.fleet.balance.requests.max - random.fleet.balance.requests.min).toBeGreaterThan(1);
    // kv reads the KV events (all applied cleanly) and finds more of the cache than a rotation.
    expect(kv.fleet.routers[0].applied.ok).toBeGreaterThan(0);
    expect(
      Object.entries(kv.fleet.routers[0].applied)
        .filter(([k]) => k !== 'ok')
        .every(([, v]) => v === 0),
    ).toBe(true);
    expect(rr.fleet.routers[0].applied.ok ?? 0).toBe(0);
    expect(kv.hitRate.usage).toBeGreaterThan(rr.hitRate.usage);
    expect(readFileSync(join(a, 'fleet.md'), 'utf8')).toContain("The router's time model");
    expect(rr.fleet.balance.requests.max - rr.fleet.balance.requests.min).toBeLessThanOrEqual(1);
  }, 120_000);

  it('with --gpu-blocks the oracle runs on a worker thread and gives the oracle computed inline', async () => {
    const inline = join(dir, 'oracle-inline');
    const beside = join(dir, 'oracle-beside');
    const policies = ['--policies', 'round-robin'];
    const a = await runCli(['bench', 'fleet', '--quick', ...policies, '--out', inline]);
    expect(a.code, a.stderr).toBe(0);
    const b = await runCli(['bench', 'fleet', '--quick', ...policies, '--gpu-blocks', '3000', '--out', beside]);
    expect(b.code, b.stderr).toBe(0);
    expect(b.stderr).toContain('oracle on a worker thread');
    type Sized = Report & { oracle: { distinctBlocks: number; hitTokens: number }; sizing: Record<string, number> };
    const sa = JSON.parse(readFileSync(join(inline, 'summary.json'), 'utf8')) as Sized;
    const sb = JSON.parse(readFileSync(join(beside, 'summary.json'), 'utf8')) as Sized;
    // The oracle does not depend on the engines' size: the worker's equals the inline one, field by field.
    expect(sa.oracle.hitTokens).toBeGreaterThan(0);
    expect(sb.oracle).toEqual(sa.oracle);
    expect(sb.sizing).toMatchObject({
      numGpuBlocks: 3000,
      workingSetBlocks: sa.oracle.distinctBlocks,
      perEngineRatio: sa.oracle.distinctBlocks / 3000,
    });
    expect(sb.results[0].requests.ok).toBe(sb.results[0].requests.sent);
  }, 120_000);

  it("the oracle's worker thread exiting after its answer is not a failure", async () => {
    // (A run whose simulation outlasted the worker failed at its first policy's end: the exit event
    // that follows the answer was taken for a thread that died.)
    const beside = oracleBeside(['--quick', '--policies', 'round-robin', '--gpu-blocks', '3000']);
    const o = await beside.answer;
    expect(o.hitTokens).toBeGreaterThan(0);
    expect(await beside.exited).toBe(0);
    expect(beside.failed).toBeNull();
  }, 120_000);

  it('syncs replicas through the real sync messages', async () => {
    const out = join(dir, 'sync');
    const { code, stderr } = await runCli([
      'bench',
      'fleet',
      '--quick',
      '--policies',
      'kv',
      '--routers',
      '2',
      '--sync-delay-ms',
      '1',
      '--out',
      out,
    ]);
    expect(code, stderr).toBe(0);
    const s = JSON.parse(readFileSync(join(out, 'summary.json'), 'utf8')) as Report;
    expect(s.config.syncDelayMs).toBe(1);
    const [r0, r1] = s.results[0].fleet.routers;
    expect(r0.decisions + r1.decisions).toBe(s.results[0].requests.sent);
    // Every add, prefill and free of one replica reaches the other; all bookings end released.
    expect(r0.sync.sent).toBeGreaterThan(0);
    expect(r1.sync.received).toBe(r0.sync.sent);
    expect(r0.sync.received).toBe(r1.sync.sent);
    expect(r0.openBookings + r1.openBookings).toBe(0);
  }, 120_000);
});
