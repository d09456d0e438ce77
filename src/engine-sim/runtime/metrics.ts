// Prometheus metrics under vLLM's names, one registry per engine (several engines can share a
// process). Labels follow vLLM v1: model_name and engine (the DP rank here).
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { CoreStats } from '../core/engine-core.js';
import type { Admission } from '../core/scheduler.js';
import { LOAD_GAUGES } from './load-gauges.js';

const TTFT_BUCKETS = [
  0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560,
];
const ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80];
const E2E_BUCKETS = [0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680];

type Labels = 'model_name' | 'engine';

export interface CacheConfigInfo {
  blockSize: number;
  numGpuBlocks: number;
  numCpuBlocks: number;
  enablePrefixCaching: boolean;
}

export class EngineMetrics {
  readonly registry = new Registry();
  private readonly ttft: Histogram<Labels>;
  private readonly itl: Histogram<Labels>;
  private readonly e2e: Histogram<Labels>;
  private readonly queries: Counter<Labels>;
  private readonly hits: Counter<Labels>;
  private readonly extQueries: Counter<Labels>;
  private readonly extHits: Counter<Labels>;
  private readonly promptTokens: Counter<Labels>;
  private readonly genTokens: Counter<Labels>;
  private readonly preemptions: Counter<Labels>;
  private readonly success: Counter<Labels | 'finished_reason'>;
  private readonly published: Counter<Labels>;
  private readonly dropped: Counter<Labels>;
  private readonly hostTier: boolean;

  constructor(
    private readonly model: string,
    ranks: ReadonlyArray<() => CoreStats>,
    cache: CacheConfigInfo,
  ) {
    this.hostTier = cache.numCpuBlocks > 0;
    const registers = [this.registry];
    const labelNames: Labels[] = ['model_name', 'engine'];
    const gauge = (name: string, help: string, pick: (s: CoreStats) => number): void => {
      const model = this.model;
      new Gauge<Labels>({
        name,
        help,
        labelNames,
        registers,
        collect() {
          ranks.forEach((stats, rank) => {
            this.set({ model_name: model, engine: String(rank) }, pick(stats()));
          });
        },
      });
    };
    for (const g of LOAD_GAUGES) gauge(g.name, g.help, g.pick);
    const info = new Gauge({
      name: 'vllm:cache_config_info',
      help: 'Information of the LLMEngine CacheConfig',
      labelNames: ['block_size', 'num_gpu_blocks', 'num_cpu_blocks', 'enable_prefix_caching'],
      registers,
    });
    info.set(
      {
        block_size: String(cache.blockSize),
        num_gpu_blocks: String(cache.numGpuBlocks),
        num_cpu_blocks: String(cache.numCpuBlocks),
        enable_prefix_caching: cache.enablePrefixCaching ? 'True' : 'False',
      },
      1,
    );
    const counter = (name: string, help: string): Counter<Labels> =>
      new Counter<Labels>({ name, help, labelNames, registers });
    this.queries = counter(
      'vllm:prefix_cache_queries_total',
      'Prefix cache queries, in terms of number of queried tokens.',
    );
    this.hits = counter('vllm:prefix_cache_hits_total', 'Prefix cache hits, in terms of number of cached tokens.');
    this.extQueries = counter(
      'vllm:external_prefix_cache_queries_total',
      'External prefix cache queries (host tier), in tokens.',
    );
    this.extHits = counter(
      'vllm:external_prefix_cache_hits_total',
      'External prefix cache hits (host tier), in tokens.',
    );
    this.promptTokens = counter('vllm:prompt_tokens_total', 'Number of prefill tokens processed.');
    this.genTokens = counter('vllm:generation_tokens_total', 'Number of generation tokens processed.');
    this.preemptions = counter('vllm:num_preemptions_total', 'Cumulative number of preemption from the engine.');
    this.success = new Counter({
      name: 'vllm:request_success_total',
      help: 'Count of successfully processed requests.',
      labelNames: ['model_name', 'engine', 'finished_reason'],
      registers,
    });
    this.published = counter('engine_sim_kv_event_batches_published_total', 'KV event batches sent on the PUB socket.');
    this.dropped = counter(
      'engine_sim_kv_event_batches_dropped_total',
      'KV event batches skipped by --drop-rate (still replayable).',
    );
    const hist = (name: string, help: string, buckets: number[]): Histogram<Labels> =>
      new Histogram<Labels>({ name, help, labelNames, buckets, registers });
    this.ttft = hist('vllm:time_to_first_token_seconds', 'Histogram of time to first token in seconds.', TTFT_BUCKETS);
    this.itl = hist('vllm:inter_token_latency_seconds', 'Histogram of inter-token latency in seconds.', ITL_BUCKETS);
    this.e2e = hist('vllm:e2e_request_latency_seconds', 'Histogram of e2e request latency in seconds.', E2E_BUCKETS);
  }

  private labels(rank: number): Record<Labels, string> {
    return { model_name: this.model, engine: String(rank) };
  }

  onAdmission(rank: number, a: Admission): void {
    const l = this.labels(rank);
    this.queries.inc(l, a.queried);
    this.hits.inc(l, a.gpuHitTokens);
    if (a.first) this.promptTokens.inc(l, a.req.promptLen);
    if (this.hostTier) {
      this.extQueries.inc(l, a.queried - a.gpuHitTokens);
      this.extHits.inc(l, a.hostHitTokens);
    }
  }

  onToken(rank: number, first: boolean, sinceArrivalS: number, sincePrevS: number): void {
    const l = this.labels(rank);
    this.genTokens.inc(l);
    if (first) this.ttft.observe(l, sinceArrivalS);
    else this.itl.observe(l, sincePrevS);
  }

  onFinish(rank: number, reason: string, e2eS: number): void {
    this.success.inc({ ...this.labels(rank), finished_reason: reason });
    this.e2e.observe(this.labels(rank), e2eS);
  }

  onPreempt(rank: number, n: number): void {
    this.preemptions.inc(this.labels(rank), n);
  }

  onBatch(rank: number, dropped: boolean): void {
    (dropped ? this.dropped : this.published).inc(this.labels(rank));
  }

  text(): Promise<string> {
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }
}
