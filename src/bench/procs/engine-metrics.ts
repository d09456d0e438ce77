// Scrape an engine's Prometheus /metrics (vLLM names) into the counters the benchmarks report.
import { request } from 'undici';

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

/** Sum every sample of each metric name (over model and rank labels). */
export function parseProm(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (!line || line[0] === '#') continue;
    const sp = line.lastIndexOf(' ');
    const brace = line.indexOf('{');
    const name = brace >= 0 && brace < sp ? line.slice(0, brace) : line.slice(0, sp);
    const v = Number(line.slice(sp + 1));
    if (Number.isFinite(v)) out.set(name, (out.get(name) ?? 0) + v);
  }
  return out;
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
