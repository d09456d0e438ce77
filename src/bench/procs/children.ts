// Child processes of the benchmarks (the kvrouter CLI, nginx, helpers): spawn, wait for a ready
// line, read their CPU time, and make sure none outlives the benchmark.
import { type ChildProcess, spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** bin/kvrouter.js of this checkout (this file runs from dist/bench/procs/). */
export const CLI = fileURLToPath(new URL('../../../bin/kvrouter.js', import.meta.url));
export const REPO_ROOT = fileURLToPath(new URL('../../../', import.meta.url));

export interface Child {
  readonly proc: ChildProcess;
  readonly pid: number;
  /** stdout lines so far. */
  readonly lines: string[];
  /** stderr so far (last 64 KiB). */
  stderr(): string;
  /** `signal` (SIGTERM), then SIGKILL after `graceMs`; resolves when it has exited. */
  stop(graceMs?: number, signal?: NodeJS.Signals): Promise<void>;
}

const live = new Set<ChildProcess>();
let hooked = false;

function hookExit(): void {
  if (hooked) return;
  hooked = true;
  process.once('exit', () => {
    for (const p of live) p.kill('SIGKILL');
  });
  for (const sig of ['SIGINT', 'SIGTERM'] as const) {
    process.once(sig, () => {
      for (const p of live) p.kill('SIGKILL');
      process.exit(130);
    });
  }
}

/** Spawn `cmd args` and resolve once a stdout line matches `ready` `count` times. */
export function spawnChild(
  cmd: string,
  args: string[],
  ready: RegExp | null,
  opts: { count?: number; timeoutMs?: number; cwd?: string; env?: NodeJS.ProcessEnv } = {},
): Promise<Child> {
  hookExit();
  const proc = spawn(cmd, args, {
    cwd: opts.cwd ?? REPO_ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ...opts.env },
  });
  live.add(proc);
  const lines: string[] = [];
  let err = '';
  let buf = '';
  proc.stderr!.on('data', (d: Buffer) => {
    err = (err + d.toString()).slice(-65_536);
  });
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  void exited.then(() => live.delete(proc));
  const child: Child = {
    proc,
    pid: proc.pid ?? -1,
    lines,
    stderr: () => err,
    async stop(graceMs = 10_000, signal: NodeJS.Signals = 'SIGTERM') {
      if (proc.exitCode !== null || proc.signalCode !== null) return;
      const t = setTimeout(() => proc.kill('SIGKILL'), graceMs);
      proc.kill(signal);
      await exited;
      clearTimeout(t);
    },
  };
  return new Promise<Child>((resolve, reject) => {
    const want = opts.count ?? 1;
    let seen = 0;
    const timer = setTimeout(() => {
      void child.stop(0);
      reject(
        new Error(`timed out waiting for ${String(ready)} from ${cmd} ${args.join(' ')}\n${lines.join('\n')}\n${err}`),
      );
    }, opts.timeoutMs ?? 60_000);
    proc.stdout!.on('data', (d: Buffer) => {
      buf += d.toString();
      let nl: number;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (lines.length < 10_000) lines.push(line);
        if (ready && ready.test(line) && ++seen === want) {
          clearTimeout(timer);
          resolve(child);
        }
      }
    });
    proc.once('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    void exited.then(() => {
      clearTimeout(timer);
      reject(new Error(`${cmd} ${args.join(' ')} exited with ${proc.exitCode ?? proc.signalCode}\n${err}`));
    });
    if (!ready) {
      clearTimeout(timer);
      resolve(child);
    }
  });
}

/** `kvrouter <args>` as a child (same node binary; `nodeArgs` before the script, e.g. --cpu-prof). */
export function spawnCli(
  args: string[],
  ready: RegExp,
  opts: { count?: number; timeoutMs?: number; env?: NodeJS.ProcessEnv; nodeArgs?: string[] } = {},
): Promise<Child> {
  return spawnChild(process.execPath, [...(opts.nodeArgs ?? []), CLI, ...args], ready, opts);
}

// Clock ticks per second of /proc/<pid>/stat: 100 on every Linux ABI node supports.
const USER_HZ = 100;

/** CPU seconds (user + system, all threads) a process has used so far; null where /proc is missing. */
export function processCpuSeconds(pid: number): number | null {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
    return (Number(f[11]) + Number(f[12])) / USER_HZ;
  } catch {
    return null;
  }
}

/** Child processes of `pid` (read from /proc). */
export function childrenOf(pid: number): number[] {
  const out: number[] = [];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const s = readFileSync(`/proc/${d}/stat`, 'utf8');
      if (Number(s.slice(s.lastIndexOf(')') + 2).split(' ')[1]) === pid) out.push(Number(d));
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

/** CPU seconds of a process and its children (nginx's master and workers, `serve --workers`). */
export function processTreeCpuSeconds(pid: number): number | null {
  let total = 0;
  for (const p of [pid, ...childrenOf(pid)]) {
    const c = processCpuSeconds(p);
    if (c === null) return null;
    total += c;
  }
  return total;
}

/** CPU seconds of a process and of each of its children, the process first, children by pid (null if one is unreadable). */
export function processTreeCpuByPid(pid: number): Array<{ pid: number; seconds: number }> | null {
  const out: Array<{ pid: number; seconds: number }> = [];
  for (const p of [pid, ...childrenOf(pid).sort((a, b) => a - b)]) {
    const seconds = processCpuSeconds(p);
    if (seconds === null) return null;
    out.push({ pid: p, seconds });
  }
  return out;
}

/** CPU seconds of this process (user + system). */
export function selfCpuSeconds(): number {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
}
