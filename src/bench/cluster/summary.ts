// One policy's measurements reduced to the figures the report shows.
import type { EngineCounters, HitCheck } from '../procs/engine-metrics.js';
import { cov, type Dist, dist, quantiles, unionLength } from '../stats.js';
import type { Sample } from './client.js';

export interface EngineLoad {
  id: string;
  requests: number;
  /** Seconds with at least one of its requests in flight (client-observed). */
  busyS: number;
  /** Prompt tokens the engine computed (queried - hits, re-admissions included). */
  prefilledTokens: number;
  counters: EngineCounters;
}

export interface CpuSeconds {
  router: number | null;
  engines: number | null;
  client: number;
}

export interface PolicyResult {
  policy: string;
  summary: string;
  requests: { sent: number; ok: number; errors: number; firstErrors: string[] };
  ttftMs: Dist;
  e2eMs: Dist;
  /** Time per output token after the first, (E2E - TTFT) / (tokens - 1), of requests with 2+ tokens (absent in older reports). */
  tpotMs?: Dist;
  /** Largest delay of a send against its schedule: load-generator lag. */
  maxLagMs: number;
  throughput: { wallS: number; requestsPerS: number; outputTokensPerS: number };
  hitRate: {
    /** (GPU + host-tier hits) / queried tokens, from the engines' metrics. */
    engines: number;
    gpu: number;
    host: number;
    /** Sum of usage.cached_tokens / sum of prompt_tokens (first admission only). */
    usage: number;
  };
  imbalance: { busyCov: number; requestCov: number };
  cpu: CpuSeconds & { routerPctOfCore: number | null; routerUsPerRequest: number | null };
  preemptions: number;
  /** With --bypass: TTFT of the requests that went through the router, and of those that did not. */
  split?: { routed: Dist; bypassed: Dist; routedToBypassTarget: number } | null;
  /** The routers' closed-loop check of their cache predictions (null: not scraped). */
  hitCheck?: HitCheck | null;
  engines: EngineLoad[];
  /**
   * TTFT of requests sent after the first WARMUP_MS (absent in older reports). A run's first seconds
   * carry start-up costs (JIT, first tokenizations, empty caches) that can decide a p99 of a few
   * hundred requests; this is the same run without them.
   */
  steadyTtftMs?: Dist & { requests: number };
  /** 101 evenly spaced TTFT quantiles (ms) of successful requests. */
  ttftCdf: number[];
  /** The router's time model against the measured TTFT (absent in older reports; null: no predictions). */
  ttftPrediction?: PredictionError | null;
}

/**
 * |predicted - measured| / measured TTFT over the successful requests whose decision predicted one
 * (the cost model's `ttftMs`), as fractions; `bias`: the median of (predicted - measured) / measured
 * (below 0: the model predicts too little).
 */
export interface PredictionError {
  requests: number;
  p50: number;
  p90: number;
  bias: number;
}

export function predictionError(samples: readonly Sample[]): PredictionError | null {
  const abs: number[] = [];
  const signed: number[] = [];
  for (const s of samples) {
    if (s.error !== null || s.ttftMs === null || !(s.ttftMs > 0)) continue;
    if (s.predictedTtftMs === undefined || s.predictedTtftMs === null || !Number.isFinite(s.predictedTtftMs)) continue;
    const e = (s.predictedTtftMs - s.ttftMs) / s.ttftMs;
    signed.push(e);
    abs.push(Math.abs(e));
  }
  if (abs.length === 0) return null;
  const a = dist(abs);
  return { requests: abs.length, p50: a.p50, p90: a.p90, bias: dist(signed).p50 };
}

/** Sends in the first 5 s are the warm-up left out of `steadyTtftMs`. */
export const WARMUP_MS = 5000;

export function summarize(
  policy: string,
  summary: string,
  samples: readonly Sample[],
  engineIds: readonly string[],
  counters: readonly EngineCounters[],
  wallMs: number,
  cpu: CpuSeconds,
): PolicyResult {
  const ok = samples.filter((s) => s.error === null && s.ttftMs !== null);
  const errs = samples.filter((s) => s.error !== null || s.ttftMs === null);
  const ttft = ok.map((s) => s.ttftMs!);
  const wallS = wallMs / 1000;
  const engines: EngineLoad[] = engineIds.map((id, i) => {
    const mine = samples.filter((s) => s.instance === id);
    const c = counters[i];
    return {
      id,
      requests: mine.length,
      busyS: unionLength(mine.map((s) => [s.sentAt, s.sentAt + s.e2eMs] as const)) / 1000,
      prefilledTokens: c.queries - c.gpuHits - c.hostHits,
      counters: c,
    };
  });
  const sum = (f: (c: EngineCounters) => number) => counters.reduce((a, c) => a + f(c), 0);
  const queries = sum((c) => c.queries);
  const prompt = ok.reduce((a, s) => a + s.promptTokens, 0);
  return {
    policy,
    summary,
    requests: {
      sent: samples.length,
      ok: ok.length,
      errors: errs.length,
      firstErrors: [...new Set(errs.map((s) => s.error ?? 'no token'))].slice(0, 5),
    },
    ttftMs: dist(ttft),
    steadyTtftMs: ((v) => ({ ...dist(v), requests: v.length }))(
      ok.filter((s) => s.sentAt >= WARMUP_MS).map((s) => s.ttftMs!),
    ),
    e2eMs: dist(ok.map((s) => s.e2eMs)),
    tpotMs: dist(ok.filter((s) => s.completionTokens > 1).map((s) => (s.e2eMs - s.ttftMs!) / (s.completionTokens - 1))),
    maxLagMs: samples.reduce((a, s) => Math.max(a, s.lagMs), 0),
    throughput: {
      wallS,
      requestsPerS: ok.length / wallS,
      outputTokensPerS: ok.reduce((a, s) => a + s.completionTokens, 0) / wallS,
    },
    hitRate: {
      engines: queries ? (sum((c) => c.gpuHits) + sum((c) => c.hostHits)) / queries : 0,
      gpu: queries ? sum((c) => c.gpuHits) / queries : 0,
      host: queries ? sum((c) => c.hostHits) / queries : 0,
      usage: prompt ? ok.reduce((a, s) => a + s.cachedTokens, 0) / prompt : 0,
    },
    imbalance: { busyCov: cov(engines.map((e) => e.busyS)), requestCov: cov(engines.map((e) => e.requests)) },
    cpu: {
      ...cpu,
      routerPctOfCore: cpu.router === null ? null : (100 * cpu.router) / wallS,
      routerUsPerRequest: cpu.router === null ? null : (cpu.router * 1e6) / Math.max(1, samples.length),
    },
    preemptions: sum((c) => c.preemptions),
    split: samples.some((s) => s.bypassed)
      ? {
          routed: dist(ok.filter((s) => !s.bypassed).map((s) => s.ttftMs!)),
          bypassed: dist(ok.filter((s) => s.bypassed).map((s) => s.ttftMs!)),
          routedToBypassTarget: samples.filter((s) => !s.bypassed && s.instance === engineIds[0]).length,
        }
      : null,
    engines,
    ttftCdf: quantiles(ttft),
    ttftPrediction: predictionError(samples),
  };
}
