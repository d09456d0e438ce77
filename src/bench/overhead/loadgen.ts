// The load generator of the overhead benchmarks, in its own process (forked) so that its CPU is
// not the proxy's: a fixed number of requests one at a time (latency), or a closed loop at a
// given concurrency for a given time (throughput). Requests rotate over bodies and URLs.
import { type ChildProcess, fork } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { Agent, request } from 'undici';
import type { Dist } from '../stats.js';

export interface LoadSpec {
  urls: string[];
  bodies: string[];
  headers: Record<string, string>;
}

export type ClosedCommand = {
  type: 'closed';
  spec: LoadSpec;
  concurrency: number;
  warmupMs: number;
  durationMs: number;
};
export type LoadCommand = { type: 'latency'; spec: LoadSpec; requests: number; warmup: number } | ClosedCommand;

/** What runs the throughput ramp's steps: this generator, or wrk (wrk.ts). */
export interface ClosedLoop {
  run(cmd: ClosedCommand): Promise<LoadResult>;
}

export interface LoadResult {
  /** Latencies (ms) of the measured requests, to the last byte of the response. */
  latencies: number[];
  completed: number;
  errors: number;
  firstError: string | null;
  seconds: number;
  /** The load generator's own CPU over the measured period. */
  cpuSeconds: number;
  /** Percentiles when the generator reports no samples (wrk); else from `latencies`. */
  latencyDist?: Dist;
  /** Wall time of warm-up and measurement together, when not warmupMs + durationMs (wrk runs whole seconds). */
  spanSeconds?: number;
}

const FLAG = '--overhead-loadgen';

async function once1(d: Agent, spec: LoadSpec, k: number): Promise<string | null> {
  const res = await request(spec.urls[k % spec.urls.length], {
    method: 'POST',
    body: spec.bodies[k % spec.bodies.length],
    headers: { 'content-type': 'application/json', ...spec.headers },
    dispatcher: d,
  });
  const text = await res.body.text();
  if (res.statusCode !== 200) return `HTTP ${res.statusCode}: ${text.slice(0, 200)}`;
  return null;
}

async function execute(cmd: LoadCommand): Promise<LoadResult> {
  const concurrency = cmd.type === 'latency' ? 1 : cmd.concurrency;
  const d = new Agent({ connections: concurrency, pipelining: 1, keepAliveTimeout: 60_000 });
  const out: LoadResult = { latencies: [], completed: 0, errors: 0, firstError: null, seconds: 0, cpuSeconds: 0 };
  let k = 0;
  const one = async (measure: boolean) => {
    const t = performance.now();
    let err: string | null;
    try {
      err = await once1(d, cmd.spec, k++);
    } catch (e) {
      err = String((e as Error).message ?? e);
    }
    if (!measure) return;
    if (err) {
      out.errors++;
      out.firstError ??= err;
    } else {
      out.completed++;
      out.latencies.push(performance.now() - t);
    }
  };
  if (cmd.type === 'latency') {
    for (let i = 0; i < cmd.warmup; i++) await one(false);
    const c0 = process.cpuUsage();
    const t0 = performance.now();
    for (let i = 0; i < cmd.requests; i++) await one(true);
    out.seconds = (performance.now() - t0) / 1000;
    const c = process.cpuUsage(c0);
    out.cpuSeconds = (c.user + c.system) / 1e6;
  } else {
    let phase: 'warmup' | 'measure' | 'stop' = 'warmup';
    const worker = async () => {
      while (phase !== 'stop') await one(phase === 'measure');
    };
    const workers = Array.from({ length: cmd.concurrency }, worker);
    await new Promise((r) => setTimeout(r, cmd.warmupMs));
    phase = 'measure';
    const c0 = process.cpuUsage();
    const t0 = performance.now();
    await new Promise((r) => setTimeout(r, cmd.durationMs));
    phase = 'stop';
    out.seconds = (performance.now() - t0) / 1000;
    const c = process.cpuUsage(c0);
    out.cpuSeconds = (c.user + c.system) / 1e6;
    await Promise.all(workers);
  }
  await d.close();
  return out;
}

/** A forked load generator; `run` sends it one command and waits for the result. */
export class LoadGenerator {
  private constructor(private readonly child: ChildProcess) {}

  static async start(): Promise<LoadGenerator> {
    const child = fork(fileURLToPath(import.meta.url), [FLAG], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    await once(child, 'spawn');
    return new LoadGenerator(child);
  }

  get pid(): number {
    return this.child.pid ?? -1;
  }

  async run(cmd: LoadCommand): Promise<LoadResult> {
    const reply = once(this.child, 'message') as Promise<[LoadResult]>;
    this.child.send(cmd);
    return (await reply)[0];
  }

  async stop(): Promise<void> {
    if (this.child.exitCode !== null) return;
    const exited = once(this.child, 'exit');
    this.child.kill('SIGTERM');
    await exited;
  }
}

if (process.argv.includes(FLAG) && process.send) {
  process.on('message', (cmd: LoadCommand) => {
    void execute(cmd).then((r) => process.send!(r));
  });
}
