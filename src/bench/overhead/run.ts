// Shared driver of `bench overhead` and `bench router`: start the stub upstreams, the load
// generator and each target in turn, measure, and report added latency and max RPS as ratios.
import { writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { intOption, type OptionTable, parseCommand } from '../../common/args.js';
import { machine, type Table, writeReport } from '../report.js';
import { lineChart } from '../svg.js';
import { type BodyKind, requestBodies } from './bodies.js';
import { LoadGenerator, type LoadSpec } from './loadgen.js';
import { type MeasureOptions, measureTargets, type Target, type TargetResult } from './measure.js';
import { findNginx, startNginx } from './nginx.js';
import type { RouterProc } from '../procs/router.js';
import { cpuOf, startRouterOver, startStubs } from './targets.js';

export const TARGETS = ['direct', 'nginx', 'kv', 'round-robin'] as const;
export type TargetName = (typeof TARGETS)[number];

const MODEL = 'Qwen/Qwen3-0.6B';
const UPSTREAMS = 2;

export function overheadOptions(defaultTargets: readonly TargetName[]): OptionTable {
  return {
    targets: { type: 'string', default: defaultTargets.join(','), arg: 'A,B', help: `what to measure: ${TARGETS.join(', ')}` },
    kind: { type: 'string', default: 'chat', arg: 'K', help: 'request bodies: chat (messages through the chat template) | tokens (1024 token ids)' },
    requests: { type: 'string', arg: 'N', help: 'requests per target of the one-at-a-time latency phase (default 4000; quick 500)' },
    'step-seconds': { type: 'string', arg: 'S', help: 'length of each concurrency step of the throughput ramp (default 4; quick 1.5)' },
    'max-concurrency': { type: 'string', default: '256', arg: 'N', help: 'highest concurrency of the ramp (it also stops once throughput stops growing)' },
    seed: { type: 'string', default: '0', arg: 'N', help: 'seed of the request bodies' },
    chunks: { type: 'string', default: '1', arg: 'N', help: 'streaming mode: SSE chunks per response (the stub sends one per output token); the report adds CPU per chunk' },
    out: { type: 'string', arg: 'DIR', help: 'report directory (default bench/results/<name>-<time>)' },
    json: { type: 'string', arg: 'FILE', help: 'also write the JSON report here' },
    quick: { type: 'boolean', help: 'short run (about a minute)' },
  };
}

export async function runOverhead(bench: 'overhead' | 'router', summary: string, defaultTargets: readonly TargetName[], argv: string[]): Promise<number> {
  const parsed = parseCommand(`bench ${bench}`, summary, overheadOptions(defaultTargets), argv);
  if ('code' in parsed) return parsed.code;
  const v = parsed.values;
  const quick = v.quick === true;
  const names = String(v.targets).split(',').map((s) => s.trim()).filter(Boolean) as TargetName[];
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
  };
  const chunks = intOption(v, 'chunks');
  if (chunks < 1 || chunks > 10_000) throw new Error('--chunks must be 1..10000');
  const { path, bodies } = requestBodies(kind, MODEL, intOption(v, 'seed'), chunks);
  const log = (l: string) => process.stderr.write(`${l}\n`);
  const load0 = loadavg();

  // Everything runs at once (idle targets cost next to nothing) so measurements can interleave.
  const stops: Array<() => Promise<void>> = [];
  const targets: Target[] = [];
  const skipped: Array<{ target: string; reason: string }> = [];
  let results: TargetResult[];
  try {
    const stubs = await startStubs(UPSTREAMS);
    stops.push(() => stubs.stop());
    const spec = (urls: string[], headers: Record<string, string> = {}): LoadSpec => ({ urls: urls.map((u) => `${u}${path}`), bodies, headers });
    let router: RouterProc | null = null;
    for (const t of names) {
      if (t === 'direct') {
        targets.push({ name: t, description: `client-side rotation over the ${UPSTREAMS} stub upstreams (CPU column: the upstreams)`, spec: spec(stubs.urls), cpu: cpuOf(stubs.child.pid) });
      } else if (t === 'nginx') {
        const bin = findNginx();
        if (!bin) {
          skipped.push({ target: t, reason: 'nginx not found (apt-get install -y nginx)' });
          log('nginx: not installed, skipped');
          continue;
        }
        const n = await startNginx(bin, stubs.urls);
        stops.push(() => n.stop());
        targets.push({ name: t, description: `nginx (${bin}), 1 worker, round-robin upstream with keepalive, proxy_buffering off`, spec: spec([n.url]), cpu: () => n.cpuSeconds() });
      } else {
        if (!router) {
          const r = await startRouterOver(stubs.urls, MODEL);
          stops.push(() => r.stop());
          router = r;
        }
        targets.push({ name: t, description: `kvrouter (one process), policy ${t} via x-kvrouter-policy`, spec: spec([router.url], { 'x-kvrouter-policy': t }), cpu: cpuOf(router.child.pid) });
      }
    }
    const lg = await LoadGenerator.start();
    stops.push(() => lg.stop());
    log(`targets: ${targets.map((t) => t.name).join(', ')}; latency ${mo.latencyRequests} requests each in ${mo.latencyRounds} interleaved rounds, then the throughput ramp`);
    results = await measureTargets(targets, lg, mo, log);
  } finally {
    for (const stop of stops.reverse()) await stop();
  }

  const direct = results.find((r) => r.name === 'direct');
  const nginx = results.find((r) => r.name === 'nginx');
  const added = (r: TargetResult, p: 'p50' | 'p99') => (direct ? r.latencyMs[p] - direct.latencyMs[p] : NaN);
  // A ratio to a difference at the noise floor (nginx adds tens of µs) is reported, but only when positive.
  const ratio = (a: number, b: number | undefined) => (b !== undefined && b > 0 && Number.isFinite(a) ? `${(a / b).toFixed(2)}x` : 'n/a');
  const r2 = (x: number) => +x.toFixed(3);
  const tables: Table[] = [
    {
      title: `Latency, one request at a time (${kind} requests, max_tokens ${chunks}, streamed${chunks > 1 ? ` in ${chunks} chunks` : ''}; ms to the last byte)`,
      columns: ['target', 'p50', 'p99', 'added p50', 'added p99', ...(nginx ? ['p50 / nginx', 'p99 / nginx', 'added p50 / nginx', 'added p99 / nginx'] : [])],
      rows: results.map((r) => [
        r.name, r2(r.latencyMs.p50), r2(r.latencyMs.p99), r2(added(r, 'p50')), r2(added(r, 'p99')),
        ...(nginx
          ? [ratio(r.latencyMs.p50, nginx.latencyMs.p50), ratio(r.latencyMs.p99, nginx.latencyMs.p99), ratio(added(r, 'p50'), added(nginx, 'p50')), ratio(added(r, 'p99'), added(nginx, 'p99'))]
          : []),
      ]),
    },
    {
      title: 'Highest sustained throughput (closed loop, concurrency doubled until throughput stops growing)',
      columns: ['target', 'max req/s', 'at concurrency', ...(nginx ? ['/ nginx'] : []), ...(direct ? ['/ direct'] : []), 'proxy CPU µs/req', ...(chunks > 1 ? ['proxy CPU µs/chunk'] : []), 'load generator (cores)'],
      rows: results.map((r) => {
        const at = r.steps.find((s) => s.concurrency === r.maxRpsConcurrency)!;
        return [
          r.name, Math.round(r.maxRps), r.maxRpsConcurrency,
          ...(nginx ? [ratio(r.maxRps, nginx.maxRps)] : []), ...(direct ? [ratio(r.maxRps, direct.maxRps)] : []),
          at.proxyCpuUsPerReq === null ? 'n/a' : Math.round(at.proxyCpuUsPerReq),
          ...(chunks > 1 ? [at.proxyCpuUsPerReq === null ? 'n/a' : +(at.proxyCpuUsPerReq / chunks).toFixed(1)] : []),
          +at.loadgenCores.toFixed(2),
        ];
      }),
    },
    {
      title: 'Throughput ramp (req/s at each concurrency)',
      columns: ['target', ...[...new Set(results.flatMap((r) => r.steps.map((s) => s.concurrency)))].sort((a, b) => a - b).map(String)],
      rows: results.map((r) => {
        const cs = [...new Set(results.flatMap((x) => x.steps.map((s) => s.concurrency)))].sort((a, b) => a - b);
        return [r.name, ...cs.map((c) => {
          const s = r.steps.find((x) => x.concurrency === c);
          return s ? Math.round(s.rps) : '';
        })];
      }),
    },
  ];
  const data = {
    bench,
    args: argv,
    setup: {
      kind,
      path,
      chunks,
      upstreams: `${UPSTREAMS} stub upstreams in one node process (one token at once, streamed)`,
      processes: 'load generator (forked node process), stub upstreams (one node process), the proxy under test (nginx with 1 worker, or a kvrouter process): all on the same 2 cores',
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
  if (typeof v.json === 'string') writeFileSync(v.json, JSON.stringify({ machine: machine(), date: new Date().toISOString(), ...data }, null, 2));
  return results.every((r) => r.errors === 0) ? 0 : 1;
}
