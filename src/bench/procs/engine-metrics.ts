// Scrape an engine's Prometheus /metrics (vLLM names) into the counters the benchmarks report.
import { request } from 'undici';
import { parseProm, parsePromSamples } from '../../engine-load/prom-text.js';

export interface EngineCounters {
  /** Prompt tokens looked up in the prefix cache (every admission, re-admissions after preemption too). */
  queries: number;
  /** Of those, served from the GPU cache. */
  gpuHits: number;
  /** Served from the host tier. */
  hostHits: number;
  promptTokens: number;
  generationTokens: number;
  preemptions: number;
  requests: number;
}

export async function scrapeEngine(url: string): Promise<EngineCounters> {
  const r = await request(`${url}/metrics`);
  const m = parseProm(await r.body.text());
  const g = (n: string) => m.get(n) ?? 0;
  return {
    queries: g('vllm:prefix_cache_queries_total'),
    gpuHits: g('vllm:prefix_cache_hits_total'),
    hostHits: g('vllm:external_prefix_cache_hits_total'),
    promptTokens: g('vllm:prompt_tokens_total'),
    generationTokens: g('vllm:generation_tokens_total'),
    preemptions: g('vllm:num_preemptions_total'),
    requests: g('vllm:request_success_total'),
  };
}

/** The router's closed-loop hit check over a run: judged responses by verdict, and open alarms. */
export interface HitCheck {
  agree: number;
  over: number;
  under: number;
  unverified: number;
  alarms: number;
}

export async function scrapeHitCheck(routerUrl: string): Promise<HitCheck> {
  const r = await request(`${routerUrl}/metrics`);
  const out: HitCheck = { agree: 0, over: 0, under: 0, unverified: 0, alarms: 0 };
  for (const s of parsePromSamples(await r.body.text())) {
    if (s.name === 'kvrouter_hit_predictions_total' && s.labels.verdict in out)
      out[s.labels.verdict as keyof HitCheck] += s.value;
    if (s.name === 'kvrouter_hit_prediction_alarm') out.alarms += s.value;
  }
  return out;
}
