// The two measurements of the proxy targets, interleaved so that a noisy neighbour on the shared
// cores hits every target alike: latency one request at a time (in rounds), and the highest
// sustained request rate of a closed loop at doubling concurrency (a target drops out once its
// throughput has stopped growing for two steps at or past minConcurrency).
import { type Dist, dist } from '../stats.js';
import type { ClosedLoop, LoadGenerator, LoadSpec } from './loadgen.js';

export interface Target {
  name: string;
  description: string;
  spec: LoadSpec;
  /** CPU seconds so far of the process(es) doing the proxying (the upstreams, for direct). */
  cpu: () => number | null;
  /** The same, per process (several workers: the parent first, then each worker by pid). */
  cpuByProcess?: () => ProcessCpu[] | null;
}

export interface ProcessCpu {
  pid: number;
  seconds: number;
}

/**
 * µs per request of each process between two readings, in the order of `after` (null when the set
 * of processes changed: a worker replaced mid-step). Shows how the work was split: node:cluster may
 * give one process most of a load generator's connections.
 */
export function cpuSplitUsPerReq(
  before: readonly ProcessCpu[] | null,
  after: readonly ProcessCpu[] | null,
  requests: number,
  covered: number,
): number[] | null {
  if (!before || !after || requests === 0 || before.length !== after.length) return null;
  const out: number[] = [];
  for (let i = 0; i < after.length; i++) {
    if (before[i].pid !== after[i].pid) return null;
    out.push(((after[i].seconds - before[i].seconds) * 1e6) / (requests * covered));
  }
  return out;
}

export interface Step {
  concurrency: number;
  rps: number;
  latencyMs: Dist;
  errors: number;
  /** CPU of the proxy (the upstreams, for direct) per completed request, µs. */
  proxyCpuUsPerReq: number | null;
  /** The same per process, for targets of several processes (`cpuSplitUsPerReq`). */
  processCpuUsPerReq?: number[] | null;
  /** The load generator's CPU, in cores, during the step. */
  loadgenCores: number;
  /** The stub upstreams' CPU per completed request, µs (null: not measured). */
  upstreamCpuUsPerReq?: number | null;
}

/**
 * Cores of this machine a step kept busy: the proxy, the load generator and the upstreams (null:
 * a part not measured). Everything shares the machine's cores, so a target that kept `busy` of
 * `cores` busy at its best rate can reach at most `cores / busy` times that rate with more worker
 * processes, even if they cost nothing extra per request.
 */
export function busyCores(s: Step): number | null {
  if (s.proxyCpuUsPerReq === null || s.upstreamCpuUsPerReq === null || s.upstreamCpuUsPerReq === undefined) return null;
  return (s.rps * (s.proxyCpuUsPerReq + s.upstreamCpuUsPerReq)) / 1e6 + s.loadgenCores;
}

export interface TargetResult {
  name: string;
  description: string;
  latencyMs: Dist;
  steps: Step[];
  maxRps: number;
  maxRpsConcurrency: number;
  errors: number;
  firstError: string | null;
}

export interface MeasureOptions {
  latencyRequests: number;
  latencyRounds: number;
  warmupRequests: number;
  stepMs: number;
  stepWarmupMs: number;
  maxConcurrency: number;
  /** Below this concurrency a step that does not grow does not count toward stopping (a dip at 2 or 4 ended ramps early). */
  minConcurrency: number;
}

/**
 * Steps in a row without growth after one more step at concurrency `c`: a step more than 3 % above
 * the best so far resets the count; below `minConcurrency` a step without growth does not count.
 * The ramp stops a target at 2.
 */
export function rampFlatSteps(flat: number, rps: number, bestRps: number, c: number, minConcurrency: number): number {
  if (rps > bestRps * 1.03) return 0;
  return c >= minConcurrency ? flat + 1 : flat;
}

/** `closed` runs the ramp's steps (default: `lg`, which always measures the one-at-a-time latency). */
export async function measureTargets(
  targets: readonly Target[],
  lg: LoadGenerator,
  o: MeasureOptions,
  log: (l: string) => void,
  upstreamCpu?: () => number | null,
  closed: ClosedLoop = lg,
): Promise<TargetResult[]> {
  const lat = new Map<string, number[]>(targets.map((t) => [t.name, []]));
  const res = new Map<string, TargetResult>(
    targets.map((t) => [
      t.name,
      {
        name: t.name,
        description: t.description,
        latencyMs: dist([]),
        steps: [],
        maxRps: 0,
        maxRpsConcurrency: 1,
        errors: 0,
        firstError: null,
      },
    ]),
  );
  const note = (t: Target, errors: number, first: string | null) => {
    const r = res.get(t.name)!;
    r.errors += errors;
    r.firstError ??= first;
  };
  for (const t of targets) await lg.run({ type: 'latency', spec: t.spec, requests: 0, warmup: o.warmupRequests });
  const per = Math.ceil(o.latencyRequests / o.latencyRounds);
  for (let round = 0; round < o.latencyRounds; round++) {
    for (const t of targets) {
      const r = await lg.run({ type: 'latency', spec: t.spec, requests: per, warmup: 0 });
      lat.get(t.name)!.push(...r.latencies);
      note(t, r.errors, r.firstError);
    }
  }
  for (const t of targets) {
    res.get(t.name)!.latencyMs = dist(lat.get(t.name)!);
    log(
      `${t.name}: latency p50 ${res.get(t.name)!.latencyMs.p50.toFixed(3)} ms, p99 ${res.get(t.name)!.latencyMs.p99.toFixed(3)} ms`,
    );
  }

  const flat = new Map<string, number>(targets.map((t) => [t.name, 0]));
  for (let c = 1; c <= o.maxConcurrency; c *= 2) {
    const active = targets.filter((t) => flat.get(t.name)! < 2);
    if (active.length === 0) break;
    for (const t of active) {
      const c0 = t.cpu();
      const p0 = t.cpuByProcess?.() ?? null;
      const u0 = upstreamCpu?.() ?? null;
      const r = await closed.run({
        type: 'closed',
        spec: t.spec,
        concurrency: c,
        warmupMs: o.stepWarmupMs,
        durationMs: o.stepMs,
      });
      const c1 = t.cpu();
      const p1 = t.cpuByProcess?.() ?? null;
      const u1 = upstreamCpu?.() ?? null;
      const rps = r.completed / r.seconds;
      // The CPU window also spans the step's warm-up and tail: scale it to the measured part.
      const covered =
        r.spanSeconds !== undefined && r.seconds > 0
          ? r.spanSeconds / r.seconds
          : (o.stepWarmupMs + o.stepMs) / o.stepMs;
      const d = r.latencyDist ?? dist(r.latencies);
      const out = res.get(t.name)!;
      out.steps.push({
        concurrency: c,
        rps,
        latencyMs: d,
        errors: r.errors,
        proxyCpuUsPerReq:
          c0 === null || c1 === null || r.completed === 0 ? null : ((c1 - c0) * 1e6) / (r.completed * covered),
        ...(t.cpuByProcess ? { processCpuUsPerReq: cpuSplitUsPerReq(p0, p1, r.completed, covered) } : {}),
        loadgenCores: r.cpuSeconds / r.seconds,
        ...(upstreamCpu
          ? {
              upstreamCpuUsPerReq:
                u0 === null || u1 === null || r.completed === 0 ? null : ((u1 - u0) * 1e6) / (r.completed * covered),
            }
          : {}),
      });
      note(t, r.errors, r.firstError);
      log(
        `${t.name}: concurrency ${c}: ${rps.toFixed(0)} req/s, p50 ${d.p50.toFixed(2)} ms${r.errors ? `, ${r.errors} errors` : ''}`,
      );
      flat.set(t.name, rampFlatSteps(flat.get(t.name)!, rps, out.maxRps, c, o.minConcurrency));
      if (rps > out.maxRps) {
        out.maxRps = rps;
        out.maxRpsConcurrency = c;
      }
    }
  }
  return targets.map((t) => res.get(t.name)!);
}
