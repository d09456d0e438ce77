// Shared driver of `bench overhead` and `bench router`: start the stub upstreams, the load
// generator and each target in turn, measure, and report added latency and max RPS as ratios.
import { writeFileSync } from 'node:fs';
import { availableParallelism, loadavg } from 'node:os';
import { join } from 'node:path';
import { intOption, type OptionTable, parseCommand } from '../../common/args.js';
import { machine, type Table, writeReport } from '../report.js';
import { lineChart } from '../svg.js';
import { type BodyKind, requestBodies } from './bodies.js';
import { LoadGenerator, type LoadSpec } from './loadgen.js';
import { busyCores, type MeasureOptions, measureTargets, type Target, type TargetResult } from './measure.js';
import { findNginx, startNginx, startNginxStubs } from './nginx.js';
import { findWrk, WrkLoad } from './wrk.js';
import type { RouterProc } from '../procs/router.js';
import { cpuByProcessOf, cpuOf, startNodeProxy, startRouterOver, startStubs, type Upstreams } from './targets.js';

export const TARGETS = ['direct', 'nginx', 'node', 'kv', 'round-robin'] as const;
export type TargetName = (typeof TARGETS)[number];

const MODEL = 'Qwen/Qwen3-0.6B';
const UPSTREAMS = 2;

export function overheadOptions(defaultTargets: readonly TargetName[]): OptionTable {
  return {
    targets: {
      type: 'string',
      default: defaultTargets.join(','),
      arg: 'A,B',
      help: `what to measure: ${TARGETS.join(', ')}`,
    },
    kind: {
      type: 'string',
      default: 'chat',
      arg: 'K',
      help: 'request bodies: chat (messages through the chat template) | tokens (1024 token ids)',
    },
    requests: {
      type: 'string',
      arg: 'N',
      help: 'requests per target of the one-at-a-time latency phase (default 4000; quick 500)',
    },
    'step-seconds': {
      type: 'string',
      arg: 'S',
      help: 'length of each concurrency step of the throughput ramp (default 4; quick 1.5)',
    },
    'max-concurrency': {
      type: 'string',
      default: '256',
      arg: 'N',
      help: 'highest concurrency of the ramp (it also stops once throughput stops growing)',
    },
    'min-concurrency': {
      type: 'string',
      default: '16',
      arg: 'N',
      help: 'the ramp runs every target at least up to this concurrency (a dip below it does not stop it)',
    },
    seed: { type: 'string', default: '0', arg: 'N', help: 'seed of the request bodies' },
    workers: {
      type: 'string',
      default: '1',
      arg: 'N,M',
      help: 'worker processes of nginx and kvrouter (serve --workers), one set of targets per count, e.g. 1,2',
    },
    chunks: {
      type: 'string',
      default: '1',
      arg: 'N',
      help: 'streaming mode: SSE chunks per response (the stub sends one per output token); the report adds CPU per chunk',
    },
    upstream: {
      type: 'string',
      default: 'node',
      arg: 'U',
      help: 'stub upstreams: node (one Node process) | nginx (nginx returning the same one-token answer, a fraction of the CPU; --chunks 1 only)',
    },
    loadgen: {
      type: 'string',
      default: 'node',
      arg: 'L',
      help: "the throughput ramp's closed loop: node (a forked Node process) | wrk (Debian's wrk, about a third of the CPU per request); latency is always measured by node",
    },
    out: { type: 'string', arg: 'DIR', help: 'report directory (default bench/results/<name>-<time>)' },
    json: { type: 'string', arg: 'FILE', help: 'also write the JSON report here' },
    quick: { type: 'boolean', help: 'short run (about a minute)' },
  };
}

type Values = Extract<ReturnType<typeof parseCommand>, { values: unknown }>['values'];

/** What a run measures and how, from its options (errors name the option at fault). */
interface RunPlan {
  names: TargetName[];
  kind: BodyKind;
  mo: MeasureOptions;
  chunks: number;
  upstream: string;
  loadgen: string;
  stubNginx: string | null;
  wrkBin: string | null;
}

function planOf(v: Values): RunPlan {
  const quick = v.quick === true;
  const names = String(v.targets)
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean) as TargetName[];
  for (const t of names) if (!TARGETS.includes(t)) throw new Error(`unknown target '${t}' (${TARGETS.join(', ')})`);
  const kind = String(v.kind) as BodyKind;
  if (kind !== 'chat' && kind !== 'tokens') throw new Error('--kind must be chat or tokens');
  const mo: MeasureOptions = {
    latencyRequests: v.requests !== undefined ? intOption(v, 'requests') : quick ? 500 : 4000,
    latencyRounds: quick ? 2 : 8,
    warmupRequests: quick ? 300 : 1000,
    stepMs: (v['step-seconds'] !== undefined ? Number(v['step-seconds']) : quick ? 1.5 : 4) * 1000,
    stepWarmupMs: quick ? 300 : 700,
    maxConcurrency: intOption(v, 'max-concurrency'),
    minConcurrency: intOption(v, 'min-concurrency'),
  };
  const chunks = intOption(v, 'chunks');
  if (chunks < 1 || chunks > 10_000) throw new Error('--chunks must be 1..10000');
  const upstream = String(v.upstream);
  const loadgen = String(v.loadgen);
  if (upstream !== 'node' && upstream !== 'nginx') throw new Error('--upstream must be node or nginx');
  if (loadgen !== 'node' && loadgen !== 'wrk') throw new Error('--loadgen must be node or wrk');
  if (upstream === 'nginx' && chunks > 1)
    throw new Error('--upstream nginx answers with one token: use --upstream node with --chunks');
  const stubNginx = upstream === 'nginx' ? findNginx() : null;
  if (upstream === 'nginx' && !stubNginx) throw new Error('--upstream nginx needs nginx (apt-get install -y nginx)');
  const wrkBin = loadgen === 'wrk' ? findWrk() : null;
  if (loadgen === 'wrk' && !wrkBin) throw new Error('--loadgen wrk needs wrk (apt-get install -y wrk)');
  return { names, kind, mo, chunks, upstream, loadgen, stubNginx, wrkBin };
}

/** Where a run's started processes and targets are collected (stops run in reverse, whatever happens). */
interface Started {
  stops: Array<() => Promise<void>>;
  targets: Target[];
  skipped: Array<{ target: string; reason: string }>;
}

/** Start the targets of one worker count over the stubs. */
async function startTargets(
  names: readonly TargetName[],
  w: number,
  stubs: Pick<Upstreams, 'urls' | 'child'>,
  spec: (urls: string[], headers?: Record<string, string>) => LoadSpec,
  into: Started,
  log: (l: string) => void,
): Promise<void> {
  const { stops, targets, skipped } = into;
  // Names carry the count when it is not 1 (nginx-w2, kv-w2): ratios pair targets of one count.
  const named = (t: string) => (w === 1 ? t : `${t}-w${w}`);
  let router: RouterProc | null = null;
  for (const t of names) {
    if (t === 'direct') {
      if (w > 1) continue; // one direct target whatever the counts
      targets.push({
        name: t,
        description: `client-side rotation over the ${UPSTREAMS} stub upstreams (CPU column: the upstreams)`,
        spec: spec(stubs.urls),
        cpu: cpuOf(stubs.child.pid),
      });
    } else if (t === 'node') {
      if (w > 1) continue; // one process by design
      const n = await startNodeProxy(stubs.urls);
      stops.push(() => n.stop());
      targets.push({
        name: t,
        description: 'the floor of a Node proxy: node:http in, undici out, round-robin, nothing else (one process)',
        spec: spec([n.url]),
        cpu: cpuOf(n.child.pid),
      });
    } else if (t === 'nginx') {
      const bin = findNginx();
      if (!bin) {
        skipped.push({ target: t, reason: 'nginx not found (apt-get install -y nginx)' });
        log('nginx: not installed, skipped');
        continue;
      }
      const n = await startNginx(bin, stubs.urls, w);
      stops.push(() => n.stop());
      targets.push({
        name: named(t),
        description: `nginx (${bin}), ${w} worker${w > 1 ? 's' : ''}, round-robin upstream with keepalive, proxy_buffering off`,
        spec: spec([n.url]),
        cpu: () => n.cpuSeconds(),
        ...(w > 1 ? { cpuByProcess: cpuByProcessOf(n.child.pid) } : {}),
      });
    } else {
      if (!router) {
        const r = await startRouterOver(stubs.urls, MODEL, w);
        stops.push(() => r.stop());
        router = r;
      }
      targets.push({
        name: named(t),
        description: `kvrouter (${w === 1 ? 'one process' : `serve --workers ${w}`}), policy ${t} via x-kvrouter-policy`,
        spec: spec([router.url], { 'x-kvrouter-policy': t }),
        cpu: cpuOf(router.child.pid),
        ...(w > 1 ? { cpuByProcess: cpuByProcessOf(router.child.pid) } : {}),
      });
    }
  }
}

const countOf = (name: string) => Number(/-w(\d+)$/.exec(name)?.[1] ?? 1);
const baseOf = (name: string) => name.replace(/-w\d+$/, '');
// A ratio to a difference at the noise floor (nginx adds tens of µs) is reported, but only when positive.
const ratio = (a: number, b: number | undefined) =>
  b !== undefined && b > 0 && Number.isFinite(a) ? `${(a / b).toFixed(2)}x` : 'n/a';
const r2 = (x: number) => +x.toFixed(3);

/** The report's tables: latency, highest throughput, worker processes (several counts), the ramp. */
function reportTables(
  results: TargetResult[],
  kind: BodyKind,
  chunks: number,
  counts: number[],
  cores: number,
): Table[] {
  const direct = results.find((r) => r.name === 'direct');
  // Each target is compared with nginx running the same number of worker processes.
  const nginxFor = (r: TargetResult) =>
    results.find((x) => baseOf(x.name) === 'nginx' && countOf(x.name) === countOf(r.name));
  const nginx = results.find((r) => baseOf(r.name) === 'nginx');
  const added = (r: TargetResult, p: 'p50' | 'p99') => (direct ? r.latencyMs[p] - direct.latencyMs[p] : NaN);
  return [
    {
      title: `Latency, one request at a time (${kind} requests, max_tokens ${chunks}, streamed${chunks > 1 ? ` in ${chunks} chunks` : ''}; ms to the last byte)`,
      columns: [
        'target',
        'p50',
        'p99',
        'added p50',
        'added p99',
        ...(nginx ? ['p50 / nginx', 'p99 / nginx', 'added p50 / nginx', 'added p99 / nginx'] : []),
      ],
      rows: results.map((r) => [
        r.name,
        r2(r.latencyMs.p50),
        r2(r.latencyMs.p99),
        r2(added(r, 'p50')),
        r2(added(r, 'p99')),
        ...(nginx
          ? ((n) =>
              n
                ? [
                    ratio(r.latencyMs.p50, n.latencyMs.p50),
                    ratio(r.latencyMs.p99, n.latencyMs.p99),
                    ratio(added(r, 'p50'), added(n, 'p50')),
                    ratio(added(r, 'p99'), added(n, 'p99')),
                  ]
                : ['n/a', 'n/a', 'n/a', 'n/a'])(nginxFor(r))
          : []),
      ]),
    },
    {
      title: 'Highest sustained throughput (closed loop, concurrency doubled until throughput stops growing)',
      columns: [
        'target',
        'max req/s',
        'at concurrency',
        ...(nginx ? ['/ nginx'] : []),
        ...(direct ? ['/ direct'] : []),
        'proxy CPU µs/req',
        ...(chunks > 1 ? ['proxy CPU µs/chunk'] : []),
        'load generator (cores)',
      ],
      rows: results.map((r) => {
        const at = r.steps.find((s) => s.concurrency === r.maxRpsConcurrency)!;
        return [
          r.name,
          Math.round(r.maxRps),
          r.maxRpsConcurrency,
          ...(nginx ? [ratio(r.maxRps, nginxFor(r)?.maxRps)] : []),
          ...(direct ? [ratio(r.maxRps, direct.maxRps)] : []),
          at.proxyCpuUsPerReq === null ? 'n/a' : Math.round(at.proxyCpuUsPerReq),
          ...(chunks > 1 ? [at.proxyCpuUsPerReq === null ? 'n/a' : +(at.proxyCpuUsPerReq / chunks).toFixed(1)] : []),
          +at.loadgenCores.toFixed(2),
        ];
      }),
    },
    ...(counts.length > 1 ? [workersTable(results, cores)] : []),
    rampTable(results),
  ];
}

function workersTable(results: TargetResult[], cores: number): Table {
  return {
    title: 'Worker processes: max req/s against the same target with one process',
    // The split shows how the load reached the processes: node:cluster may hand one of
    // them most of the load generator's connections, which moves both rate and CPU.
    // The ceiling: the proxy, the load generator and the stubs share this machine's cores, so
    // more processes can raise the rate at most by cores / (cores the one-process target kept busy).
    columns: [
      'target',
      'processes',
      'max req/s',
      '/ one process',
      'proxy CPU µs/req',
      'µs per request of the target, by process (parent; workers)',
      `cores busy of ${cores} (proxy, load generator, upstreams)`,
      'ceiling on this machine (/ one process)',
    ],
    rows: results
      .filter((r) => baseOf(r.name) !== 'direct')
      .map((r) => {
        const one = results.find((x) => x.name === baseOf(r.name));
        const at = r.steps.find((x) => x.concurrency === r.maxRpsConcurrency)!;
        const split =
          at.processCpuUsPerReq && at.processCpuUsPerReq.length > 1
            ? `${Math.round(at.processCpuUsPerReq[0])}; ${at.processCpuUsPerReq.slice(1).map(Math.round).join(' / ')}`
            : countOf(r.name) > 1
              ? 'n/a'
              : '';
        const busy = busyCores(at);
        const oneBusy = one ? busyCores(one.steps.find((x) => x.concurrency === one.maxRpsConcurrency)!) : null;
        return [
          r.name,
          countOf(r.name),
          Math.round(r.maxRps),
          ratio(r.maxRps, one?.maxRps),
          at.proxyCpuUsPerReq === null ? 'n/a' : Math.round(at.proxyCpuUsPerReq),
          split,
          busy === null ? 'n/a' : +busy.toFixed(2),
          countOf(r.name) > 1 && oneBusy ? `${(cores / oneBusy).toFixed(2)}x` : '',
        ];
      }),
  };
}

function rampTable(results: TargetResult[]): Table {
  return {
    title: 'Throughput ramp (req/s at each concurrency)',
    columns: [
      'target',
      ...[...new Set(results.flatMap((r) => r.steps.map((s) => s.concurrency)))].sort((a, b) => a - b).map(String),
    ],
    rows: results.map((r) => {
      const cs = [...new Set(results.flatMap((x) => x.steps.map((s) => s.concurrency)))].sort((a, b) => a - b);
      return [
        r.name,
        ...cs.map((c) => {
          const s = r.steps.find((x) => x.concurrency === c);
          return s ? Math.round(s.rps) : '';
        }),
      ];
    }),
  };
}

export async function runOverhead(
  bench: 'overhead' | 'router',
  summary: string,
  defaultTargets: readonly TargetName[],
  argv: string[],
): Promise<number> {
  const parsed = parseCommand(`bench ${bench}`, summary, overheadOptions(defaultTargets), argv);
  if ('code' in parsed) return parsed.code;
  const v = parsed.values;
  const { names, kind, mo, chunks, upstream, loadgen, stubNginx, wrkBin } = planOf(v);
  const { path, bodies } = requestBodies(kind, MODEL, intOption(v, 'seed'), chunks);
  const log = (l: string) => process.stderr.write(`${l}\n`);
  const load0 = loadavg();
  const cores = availableParallelism();

  // Everything runs at once (idle targets cost next to nothing) so measurements can interleave.
  const started: Started = { stops: [], targets: [], skipped: [] };
  const { stops, targets, skipped } = started;
  let results: TargetResult[];
  let counts: number[] = [1];
  try {
    const stubs = stubNginx ? await startNginxStubs(stubNginx, UPSTREAMS, MODEL) : await startStubs(UPSTREAMS);
    stops.push(() => stubs.stop());
    const spec = (urls: string[], headers: Record<string, string> = {}): LoadSpec => ({
      urls: urls.map((u) => `${u}${path}`),
      bodies,
      headers,
    });
    counts = String(v.workers)
      .split(',')
      .map((x) => Number(x.trim()));
    if (counts.some((w) => !Number.isInteger(w) || w < 1 || w > 64))
      throw new Error('--workers takes counts 1..64, e.g. 1,2');
    for (const w of counts) await startTargets(names, w, stubs, spec, started, log);
    const lg = await LoadGenerator.start();
    stops.push(() => lg.stop());
    const wrk = wrkBin ? new WrkLoad(wrkBin) : null;
    if (wrk) stops.push(async () => wrk.stop());
    log(
      `targets: ${targets.map((t) => t.name).join(', ')}; latency ${mo.latencyRequests} requests each in ${mo.latencyRounds} interleaved rounds, then the throughput ramp`,
    );
    // The upstreams' CPU too: with the proxy's and the load generator's, what the machine had left.
    results = await measureTargets(targets, lg, mo, log, cpuOf(stubs.child.pid), wrk ?? lg);
  } finally {
    for (const stop of stops.reverse()) await stop();
  }

  const tables = reportTables(results, kind, chunks, counts, cores);
  const data = {
    bench,
    args: argv,
    setup: {
      kind,
      path,
      chunks,
      upstreams: `${UPSTREAMS} stub upstreams in one ${upstream} process (one token at once, streamed)`,
      processes: `load generator (forked node process${loadgen === 'wrk' ? '; wrk, one thread per upstream URL, for the throughput ramp' : ''}), stub upstreams (one ${upstream === 'nginx' ? 'nginx worker' : 'node process'}), the proxy under test (nginx with ${counts.join(' or ')} worker process(es), or kvrouter with as many router processes): all on this machine's cores`,
      measure: mo,
      loadAverage: { before: load0.map((x) => +x.toFixed(2)), after: loadavg().map((x) => +x.toFixed(2)) },
    },
    targets: results.map((r) => ({ name: r.name, description: r.description })),
    skipped,
    results,
  };
  const dir = writeReport(bench, data, tables, typeof v.out === 'string' ? v.out : undefined);
  writeFileSync(
    join(dir, 'throughput.svg'),
    lineChart({
      title: `Throughput vs concurrency (${kind} requests)`,
      xLabel: 'concurrent requests (closed loop, log scale)',
      yLabel: 'requests per second',
      xLog: true,
      series: results.map((r) => ({ name: r.name, points: r.steps.map((s) => [s.concurrency, s.rps] as const) })),
    }),
  );
  if (typeof v.json === 'string')
    writeFileSync(v.json, JSON.stringify({ machine: machine(), date: new Date().toISOString(), ...data }, null, 2));
  return results.every((r) => r.errors === 0) ? 0 : 1;
}
