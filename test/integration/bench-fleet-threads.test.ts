// `bench fleet --router-threads`: unsynchronised replicas on worker threads give byte for byte the
// inline run's summary and per-request samples, and a worker's failure ends the run with one clear
// error line and no thread left behind (the process exits). No timing thresholds.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/procs.js';

const dir = mkdtempSync(join(tmpdir(), 'bench-fleet-threads-test-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The CLI with extra environment, killed after `boundMs` (code null: it did not exit by itself). */
function runBounded(
  args: string[],
  env: Record<string, string>,
  boundMs: number,
): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, [join(ROOT, 'bin/kvrouter.js'), ...args], {
      cwd: ROOT,
      env: { ...process.env, ...env },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    p.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    let killed = false;
    const timer = setTimeout(() => {
      killed = true;
      p.kill('SIGKILL');
    }, boundMs);
    p.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code: killed ? null : code, stderr });
    });
  });
}

async function fleet(name: string, args: string[], policies = 'kv'): Promise<{ summary: string; samples: string }> {
  const out = join(dir, name);
  const r = await runBounded(['bench', 'fleet', '--quick', '--policies', policies, ...args, '--out', out], {}, 150_000);
  expect(r.code, r.stderr).toBe(0);
  return {
    summary: readFileSync(join(out, 'summary.json'), 'utf8'),
    samples: readFileSync(join(out, 'samples.jsonl'), 'utf8'),
  };
}

describe('kvrouter bench fleet --router-threads', () => {
  it('documents the flag in --help', async () => {
    const p = spawn(process.execPath, [join(ROOT, 'bin/kvrouter.js'), 'bench', 'fleet', '--help'], { cwd: ROOT });
    let out = '';
    p.stdout.on('data', (d: Buffer) => (out += d.toString()));
    expect(await new Promise((r) => p.on('exit', r))).toBe(0);
    expect(out).toContain('--router-threads');
  });

  it('gives the inline run byte for byte (3 replicas on 1 and on 2 workers)', async () => {
    const inline = await fleet('inline', ['--routers', '3', '--router-threads', '0']);
    const one = await fleet('one', ['--routers', '3', '--router-threads', '1']);
    const two = await fleet('two', ['--routers', '3', '--router-threads', '2']);
    // The summary holds no wall-clock figure (those are in fleet.json): all of it must agree.
    const s = JSON.parse(inline.summary) as { results: Array<{ fleet: { routers: Array<{ decisions: number }> } }> };
    expect(s.results[0].fleet.routers).toHaveLength(3);
    expect(s.results[0].fleet.routers.every((r) => r.decisions > 0)).toBe(true);
    for (const t of [one, two]) {
      expect(t.summary).toBe(inline.summary);
      expect(t.samples).toBe(inline.samples);
    }
  }, 300_000);

  it('gives the inline run byte for byte (2 replicas on 2 workers; gie reads scraped gauges)', async () => {
    const inline = await fleet('inline2', ['--routers', '2', '--router-threads', '0'], 'kv,gie');
    const two = await fleet('two2', ['--routers', '2', '--router-threads', '2'], 'kv,gie');
    expect(two.summary).toBe(inline.summary);
    expect(two.samples).toBe(inline.samples);
  }, 300_000);

  it('ends the run with one clear error line when a worker fails, and exits (no thread left)', async () => {
    // The worker's test hook (router-worker.ts) throws at its 50th call.
    const r = await runBounded(
      ['bench', 'fleet', '--quick', '--policies', 'kv', '--routers', '3', '--out', join(dir, 'fail')],
      { KVROUTER_TEST_ROUTER_WORKER_FAIL_AT: '50' },
      150_000,
    );
    expect(r.code, r.stderr).toBe(1);
    const lines = r.stderr.split('\n').filter((l) => l.includes('router worker'));
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/router worker \d failed: test hook: failing at record 50 \(at /);
  }, 200_000);
});
