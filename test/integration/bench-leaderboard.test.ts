// `kvrouter bench leaderboard --quick` through the built CLI: every scenario, load point, policy and
// seed in the report (or marked not run, with the reason), the counts adding up, a cell equal to the
// same seed's cell of a separate narrower run (determinism), and failed requests counted and marked.
// No timing thresholds: the machine may be busy.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { LeaderboardSummary } from '../../src/bench/leaderboard/render.js';
import { ROOT, runCli } from '../helpers/procs.js';

const dir = mkdtempSync(join(tmpdir(), 'bench-leaderboard-test-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

// The report's own types: the test reads the JSON the command wrote.
type Summary = LeaderboardSummary;

const POLICIES = ['kv', 'dynamo', 'sglang', 'gie', 'llm-d', 'llm-d-sticky', 'aibrix', 'vllm-router', 'round-robin'];
const read = (d: string) => JSON.parse(readFileSync(join(d, 'summary.json'), 'utf8')) as Summary;

describe('kvrouter bench leaderboard', () => {
  it('documents every flag in --help', async () => {
    const p = spawn(process.execPath, [join(ROOT, 'bin/kvrouter.js'), 'bench', 'leaderboard', '--help'], { cwd: ROOT });
    let out = '';
    p.stdout.on('data', (d: Buffer) => (out += d.toString()));
    const code = await new Promise((r) => p.on('exit', r));
    expect(code).toBe(0);
    for (const flag of [
      '--scenarios',
      '--policies',
      '--seeds',
      '--loads',
      '--slo-ttft-ms',
      '--slo-tpot-ms',
      '--drain-timeout',
      '--quick',
      '--out',
    ])
      expect(out).toContain(flag);
  });

  it('--quick: every scenario x load x policy x seed, counts that add up, and a cell equal to a narrower run of its seed', async () => {
    const a = join(dir, 'quick');
    const run = await runCli(['bench', 'leaderboard', '--quick', '--out', a]);
    expect(run.code, run.stderr).toBe(0);
    for (const f of [
      'leaderboard.md',
      'leaderboard.json',
      'summary.json',
      'llm-d-shape-ttft-p90.svg',
      'llm-d-shape-goodput.svg',
    ])
      expect(existsSync(join(a, f)), f).toBe(true);
    const s = read(a);
    expect(s.bench).toBe('leaderboard');
    expect(s.seeds).toEqual([0, 1, 2]);
    expect(s.policies).toEqual(POLICIES);
    expect(s.scenarios.map((x) => x.name)).toEqual([
      'llm-d-shape',
      'multi-turn',
      'agentic',
      'mooncake-conversation',
      'mooncake-toolagent',
      'two-tenant',
      'two-tenant-fleet',
    ]);
    const md = readFileSync(join(a, 'leaderboard.md'), 'utf8');
    for (const sc of s.scenarios) {
      expect(md).toContain(`## ${sc.name}`);
      if (sc.notRun !== null) {
        // A scenario that cannot run here says why, in the summary and the report.
        expect(sc.points).toHaveLength(0);
        expect(md).toContain(sc.notRun);
        continue;
      }
      expect(sc.points.length).toBeGreaterThan(0);
      for (const p of sc.points) {
        expect(p.cells.map((c) => c.policy)).toEqual(POLICIES);
        expect(p.ttftFloorP90).toHaveLength(3);
        for (const c of p.cells) {
          if (c.notRun !== null) {
            // Never dropped silently: no figures, and the reason in the table.
            expect(c.seeds).toHaveLength(0);
            expect(md).toContain(`not run: ${c.notRun}`);
            continue;
          }
          expect(c.seeds.map((x) => x.seed)).toEqual([0, 1, 2]);
          for (const f of c.seeds) {
            expect(f.sent).toBeGreaterThan(0);
            expect(f.ok + f.refused + f.failed).toBe(f.sent);
            expect(f.ttftP50).toBeLessThanOrEqual(f.ttftP90);
            expect(f.ttftP90).toBeLessThanOrEqual(f.ttftP99);
            expect(f.goodput).toBeGreaterThanOrEqual(0);
            expect(f.goodput).toBeLessThanOrEqual(f.ok / f.sent);
            // First-admission hits can never beat an infinite cache.
            expect(f.hitRate).toBeLessThanOrEqual(f.oracleHitRate);
            expect(Object.keys(f.tenantTtftP90)).toEqual(sc.tenants);
            // No placement beats every request alone on an idle engine with the oracle's cache.
            const floor = p.ttftFloorP90[c.seeds.indexOf(f)];
            expect(floor).toBeGreaterThan(0);
            if (f.ok === f.sent) expect(f.ttftP90).toBeGreaterThanOrEqual(floor);
          }
        }
      }
    }
    expect(s.scenarios.find((x) => x.name === 'two-tenant')?.tenants).toEqual(['batch', 'interactive']);
    expect(s.scenarios.find((x) => x.name === 'llm-d-shape')?.points.map((p) => p.load)).toEqual([8, 48]);
    // kv reads the KV events: on the llm-d shape it finds more of the cache than the round-robin floor.
    const llmd = s.scenarios[0].points[0].cells;
    const hit = (name: string) => llmd.find((c) => c.policy === name)!.seeds[0].hitRate;
    expect(hit('kv')).toBeGreaterThan(hit('round-robin'));

    // The same seed alone, fewer policies: identical figures (nothing depends on what ran before).
    const b = join(dir, 'seed-1');
    const one = await runCli([
      'bench',
      'leaderboard',
      '--quick',
      '--scenarios',
      'two-tenant',
      '--seeds',
      '1',
      '--policies',
      'kv,round-robin',
      '--out',
      b,
    ]);
    expect(one.code, one.stderr).toBe(0);
    const t = read(b);
    const whole = s.scenarios.find((x) => x.name === 'two-tenant')!.points[0].cells;
    for (const c of t.scenarios[0].points[0].cells)
      expect(c.seeds[0]).toEqual(whole.find((x) => x.policy === c.policy)!.seeds.find((x) => x.seed === 1));
  }, 900_000);

  it('counts requests that do not finish, and a policy serving fewer is marked, never best on latency', async () => {
    const out = join(dir, 'drain');
    // Past saturation with a 2 s drain: what is still running 2 s after the last arrival fails
    // (round-robin's queue: all of its requests; kv's: none, at this seed).
    const { code, stderr } = await runCli([
      'bench',
      'leaderboard',
      '--quick',
      '--scenarios',
      'llm-d-shape',
      '--loads',
      '48',
      '--seeds',
      '0',
      '--policies',
      'kv,round-robin',
      '--drain-timeout',
      '2',
      '--out',
      out,
    ]);
    expect(code, stderr).toBe(0);
    const cells = read(out).scenarios[0].points[0].cells;
    const [kv, rr] = cells.map((c) => c.seeds[0]);
    for (const f of [kv, rr]) expect(f.ok + f.refused + f.failed).toBe(f.sent);
    expect(rr.failed).toBeGreaterThan(0);
    expect(rr.ok).toBeLessThan(kv.ok);
    const md = readFileSync(join(out, 'leaderboard.md'), 'utf8');
    const row = md.split('\n').find((l) => /^\| 48 +\| round-robin/.test(l));
    expect(row).toContain(`serves ${kv.ok - rr.ok} fewer`);
    expect(row).not.toContain('best p90');
  }, 300_000);
});
