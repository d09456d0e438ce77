// Real processes for integration tests: the benchmarks' child-process helper (spawn the compiled
// CLI, wait for its ready line, kill it; none outlives the test process) under the tests' names.
import { type ChildProcess, spawn } from 'node:child_process';
import { join } from 'node:path';
import { REPO_ROOT, spawnCli as spawnChildCli } from '../../src/bench/procs/children.js';

export const ROOT = REPO_ROOT;

export interface Proc {
  proc: ChildProcess;
  lines: string[];
  /** Its stderr so far (last 64 KiB): for failure messages. */
  stderr(): string;
  kill(signal?: NodeJS.Signals): Promise<void>;
}

/** Spawn `kvrouter <args>` and resolve once `ready` matches `count` stdout lines. */
export async function spawnCli(
  args: string[],
  ready: RegExp,
  opts: { count?: number; timeoutMs?: number; env?: NodeJS.ProcessEnv } = {},
): Promise<Proc> {
  const c = await spawnChildCli(args, ready, { timeoutMs: 120_000, ...opts });
  return {
    proc: c.proc,
    lines: c.lines,
    stderr: () => c.stderr(),
    kill: (signal = 'SIGTERM') => c.stop(10_000, signal),
  };
}

export interface EngineProc extends Proc {
  url: string;
  zmq: string;
  replay: string;
  port: number;
}

const ENGINE_LINE = /^engine-sim \S+ (http:\/\/\S+) zmq (tcp:\/\/\S+) replay (tcp:\/\/\S+)/;

/** Start one simulated engine process on free ports (or the given HTTP port). */
export async function startEngineProc(extra: string[] = [], port = 0): Promise<EngineProc> {
  const p = await spawnCli(
    ['engine-sim', '--port', String(port), '--zmq-port', '0', '--replay-port', '0', ...extra],
    ENGINE_LINE,
  );
  const m = ENGINE_LINE.exec(p.lines.find((l) => ENGINE_LINE.test(l))!)!;
  return { ...p, url: m[1], zmq: m[2], replay: m[3], port: Number(new URL(m[1]).port) };
}

export async function waitFor<T>(
  what: string,
  fn: () => Promise<T | undefined | false> | T | undefined | false,
  timeoutMs = 60_000,
  everyMs = 50,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  while (Date.now() < deadline) {
    try {
      const v = await fn();
      if (v !== undefined && v !== false) return v as T;
    } catch (err) {
      last = err;
    }
    await new Promise((r) => setTimeout(r, everyMs));
  }
  throw new Error(`timed out waiting for ${what}${last ? `: ${String(last)}` : ''}`);
}

/** Run the kvrouter CLI to its end, stdout ignored: its exit code and everything it wrote to stderr. */
export function runCli(args: string[]): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, [join(ROOT, 'bin/kvrouter.js'), ...args], {
      cwd: ROOT,
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    p.stderr.on('data', (d: Buffer) => {
      stderr += d.toString();
    });
    p.on('close', (code) => resolve({ code, stderr }));
  });
}
