// Real processes for integration tests: spawn the compiled CLI, wait for its ready line, kill it.
import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const CLI = `${ROOT}bin/kvrouter.js`;

// Safety net: whatever a failing test leaves behind dies with the test process.
const live = new Set<ChildProcess>();
process.once('exit', () => {
  for (const p of live) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
});

export interface Proc {
  proc: ChildProcess;
  lines: string[];
  kill(signal?: NodeJS.Signals): Promise<void>;
}

/** Spawn `kvrouter <args>` and resolve once `ready` matches `count` stdout lines. */
export async function spawnCli(args: string[], ready: RegExp, opts: { count?: number; timeoutMs?: number; env?: NodeJS.ProcessEnv } = {}): Promise<Proc> {
  const proc = spawn(process.execPath, [CLI, ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...opts.env } });
  live.add(proc);
  proc.once('exit', () => live.delete(proc));
  const lines: string[] = [];
  let err = '';
  proc.stderr!.on('data', (d: Buffer) => (err += d.toString()));
  const want = opts.count ?? 1;
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`timeout waiting for ${ready} from kvrouter ${args.join(' ')}\nstdout:${lines.join('\n')}\nstderr:${err}`)), opts.timeoutMs ?? 30_000);
    let buf = '';
    let seen = 0;
    proc.stdout!.on('data', (d: Buffer) => {
      buf += d.toString();
      let nl: number;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        lines.push(line);
        if (ready.test(line) && ++seen >= want) {
          clearTimeout(timer);
          resolve();
        }
      }
    });
    proc.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`kvrouter ${args.join(' ')} exited with ${code}\n${err}`));
    });
  });
  proc.removeAllListeners('exit');
  return {
    proc,
    lines,
    kill: (signal = 'SIGTERM') =>
      new Promise<void>((resolve) => {
        if (proc.exitCode !== null || proc.signalCode !== null) return resolve();
        const t = setTimeout(() => proc.kill('SIGKILL'), 10_000);
        proc.once('exit', () => {
          clearTimeout(t);
          resolve();
        });
        proc.kill(signal);
      }),
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
  const p = await spawnCli(['engine-sim', '--port', String(port), '--zmq-port', '0', '--replay-port', '0', ...extra], ENGINE_LINE);
  const m = ENGINE_LINE.exec(p.lines.find((l) => ENGINE_LINE.test(l))!)!;
  return { ...p, url: m[1], zmq: m[2], replay: m[3], port: Number(new URL(m[1]).port) };
}

export async function waitFor<T>(what: string, fn: () => Promise<T | undefined | false> | T | undefined | false, timeoutMs = 15_000, everyMs = 50): Promise<T> {
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
