// wrk (a C load generator, Debian's `wrk`) as the closed loop of the throughput ramp. The forked Node
// generator spends 60-90 µs of CPU per request, wrk with its Lua body rotation about 25-30: on a
// small machine the Node generator and the Node stubs keep most of a core busy at the proxy's best
// rate, which caps what more proxy processes can show (docs/benchmarks.md, `--loadgen wrk`).
import { execFile, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Dist } from '../stats.js';
import type { ClosedCommand, LoadResult, LoadSpec } from './loadgen.js';

/** WRK_BIN, else `wrk` on PATH. */
export function findWrk(): string | null {
  if (process.env.WRK_BIN) return process.env.WRK_BIN;
  try {
    return execFileSync('sh', ['-c', 'command -v wrk'], { encoding: 'utf8' }).trim() || null;
  } catch {
    return null;
  }
}

/**
 * A Lua long string holding `text` verbatim: the first level whose closing bracket neither occurs in
 * it nor forms at its end, and a newline after the opening one (Lua drops a first newline).
 */
export function luaLong(text: string): string {
  let eq = '';
  while (`${text}]`.includes(`]${eq}]`)) eq += '=';
  return `[${eq}[\n${text}]${eq}]`;
}

/** The script of one wrk run: POST `path`, rotating over `bodies`, with `headers`. */
export function wrkScript(path: string, bodies: readonly string[], headers: Readonly<Record<string, string>>): string {
  return [
    `local bodies = {\n${bodies.map(luaLong).join(',\n')}\n}`,
    'local i = 0',
    'wrk.method = "POST"',
    ...Object.entries({ 'content-type': 'application/json', ...headers }).map(
      ([k, v]) => `wrk.headers[(${luaLong(k)})] = ${luaLong(v)}`,
    ),
    'request = function()',
    '  i = i + 1',
    `  return wrk.format(nil, ${luaLong(path)}, nil, bodies[(i % #bodies) + 1])`,
    'end',
    '',
  ].join('\n');
}

export interface WrkRun {
  /** Responses received (any status). */
  requests: number;
  seconds: number;
  non2xx: number;
  socketErrors: number;
  p50Ms: number;
  p90Ms: number;
  p99Ms: number;
  /** CPU seconds of wrk itself (bash's `times` for its children). */
  cpuSeconds: number;
}

const MS: Record<string, number> = { us: 1e-3, ms: 1, s: 1e3, m: 60e3 };

/** What `wrk --latency` printed, followed by bash's `times`; throws when the summary is missing. */
export function parseWrk(out: string): WrkRun {
  const total = /(\d+) requests in ([\d.]+)(us|ms|s|m),/.exec(out);
  if (!total) throw new Error(`wrk printed no summary: ${out.slice(0, 300)}`);
  const pct = (p: number) => {
    const m = new RegExp(`^\\s+${p}(?:\\.0+)?%\\s+([\\d.]+)(us|ms|s|m)\\s*$`, 'm').exec(out);
    return m ? Number(m[1]) * MS[m[2]] : NaN;
  };
  const sock = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out);
  // `times` prints the shell's user and system time, then its children's: the last line is wrk's.
  const times = [...out.matchAll(/^(\d+)m([\d.]+)s (\d+)m([\d.]+)s$/gm)].at(-1);
  return {
    requests: Number(total[1]),
    seconds: (Number(total[2]) * MS[total[3]]) / 1000,
    non2xx: Number(/Non-2xx or 3xx responses: (\d+)/.exec(out)?.[1] ?? 0),
    socketErrors: sock ? sock.slice(1).reduce((a, b) => a + Number(b), 0) : 0,
    p50Ms: pct(50),
    p90Ms: pct(90),
    p99Ms: pct(99),
    cpuSeconds: times ? Number(times[1]) * 60 + Number(times[2]) + Number(times[3]) * 60 + Number(times[4]) : NaN,
  };
}

/** Runs the ramp's closed-loop steps with wrk: one wrk per origin (the direct target has two), one thread each. */
export class WrkLoad {
  private readonly dir = mkdtempSync(join(tmpdir(), 'kvrouter-wrk-'));
  /** Script files by bodies (the benchmark's one array), path and headers: written once, not per step. */
  private readonly scripts = new WeakMap<readonly string[], Map<string, string>>();
  private written = 0;

  constructor(private readonly bin: string) {}

  async run(cmd: ClosedCommand): Promise<LoadResult> {
    const byOrigin = new Map<string, string>();
    for (const u of cmd.spec.urls) {
      const url = new URL(u);
      if (!byOrigin.has(url.origin)) byOrigin.set(url.origin, url.pathname + url.search);
    }
    // Fewer connections than origins (the direct target's first step): only as many origins, so the
    // step keeps exactly `concurrency` requests in flight, as the Node generator does.
    const origins = [...byOrigin.keys()].slice(0, Math.max(1, cmd.concurrency));
    const scripts = origins.map((o) => this.script(byOrigin.get(o)!, cmd.spec));
    const conns = (i: number) =>
      Math.floor(cmd.concurrency / origins.length) + (i < cmd.concurrency % origins.length ? 1 : 0);
    const all = (seconds: number) => Promise.all(origins.map((o, i) => this.once(o, scripts[i], conns(i), seconds)));
    const t0 = performance.now();
    if (cmd.warmupMs > 0) await all(Math.max(1, Math.round(cmd.warmupMs / 1000)));
    const runs = await all(Math.max(1, Math.round(cmd.durationMs / 1000)));
    const span = (performance.now() - t0) / 1000;
    const requests = runs.reduce((a, r) => a + r.requests, 0);
    const errors = runs.reduce((a, r) => a + r.non2xx + r.socketErrors, 0);
    const seconds = Math.max(...runs.map((r) => r.seconds));
    // Percentiles of the busiest run: wrk reports no samples to merge.
    const top = runs.reduce((a, r) => (r.requests > a.requests ? r : a));
    const latencyDist: Dist = { n: requests, mean: NaN, p50: top.p50Ms, p90: top.p90Ms, p99: top.p99Ms, max: NaN };
    return {
      latencies: [],
      latencyDist,
      completed: Math.max(0, requests - runs.reduce((a, r) => a + r.non2xx, 0)),
      errors,
      firstError:
        errors > 0
          ? `wrk: ${runs.map((r) => `${r.non2xx} non-2xx, ${r.socketErrors} socket errors`).join('; ')}`
          : null,
      seconds,
      spanSeconds: span,
      cpuSeconds: runs.reduce((a, r) => a + r.cpuSeconds, 0),
    };
  }

  private script(path: string, spec: LoadSpec): string {
    let files = this.scripts.get(spec.bodies);
    if (!files) this.scripts.set(spec.bodies, (files = new Map()));
    const key = `${path}\n${JSON.stringify(spec.headers)}`;
    let file = files.get(key);
    if (!file) {
      file = join(this.dir, `s${this.written++}.lua`);
      writeFileSync(file, wrkScript(path, spec.bodies, spec.headers));
      files.set(key, file);
    }
    return file;
  }

  private once(origin: string, script: string, connections: number, seconds: number): Promise<WrkRun> {
    // bash's `times` gives wrk's CPU; the exit status stays wrk's. A response slower than wrk's
    // default 2 s timeout would be dropped from its percentiles: the Node generator has no cut-off.
    const cmd = `"$0" -t1 -c${connections} -d${seconds}s --timeout 60s --latency -s "$1" "$2"; s=$?; times; exit $s`;
    return new Promise((resolve, reject) => {
      // C locale: `times` writes its decimal point as the locale says.
      execFile(
        'bash',
        ['-c', cmd, this.bin, script, origin],
        { maxBuffer: 1 << 20, env: { ...process.env, LC_ALL: 'C' } },
        (err, stdout, stderr) => {
          if (err)
            return reject(
              new Error(`wrk failed (${origin}): ${(stderr || stdout || err.message).trim().slice(0, 300)}`),
            );
          try {
            resolve(parseWrk(stdout));
          } catch (e) {
            reject(e as Error);
          }
        },
      );
    });
  }

  stop(): void {
    rmSync(this.dir, { recursive: true, force: true });
  }
}
