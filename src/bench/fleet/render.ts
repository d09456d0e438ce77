// The fleet report: bench cluster's tables and charts over the same PolicyResult, the fleet's own
// tables (goodput, balance, routers, wall clock), and the deterministic summary beside the full JSON.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { type Table, writeReport } from '../report.js';
import { lineChart } from '../svg.js';
import { CHARTS, resultTables, writeCharts } from '../cluster/render.js';
import type { Sizing } from '../cluster/sizing.js';
import type { OracleStats } from '../workloads/oracle.js';
import type { FleetPolicyResult, FleetWall } from './summary.js';

/** Everything that is a function of the inputs: the same seed gives the same bytes. */
export interface FleetSummary {
  bench: 'fleet';
  workload: { name: string; description: string; requests: number };
  oracle: OracleStats;
  sizing: Sizing;
  config: {
    engines: number;
    routers: number;
    blockSize: number;
    numGpuBlocks: number;
    numCpuBlocks: number;
    perfModel: string;
    engineHash: string;
    /** engine-sim --hybrid and --hybrid-blocks (absent: full attention only). */
    hybrid?: { spec: string; blocks: number };
    speedup: number;
    rateScale: number;
    seed: number;
    quick: boolean;
    maxOutputTokens: number | null;
    model: string;
    kvEventDelayMs: number;
    requestLatencyMs: number;
    eventWire: string;
    syncDelayMs: number | null;
    /** Simultaneous arrivals spread over this many ms (trace time; 0: as recorded). */
    spreadBurstsMs: number;
    slo: { ttftMs: number; tpotMs: number };
  };
  arrivals: { scheduleS: number; followUps: number };
  policies: string[];
  results: FleetPolicyResult[];
}

export interface FleetReport extends FleetSummary {
  args: string[];
  machine: Record<string, string | number>;
  date: string;
  /** Real-clock figures: preparation (workload, oracle) and each policy's simulation. */
  wall: {
    prepareSeconds: number;
    policies: FleetWall[];
    totalSeconds: number;
    peakRssMiB: number;
    /** The V8 heap flags the run had (bench fleet relaunches itself with the ones it lacks: relaunch.ts). */
    v8Flags: string[];
  };
}

export const SUMMARY_FILE = 'summary.json';
const ENGINE_CHART = 'engine-requests.svg';

/** The summary's exact bytes (bigints as strings, as writeReport does). */
export function summaryJson(s: FleetSummary): string {
  return JSON.stringify(s, (_k, v) => (typeof v === 'bigint' ? v.toString() : v), 2) + '\n';
}

export function summaryOf(r: FleetReport): FleetSummary {
  const { args: _a, machine: _m, date: _d, wall: _w, ...s } = r;
  return s;
}

/** Which policies read scraped gauges, how often and how stale (null: none does). */
function scrapeLine(d: FleetReport): string | null {
  const on = d.results.filter((r) => r.fleet.scrape);
  if (on.length === 0) return null;
  const each = on
    .map((r) => `${r.policy} every ${r.fleet.scrape!.intervalMs} ms (stale after ${r.fleet.scrape!.staleMs} ms)`)
    .join(', ');
  return `running, waiting and KV usage gauges (vLLM names, the router's reader) snapshotted per engine in virtual time, delivered to every replica: ${each}`;
}

function setupTable(d: FleetReport): Table {
  const c = d.config;
  return {
    title: 'Setup',
    columns: ['item', 'value'],
    rows: [
      ['workload', d.workload.description],
      ['requests', d.workload.requests],
      ['oracle hit rate (infinite cache)', `${(100 * d.oracle.hitRate).toFixed(1)}%`],
      ['working set', `${d.oracle.distinctBlocks} blocks x ${c.blockSize} tokens`],
      [
        'engines',
        `${c.engines} simulated EngineCores in virtual time, ${c.numGpuBlocks} GPU + ${c.numCpuBlocks} host-tier blocks each, perf model ${c.perfModel}, engine block hash ${c.engineHash}, speedup ${c.speedup}${c.hybrid ? `, hybrid ${c.hybrid.spec} (second group ${c.hybrid.blocks} blocks)` : ''}`,
      ],
      [
        'routers',
        `${c.routers} replica(s), requests alternate (a plain L4 balancer); replica sync: ${c.syncDelayMs === null ? 'none' : `${c.syncDelayMs} ms delay`}`,
      ],
      [
        'request latency',
        `${c.requestLatencyMs} ms from the client's send to the engine (HTTP hops and router time; TTFT includes it)`,
      ],
      [
        'KV events',
        `engine-sim vLLM encoder -> router decoder + EventApplier (${c.eventWire === 'bytes' ? 'msgpack bytes' : 'encoder values, no msgpack'}), delivered ${c.kvEventDelayMs} ms after the pass starts`,
      ],
      [
        'arrivals',
        `open loop, timestamps / ${+c.rateScale.toFixed(2)}${c.spreadBurstsMs ? `, simultaneous ones spread over ${c.spreadBurstsMs} ms first` : ''} (${d.arrivals.scheduleS.toFixed(1)} s of arrivals)${d.arrivals.followUps ? `, ${d.arrivals.followUps} follow-up turns closed-loop per session` : ''}`,
      ],
      ['engine metrics', scrapeLine(d) ?? "not scraped (no policy here reads the engines' gauges)"],
      ['SLO (goodput)', `TTFT <= ${c.slo.ttftMs} ms and TPOT <= ${c.slo.tpotMs} ms`],
      ['machine', JSON.stringify(d.machine)],
      [
        'wall time',
        `${d.wall.totalSeconds.toFixed(1)} s (preparation ${d.wall.prepareSeconds.toFixed(1)} s), peak RSS ${d.wall.peakRssMiB.toFixed(0)} MiB, V8 flags ${d.wall.v8Flags.join(' ') || 'none'}`,
      ],
    ],
  };
}

const pct = (v: number) => +(100 * v).toFixed(1);
const r1 = (v: number) => (Number.isFinite(v) ? +v.toFixed(1) : 'n/a');

function fleetTables(d: FleetReport): Table[] {
  return [goodputTable(d.results), routersTable(d.results), wallTable(d)];
}

function goodputTable(res: FleetPolicyResult[]): Table {
  return {
    title: 'Fleet: goodput, refusals, balance over engines',
    columns: [
      'policy',
      'refused',
      'goodput req',
      'goodput %',
      'goodput req/s',
      'req/engine min',
      'p50',
      'max',
      'req CoV',
      'busy CoV (passes)',
      'prefilled CoV',
      'virtual s',
      'events',
    ],
    rows: res.map((r) => {
      const f = r.fleet;
      return [
        r.policy,
        f.refused,
        f.goodput.requests,
        pct(f.goodput.share),
        +f.goodput.perS.toFixed(2),
        f.balance.requests.min,
        f.balance.requests.p50,
        f.balance.requests.max,
        +f.balance.requests.cov.toFixed(3),
        +f.balance.busyCov.toFixed(3),
        +f.balance.prefilledCov.toFixed(3),
        +f.virtualS.toFixed(1),
        f.events,
      ];
    }),
  };
}

function routersTable(res: FleetPolicyResult[]): Table {
  return {
    title: 'Routers: KV events applied, hit check, sync, index size (per replica)',
    columns: [
      'policy',
      'router',
      'decisions',
      'refused',
      'events ok',
      'not ok',
      'hit check agree/over/under',
      'sync sent/received',
      'index blocks',
      '(block, holder) records',
      'bytes/record',
    ],
    rows: res.flatMap((r) =>
      r.fleet.routers.map((t) => {
        const notOk = Object.entries(t.applied)
          .filter(([k]) => k !== 'ok')
          .reduce((a, [, v]) => a + v, 0);
        return [
          r.policy,
          t.id,
          t.decisions,
          t.refused,
          t.applied.ok ?? 0,
          notOk,
          `${t.hitCheck.agree}/${t.hitCheck.over}/${t.hitCheck.under}`,
          `${t.sync.sent}/${t.sync.received}`,
          t.index.blocks,
          t.index.records,
          t.index.records ? +(t.index.bytes / t.index.records).toFixed(1) : 'n/a',
        ];
      }),
    ),
  };
}

function wallTable(d: FleetReport): Table {
  return {
    title: 'Wall clock (real time on this machine; not part of the deterministic summary)',
    columns: [
      'policy',
      'simulation s',
      'CPU s',
      'events/s',
      'decide µs p50',
      'p90',
      'p99',
      'ISL >= 16k p50',
      'ISL >= 28k p50 (n)',
      'candidates',
      'heap MiB',
    ],
    rows: d.wall.policies.map((w) => [
      w.policy,
      +w.simSeconds.toFixed(1),
      +w.cpuSeconds.toFixed(1),
      Math.round(w.eventsPerS),
      r1(w.decisionUs.all.p50),
      r1(w.decisionUs.all.p90),
      r1(w.decisionUs.all.p99),
      r1(w.decisionUs.isl16k.p50),
      `${r1(w.decisionUs.isl28k.p50)} (${w.decisionUs.isl28k.n})`,
      w.decisionUs.candidates,
      Math.round(w.heapMiB),
    ]),
  };
}

export const FLEET_NOTES = [
  '- Virtual time: engines, routers and the client share one event queue ordered by (time, seq); nothing waits on a socket or a timer, so a run is as fast as the CPU allows and the same seed gives the same summary (summary.json).',
  "- Engines: engine-sim's EngineCore, one per engine, stepped as its RankRunner steps it (KV events at pass start, tokens at pass end). Routers: the server's Scheduler, TieredIndexer, StreamIngest (decoder + EventApplier), FeedbackLoop and RemoteBookings, configured from the same YAML as bench cluster's routers.",
  "- TTFT, TPOT, E2E, hit rate and per-engine tables are computed by bench cluster's own summary over the simulated responses; times are virtual ms (no client, network or router CPU time).",
  '- Goodput: requests with TTFT within the SLO and, for 2+ output tokens, mean TPOT within the SLO; per second of the run and as a share of the requests sent.',
  "- Time model error: each routed request's predicted TTFT (the routing decision's `ttftMs`: the chosen instance's predicted wait plus prefill) against its simulated TTFT; median and p90 of |predicted - measured| / measured over the successful requests.",
  '- Decision time: the real clock (performance.now) around each Scheduler.decide inside the simulation (hashing the prompt, the index walk over every candidate, costs and policy); it never feeds back into virtual time.',
  "- Index size: TieredIndexer.stats() of each replica at the end of the run (typed arrays' bytes over (block, holder) records).",
];

/** Markdown + JSON (report.ts), the deterministic summary, and the charts; returns the directory. */
export function writeFleetReport(d: FleetReport, outDir?: string): string {
  const dir = writeReport(
    'fleet',
    d,
    [
      setupTable(d),
      ...resultTables(d.results, d.oracle).filter(
        (t) => !t.title.startsWith('Per engine') && !t.title.startsWith('CPU seconds'),
      ),
      ...fleetTables(d),
    ],
    outDir,
  );
  writeFileSync(join(dir, SUMMARY_FILE), summaryJson(summaryOf(d)));
  writeCharts(dir, d.results, d.oracle, d.workload.name, { perEngine: false });
  // bench cluster's per-engine bars are unreadable at hundreds of engines: requests per engine, sorted.
  writeFileSync(
    join(dir, ENGINE_CHART),
    lineChart({
      title: `Requests per engine, sorted — ${d.workload.name}, ${d.config.engines} engines`,
      xLabel: 'engine rank (fewest requests first)',
      yLabel: 'requests',
      series: d.results.map((r) => ({
        name: r.policy,
        points: r.engines
          .map((e) => e.requests)
          .sort((a, b) => a - b)
          .map((v, i) => [i, v] as const),
      })),
    }),
  );
  const md = join(dir, 'fleet.md');
  writeFileSync(
    md,
    [
      '',
      '## Charts',
      '',
      `![TTFT CDF](${CHARTS.cdf})`,
      '',
      `![hit rate](${CHARTS.hits})`,
      '',
      `![requests per engine](${ENGINE_CHART})`,
      '',
      '## How measured',
      '',
      ...FLEET_NOTES,
      '',
    ].join('\n'),
    { flag: 'a' },
  );
  return dir;
}
