// The cluster report: tables (Markdown via report.ts), SVG charts, and the notes that say how each
// figure was measured.
import { appendFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { type Table, writeReport } from '../report.js';
import { barChart, lineChart } from '../svg.js';
import type { OracleStats } from '../workloads/oracle.js';
import type { Sizing } from './sizing.js';
import { type PolicyResult, WARMUP_MS } from './summary.js';

/** Everything a cluster run records (the JSON report); the Markdown and charts derive from it. */
export interface ClusterReport {
  bench: 'cluster';
  args: string[];
  machine: Record<string, string | number>;
  date: string;
  workload: { name: string; description: string; requests: number };
  oracle: OracleStats;
  sizing: Sizing;
  config: {
    engines: number;
    blockSize: number;
    speedup: number;
    perfModel?: string;
    rateScale: number;
    cacheRatio: number;
    cpuRatio: number;
    seed: number;
    quick: boolean;
    maxOutputTokens: number | null;
    model: string;
    routers?: number;
    routerProcesses?: number;
    bypass?: number;
    pd?: string;
  };
  arrivals: { scheduleS: number; followUps: number };
  loadAverage: { before: number[]; after: number[] };
  runSeconds: number;
  policies: string[];
  results: PolicyResult[];
}

export function setupTable(d: ClusterReport): Table {
  const c = d.config;
  const z = d.sizing;
  const la = (xs: number[]) => xs.map((x) => x.toFixed(1)).join(' ');
  return {
    title: 'Setup',
    columns: ['item', 'value'],
    rows: [
      ['workload', d.workload.description],
      ['requests', d.workload.requests],
      ['oracle hit rate (infinite cache)', `${(100 * d.oracle.hitRate).toFixed(1)}%`],
      [
        'working set',
        `${d.oracle.distinctBlocks} blocks x ${c.blockSize} tokens = ${((d.oracle.distinctBlocks * c.blockSize) / 1e6).toFixed(2)} M tokens`,
      ],
      [
        'engines',
        `${c.engines} simulated (one process), ${z.numGpuBlocks} GPU + ${z.numCpuBlocks} host-tier blocks each, pass times ${c.perfModel ?? 'mocker'} (${c.model}), speedup ${c.speedup}, max_model_len ${z.maxModelLen}`,
      ],
      [
        'cache sizing',
        `working set = ${z.perEngineRatio.toFixed(2)}x one engine's GPU cache; cluster GPU cache = ${z.clusterRatio.toFixed(2)}x working set`,
      ],
      ...(c.bypass
        ? [
            [
              'bypass',
              `${(100 * c.bypass).toFixed(0)}% of the requests go straight to engine e0, not through the router (load it did not book)`,
            ],
          ]
        : []),
      ...(d.results.some((r) => r.policy.startsWith('pd')) && c.pd
        ? [
            [
              'disaggregated (pd variants)',
              `${c.pd}: engines e0.. prefill, then decode, each sized as one aggregated engine; vLLM connector protocol, KV transfer 25 GB/s`,
            ],
          ]
        : []),
      ...(c.routers && c.routers > 1
        ? [
            [
              'routers',
              `${c.routers} independent routers, no sync between them; requests alternate (a plain L4 balancer)`,
            ],
          ]
        : []),
      ...(c.routerProcesses && c.routerProcesses > 1
        ? [['router processes', `${c.routerProcesses} per router (kvrouter serve --workers ${c.routerProcesses})`]]
        : []),
      [
        'arrivals',
        `open loop, timestamps / ${+c.rateScale.toFixed(2)} (${d.arrivals.scheduleS.toFixed(0)} s of arrivals)${d.arrivals.followUps ? `, ${d.arrivals.followUps} follow-up turns closed-loop per session` : ''}`,
      ],
      ['machine', JSON.stringify(d.machine)],
      [
        'load average (1, 5, 15 min) before / after',
        `${la(d.loadAverage.before)} / ${la(d.loadAverage.after)} (2 cores shared with other work)`,
      ],
      ['run time', `${d.runSeconds.toFixed(0)} s`],
    ],
  };
}

/** Markdown + JSON (report.ts) and the SVG charts; returns the directory. */
export function writeClusterReport(d: ClusterReport, outDir?: string): string {
  const dir = writeReport('cluster', d, [setupTable(d), ...resultTables(d.results, d.oracle)], outDir);
  writeCharts(dir, d.results, d.oracle, d.workload.name);
  appendFileSync(
    join(dir, 'cluster.md'),
    [
      '',
      '## Charts',
      '',
      `![TTFT CDF](${CHARTS.cdf})`,
      '',
      `![hit rate](${CHARTS.hits})`,
      '',
      `![per-engine load](${CHARTS.load})`,
      '',
      '## How measured',
      '',
      ...METHOD_NOTES,
      '',
    ].join('\n'),
  );
  return dir;
}

const ms = (v: number) => (Number.isFinite(v) ? Math.round(v) : NaN);
const pct = (v: number) => +(100 * v).toFixed(1);

export function resultTables(results: PolicyResult[], o: OracleStats): Table[] {
  return [
    mainTable(results, o),
    steadyTable(results),
    relativeTable(results),
    bypassTable(results),
    hitCheckTable(results),
    predictionTable(results),
    engineTable(results),
    cpuTable(results),
  ].filter((t): t is Table => t !== null);
}

function mainTable(results: PolicyResult[], o: OracleStats): Table {
  return {
    title: 'Per policy',
    columns: [
      'policy',
      'ok/sent',
      'TTFT p50 ms',
      'p90',
      'p99',
      'TPOT p50 ms',
      'p90',
      'E2E p50 ms',
      'p99',
      'req/s',
      'out tok/s',
      'hit % (first admission)',
      'oracle %',
      'engine hit % (GPU+host)',
      'of which host',
      'preempt',
      'busy CoV',
      'req CoV',
      'router CPU s',
      'µs/req',
    ],
    rows: results.map((r) => [
      r.policy,
      `${r.requests.ok}/${r.requests.sent}`,
      ms(r.ttftMs.p50),
      ms(r.ttftMs.p90),
      ms(r.ttftMs.p99),
      r.tpotMs ? +r.tpotMs.p50.toFixed(1) : 'n/a',
      r.tpotMs ? +r.tpotMs.p90.toFixed(1) : 'n/a',
      ms(r.e2eMs.p50),
      ms(r.e2eMs.p99),
      +r.throughput.requestsPerS.toFixed(2),
      Math.round(r.throughput.outputTokensPerS),
      pct(r.hitRate.usage),
      pct(o.hitRate),
      pct(r.hitRate.engines),
      pct(r.hitRate.host),
      r.preemptions,
      +r.imbalance.busyCov.toFixed(3),
      +r.imbalance.requestCov.toFixed(3),
      r.cpu.router === null ? 'n/a' : +r.cpu.router.toFixed(2),
      r.cpu.routerUsPerRequest === null ? 'n/a' : Math.round(r.cpu.routerUsPerRequest),
    ]),
  };
}

function steadyTable(results: PolicyResult[]): Table | null {
  if (!results.some((r) => r.steadyTtftMs && r.steadyTtftMs.requests > 0)) return null;
  return {
    title: `TTFT without the warm-up: requests sent after the first ${WARMUP_MS / 1000} s (ms)`,
    columns: ['policy', 'requests', 'TTFT p50', 'p90', 'p99'],
    rows: results.map((r) =>
      r.steadyTtftMs
        ? [r.policy, r.steadyTtftMs.requests, ms(r.steadyTtftMs.p50), ms(r.steadyTtftMs.p90), ms(r.steadyTtftMs.p99)]
        : [r.policy, 'n/a', 'n/a', 'n/a', 'n/a'],
    ),
  };
}

function relativeTable(results: PolicyResult[]): Table | null {
  const base = results.find((r) => r.policy === 'round-robin') ?? results.find((r) => r.policy === 'random');
  if (!base) return null;
  const x = (a: number, b: number) => (b > 0 && Number.isFinite(a) ? `${(a / b).toFixed(2)}x` : 'n/a');
  return {
    title: `Relative to ${base.policy} (TTFT: ${base.policy} / policy, so > 1 is faster)`,
    columns: ['policy', 'TTFT p50', 'TTFT p90', 'TTFT p99', 'E2E p50', 'out tok/s', 'hit rate (first admission)'],
    rows: results.map((r) => [
      r.policy,
      x(base.ttftMs.p50, r.ttftMs.p50),
      x(base.ttftMs.p90, r.ttftMs.p90),
      x(base.ttftMs.p99, r.ttftMs.p99),
      x(base.e2eMs.p50, r.e2eMs.p50),
      x(r.throughput.outputTokensPerS, base.throughput.outputTokensPerS),
      x(r.hitRate.usage, base.hitRate.usage),
    ]),
  };
}

function bypassTable(results: PolicyResult[]): Table | null {
  if (!results.some((r) => r.split)) return null;
  return {
    title: 'With --bypass: requests through the router vs straight to e0 (TTFT ms)',
    columns: ['policy', 'routed p50', 'p90', 'p99', 'routed to e0', 'bypassed p50', 'p90', 'p99'],
    rows: results.map((r) => {
      const x = r.split;
      if (!x) return [r.policy, 'n/a', 'n/a', 'n/a', 'n/a', 'n/a', 'n/a', 'n/a'];
      return [
        r.policy,
        ms(x.routed.p50),
        ms(x.routed.p90),
        ms(x.routed.p99),
        x.routedToBypassTarget,
        ms(x.bypassed.p50),
        ms(x.bypassed.p90),
        ms(x.bypassed.p99),
      ];
    }),
  };
}

function hitCheckTable(results: PolicyResult[]): Table | null {
  if (!results.some((r) => r.hitCheck)) return null;
  return {
    title:
      "The routers' closed-loop hit check: predicted against engine-reported cached tokens (responses where either side expected a hit)",
    columns: ['policy', 'agree', 'over-predicted', 'under-predicted', 'agree %', 'alarms at the end'],
    rows: results.map((r) => {
      const h = r.hitCheck;
      if (!h) return [r.policy, 'n/a', 'n/a', 'n/a', 'n/a', 'n/a'];
      const judged = h.agree + h.over + h.under;
      return [r.policy, h.agree, h.over, h.under, judged ? +((100 * h.agree) / judged).toFixed(1) : 'n/a', h.alarms];
    }),
  };
}

/** The time model's error: what the decision predicted against the TTFT measured. */
function predictionTable(results: PolicyResult[]): Table | null {
  if (!results.some((r) => r.ttftPrediction)) return null;
  return {
    title:
      "The router's time model: |predicted - measured| / measured TTFT (the chosen instance's predicted TTFT at the decision; bias: median signed error, < 0 predicts too little)",
    columns: ['policy', 'requests', 'error p50 %', 'p90 %', 'bias %'],
    rows: results.map((r) => {
      const e = r.ttftPrediction;
      if (!e) return [r.policy, 'n/a', 'n/a', 'n/a', 'n/a'];
      return [r.policy, e.requests, pct(e.p50), pct(e.p90), pct(e.bias)];
    }),
  };
}

function engineTable(results: PolicyResult[]): Table {
  const ids = results[0]?.engines.map((e) => e.id) ?? [];
  return {
    title: 'Per engine: requests / busy seconds / prefilled k-tokens',
    columns: ['policy', ...ids],
    rows: results.map((r) => [
      r.policy,
      ...r.engines.map((e) => `${e.requests} / ${e.busyS.toFixed(1)} / ${(e.prefilledTokens / 1000).toFixed(0)}`),
    ]),
  };
}

function cpuTable(results: PolicyResult[]): Table {
  return {
    title: 'CPU seconds during the replay (2 cores shared by all three processes)',
    columns: ['policy', 'router', 'router % of a core', 'engines process', 'load generator'],
    rows: results.map((r) => [
      r.policy,
      r.cpu.router === null ? 'n/a' : +r.cpu.router.toFixed(2),
      r.cpu.routerPctOfCore === null ? 'n/a' : +r.cpu.routerPctOfCore.toFixed(1),
      r.cpu.engines === null ? 'n/a' : +r.cpu.engines.toFixed(2),
      +r.cpu.client.toFixed(2),
    ]),
  };
}

export const CHARTS = { cdf: 'ttft-cdf.svg', hits: 'hit-rate.svg', load: 'engine-load.svg' } as const;

/** `perEngine: false` leaves out the per-engine bars (one series per engine: unreadable for large fleets). */
export function writeCharts(
  dir: string,
  results: PolicyResult[],
  o: OracleStats,
  title: string,
  opts: { perEngine?: boolean } = {},
): void {
  const cdf = lineChart({
    title: `TTFT CDF per policy — ${title}`,
    xLabel: 'time to first token (ms, log scale)',
    yLabel: 'fraction of requests',
    xLog: true,
    yMax: 1,
    series: results.map((r) => ({
      name: r.policy,
      points: r.ttftCdf.map((v, i) => [v, i / (r.ttftCdf.length - 1)] as const),
    })),
  });
  writeFileSync(join(dir, CHARTS.cdf), cdf);
  const hits = barChart({
    title: `Prefix-cache hit rate — ${title}`,
    yLabel: 'hit rate (% of prompt tokens)',
    xLabel: "bars: engines' metrics (GPU + host tier); ◆: first admissions (usage.cached_tokens)",
    categories: results.map((r) => r.policy),
    series: [
      { name: 'GPU', values: results.map((r) => 100 * r.hitRate.gpu) },
      { name: 'host tier', values: results.map((r) => 100 * r.hitRate.host) },
    ],
    stacked: true,
    markers: results.map((r) => 100 * r.hitRate.usage),
    refs: [{ value: 100 * o.hitRate, label: 'oracle' }],
    yMax: Math.max(100 * o.hitRate * 1.15, ...results.map((r) => 110 * r.hitRate.engines), 5),
  });
  writeFileSync(join(dir, CHARTS.hits), hits);
  if (opts.perEngine === false) return;
  const ids = results[0]?.engines.map((e) => e.id) ?? [];
  const load = barChart({
    title: `Requests per engine — ${title}`,
    yLabel: 'requests',
    categories: results.map((r) => r.policy),
    series: ids.map((id, i) => ({ name: id, values: results.map((r) => r.engines[i]?.requests ?? NaN) })),
  });
  writeFileSync(join(dir, CHARTS.load), load);
}

export const METHOD_NOTES = [
  '- TTFT: client-measured on streaming responses, from the request send to the first SSE event carrying generated text; E2E to the end of the stream.',
  '- Throughput: successful requests and output tokens (usage.completion_tokens) over the wall time from the first send to the last completion.',
  '- Hit rate (first admission): sum of usage.prompt_tokens_details.cached_tokens / sum of prompt_tokens over the responses: what each request found cached when first admitted; this is what the oracle bounds.',
  '- Engine hit rate: (vllm:prefix_cache_hits_total + vllm:external_prefix_cache_hits_total) / vllm:prefix_cache_queries_total summed over the engines (tokens), as an operator would read it. A preempted request is admitted again and queries again, mostly hitting its own blocks, so with preemptions this rate exceeds the first-admission rate (and can exceed the oracle).',
  "- Oracle: the workload's infinite-cache hit rate at the engines' block size (every prompt hits the longest block prefix of any earlier prompt; the last token is always recomputed).",
  "- Load imbalance: coefficient of variation (stdev / mean) across engines of the busy time (wall time with at least one of the engine's requests in flight, client-observed) and of request counts.",
  "- Time model error: each routed request's predicted TTFT (the x-kvrouter-predicted-ttft-ms header: the chosen instance's predicted wait plus prefill at the decision) against its client-measured TTFT; median and p90 of |predicted - measured| / measured over the successful requests that carried one.",
  '- Router CPU: user + system CPU of the router process (a child process; all its threads, incl. the tokenizer worker and libzmq) from /proc/<pid>/stat over the replay; µs/req divides by requests sent.',
  '- Each policy runs on a fresh engine process and a fresh router process (cold caches), replaying identical, seeded requests open-loop by timestamp.',
];
