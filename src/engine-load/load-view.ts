// What the engines say about their own load (Prometheus gauges), per instance and DP rank, so that
// load the router did not book (traffic that bypasses it, another router, a slow engine) is seen.
// Pure: the scrape adapter (src/router/engine-scrape.ts) feeds it; readers pass `now`.
import type { PromSample } from './prom-text.js';

export interface EngineLoad {
  running: number;
  waiting: number;
  /** KV cache usage 0..1, or null when the engine does not export it. */
  kvUsage: number | null;
  /** When it was scraped (ms). */
  at: number;
}

/** vLLM names first, then older vLLM and SGLang equivalents. */
export const LOAD_METRICS = {
  running: ['vllm:num_requests_running', 'sglang:num_running_reqs'],
  waiting: ['vllm:num_requests_waiting', 'sglang:num_queue_reqs'],
  kvUsage: ['vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc', 'sglang:token_usage'],
} as const;

/** A sample's DP rank: vLLM labels ranks `engine`, SGLang `dp_rank`; unlabelled is rank 0. */
function rankOf(s: PromSample): number {
  const r = Number(s.labels.engine ?? s.labels.dp_rank ?? 0);
  return Number.isInteger(r) && r >= 0 ? r : 0;
}

/** Per-rank loads of one scrape (null when it holds none of the gauges: not an engine we can read). */
export function loadsFromSamples(samples: readonly PromSample[], at: number): Map<number, EngineLoad> | null {
  const out = new Map<number, EngineLoad>();
  let found = false;
  const pick = (names: readonly string[], apply: (l: EngineLoad, v: number) => void) => {
    // The first name the engine exports wins (a vLLM that exports both usage names counts once).
    const name = names.find((n) => samples.some((s) => s.name === n));
    if (!name) return;
    found = true;
    for (const s of samples) {
      if (s.name !== name) continue;
      const r = rankOf(s);
      let l = out.get(r);
      if (!l) out.set(r, (l = { running: 0, waiting: 0, kvUsage: null, at }));
      apply(l, s.value);
    }
  };
  pick(LOAD_METRICS.running, (l, v) => (l.running += v));
  pick(LOAD_METRICS.waiting, (l, v) => (l.waiting += v));
  pick(LOAD_METRICS.kvUsage, (l, v) => (l.kvUsage = Math.max(l.kvUsage ?? 0, v)));
  return found ? out : null;
}

export class EngineLoadView {
  private readonly loads = new Map<string, Map<number, EngineLoad>>();

  set(instance: string, loads: Map<number, EngineLoad>): void {
    this.loads.set(instance, loads);
  }

  /** The rank's load if scraped within `staleMs`, else null (a stale scrape says nothing). */
  get(instance: string, dpRank: number, now: number, staleMs: number): EngineLoad | null {
    const l = this.loads.get(instance)?.get(dpRank);
    return l && now - l.at <= staleMs ? l : null;
  }

  drop(instance: string): void {
    this.loads.delete(instance);
  }

  instances(): string[] {
    return [...this.loads.keys()];
  }
}
