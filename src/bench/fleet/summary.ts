// One policy's fleet simulation reduced to the figures `bench cluster` reports (through its own
// `summarize`, so the two reports mean the same thing), plus what only a simulation can report:
// goodput at an SLO, refused requests, per-engine balance at any fleet size, the routers' KV-event
// outcomes, hit check and index size. Wall-clock figures are kept apart (`FleetWall`): everything
// else is a function of the inputs, so the same seed gives the same bytes.
import type { FleetOutput, RouterTally } from '../../fleet-sim/types.js';
import type { Sample } from '../cluster/client.js';
import { type PolicyResult, summarize } from '../cluster/summary.js';
import type { EngineCounters, HitCheck } from '../procs/engine-metrics.js';
import { cov, type Dist, dist } from '../stats.js';

export interface Slo {
  ttftMs: number;
  tpotMs: number;
}

export interface FleetExtras {
  /** Requests the routers refused (503: no capacity within the queue timeout). */
  refused: number;
  /** Requests meeting both SLOs (TTFT, and TPOT for 2+ tokens), per second of the run and as a share of those sent. */
  goodput: { sloTtftMs: number; sloTpotMs: number; requests: number; share: number; perS: number };
  /** Spread over engines (any fleet size): requests, busy (virtual) seconds, prefilled tokens. */
  balance: {
    requests: { min: number; p50: number; max: number; cov: number };
    /** CoV of the engines' own busy time (virtual time with a pass running; `imbalance.busyCov` is client-observed, as in bench cluster). */
    busyCov: number;
    prefilledCov: number;
  };
  routers: RouterTally[];
  /** Index size per replica: (block, holder) records and bytes per record (the largest replica). */
  index: { records: number; bytes: number; bytesPerRecord: number };
  /** Virtual seconds from the first send to the last completion. */
  virtualS: number;
  events: number;
  /** The engines' gauges scraped for the policy (engine_metrics.scrape): interval, staleness, scrapes taken; null: none. */
  scrape: { intervalMs: number; staleMs: number; scrapes: number } | null;
}

export type FleetPolicyResult = PolicyResult & { fleet: FleetExtras };

/** Real-clock figures of one policy's run: not deterministic, never in the summary. */
export interface FleetWall {
  policy: string;
  simSeconds: number;
  /** CPU time (user + system) of this process during the simulation: its wall time on an idle core. */
  cpuSeconds: number;
  eventsPerS: number;
  /** Scheduler.decide, µs: every decision, and those of long prompts. */
  decisionUs: { all: Dist; isl16k: Dist; isl28k: Dist; candidates: number };
  heapMiB: number;
}

export function summarizeFleet(
  policy: string,
  summary: string,
  out: FleetOutput,
  slo: Slo,
  scrape: { intervalMs: number; staleMs: number } | null = null,
): FleetPolicyResult {
  const samples: Sample[] = out.records.map((r) => ({
    index: r.index,
    sentAt: r.sentAt,
    lagMs: 0,
    ttftMs: r.ttftMs,
    e2eMs: r.e2eMs,
    status: r.status,
    instance: r.instance,
    promptTokens: r.promptTokens,
    cachedTokens: r.cachedTokens,
    completionTokens: r.completionTokens,
    error: r.error,
  }));
  const counters: EngineCounters[] = out.engines.map((e) => ({
    queries: e.queries,
    gpuHits: e.gpuHits,
    hostHits: e.hostHits,
    promptTokens: e.promptTokens,
    generationTokens: e.generationTokens,
    preemptions: e.preemptions,
    requests: e.requests,
  }));
  const ids = out.engines.map((e) => e.id);
  const base = summarize(policy, summary, samples, ids, counters, out.spanMs, {
    router: null,
    engines: null,
    client: 0,
  });
  const hitCheck: HitCheck = { agree: 0, over: 0, under: 0, unverified: 0, alarms: 0 };
  for (const r of out.routers)
    for (const k of Object.keys(hitCheck) as Array<keyof HitCheck>) hitCheck[k] += r.hitCheck[k];
  const good = out.records.filter(
    (r) =>
      r.error === null &&
      r.ttftMs !== null &&
      r.ttftMs <= slo.ttftMs &&
      (r.completionTokens < 2 || (r.e2eMs - r.ttftMs) / (r.completionTokens - 1) <= slo.tpotMs),
  ).length;
  const perEngine = [...base.engines.map((e) => e.requests)].sort((a, b) => a - b);
  const widest = out.routers.reduce(
    (a, r) => (r.index.bytes > a.bytes ? r.index : a),
    out.routers[0]?.index ?? { records: 0, bytes: 0, namespaces: 0, blocks: 0 },
  );
  const fleet: FleetExtras = {
    refused: out.records.filter((r) => r.status === 503).length,
    goodput: {
      sloTtftMs: slo.ttftMs,
      sloTpotMs: slo.tpotMs,
      requests: good,
      share: out.records.length ? good / out.records.length : 0,
      perS: out.spanMs > 0 ? good / (out.spanMs / 1000) : 0,
    },
    balance: {
      requests: {
        min: perEngine[0] ?? 0,
        p50: perEngine[Math.floor((perEngine.length - 1) / 2)] ?? 0,
        max: perEngine[perEngine.length - 1] ?? 0,
        cov: cov(perEngine),
      },
      busyCov: cov(out.engines.map((e) => e.busyMs)),
      prefilledCov: cov(base.engines.map((e) => e.prefilledTokens)),
    },
    routers: out.routers,
    index: {
      records: widest.records,
      bytes: widest.bytes,
      bytesPerRecord: widest.records ? widest.bytes / widest.records : 0,
    },
    virtualS: out.spanMs / 1000,
    events: out.events,
    scrape: scrape && { ...scrape, scrapes: out.scrapes },
  };
  return { ...base, hitCheck, fleet };
}

export function wallFigures(
  policy: string,
  out: FleetOutput,
  simSeconds: number,
  cpuSeconds: number,
  heapBytes: number,
): FleetWall {
  const w = out.wallDecisions;
  const pick = (minIsl: number) => {
    const xs: number[] = [];
    for (let i = 0; i < w.us.length; i++) if (w.isl[i] >= minIsl) xs.push(w.us[i]);
    return dist(xs);
  };
  return {
    policy,
    simSeconds,
    cpuSeconds,
    eventsPerS: simSeconds > 0 ? out.events / simSeconds : 0,
    decisionUs: {
      all: dist(Array.from(w.us)),
      isl16k: pick(16_000),
      isl28k: pick(28_000),
      candidates: w.candidates.reduce((a, c) => Math.max(a, c), 0),
    },
    heapMiB: heapBytes / 2 ** 20,
  };
}
