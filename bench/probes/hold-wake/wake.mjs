// What one wake-up of the capacity queue costs with N requests held for a busy holder of their
// prefix while other instances are free (routing.busy, kv on the time model): decisions made and
// CPU per wake-up, through the real CapacityQueue and Scheduler of a built tree.
//   node bench/probes/hold-wake/wake.mjs [--root DIR] [--waiters 1024] [--candidates 8] [--reps 20]
// --root: the checkout whose dist/ is measured (default: this one), e.g. a worktree of an older commit.
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { pathToFileURL } from 'node:url';

const { values: a } = parseArgs({
  options: {
    root: { type: 'string', default: resolve(import.meta.dirname, '../../..') },
    waiters: { type: 'string', default: '1024' },
    candidates: { type: 'string', default: '8' },
    reps: { type: 'string', default: '20' },
  },
});
const load = (p) => import(pathToFileURL(resolve(a.root, 'dist', p)).href);
const { hashSpace, seqHashes } = await load('hashing/index.js');
const { TieredIndexer } = await load('indexer/namespaces.js');
const { CapacityQueue, decideWithinCapacity } = await load('proxy/capacity.js');
const { waitOn } = await load('scheduler/hold.js');
const { Scheduler } = await load('scheduler/scheduler.js');

const N = Number(a.waiters);
const C = Number(a.candidates);
const REPS = Number(a.reps);
const BS = 16;
const ns = { model: 'm', blockSize: BS, loraName: null, salt: null, tenant: 'default' };
const weights = {
  model: 'time',
  overlapWeight: 1,
  medium: { cpu: 0.5, disk: 0.25, shared: 0.5 },
  trackActiveBlocks: true,
  decodeInterference: 0,
};
const candidates = Array.from({ length: C }, (_, k) => ({ instance: `i${k}`, dpRank: 0 }));
// llm-d's shape: a 6,000-token system prompt (held by i0) and a 1,200-token question of each request's own.
const system = Array.from({ length: 6000 }, (_, i) => i + 1);
const prompt = (n) => [...system, ...Array.from({ length: 1200 }, (_, i) => 1_000_000 + n * 10_000 + i)];
const input = (tokens, over = {}) => ({
  ns,
  candidates,
  tokens,
  policy: 'kv',
  weights,
  temperature: 0,
  ratePrior: { tokensPerS: 1000, overheadMs: 0 },
  busy: { maxActivePrefillTokens: 1000, maxActiveBlocks: 1_000_000_000 },
  recomputeWeightSaturated: 1,
  ...over,
});

const indexer = new TieredIndexer();
const idx = indexer.namespace(ns).index;
idx.store(idx.holder('i0', 0, 'GPU'), seqHashes(system, BS, hashSpace()));
const s = new Scheduler(indexer, () => 0.5);
// i0: 2,000 tokens of prefill queued (busy past 1,000); a wait of 2 s against a saving of 6 s: held for i0.
const other = Array.from({ length: 2000 }, (_, i) => 5_000_000 + i);
const d0 = s.decide(input(other, { policy: 'direct', target: 'i0', busy: null }), 0);
s.book(d0, ns, { requestId: 'on-i0', now: 0, speculativeTtlMs: 0 });

const queue = new CapacityQueue(2 * N + 2 * REPS + 8);
let decisions = 0;
const aborts = [];
const waits = [];
const bound = (ac) => ({ deadline: Date.now() + 3_600_000, now: Date.now, signal: ac.signal });
/** A waiter `n`: a pool of its own (held, it never ends a pass for others; each decides at once, not behind others). */
function join(n, pool = `m${n}`) {
  const tokens = prompt(n);
  const ac = new AbortController();
  aborts.push(ac);
  const decide = (mayHold) => {
    decisions++;
    const d = s.decide(input(tokens, { hold: mayHold }), 0);
    if (d.chosen) {
      s.book(d, ns, { requestId: `w${n}`, now: 0, speculativeTtlMs: 0 });
      return { done: d };
    }
    return { wait: d, ...waitOn(d) };
  };
  waits.push(decideWithinCapacity(queue, bound(ac), decide, pool));
}
for (let n = 0; n < N; n++) join(n);
await new Promise((r) => setImmediate(r));
const setup = decisions;
const held = queue.depth;

/** Decisions, CPU and wall time (ms; the work is synchronous) of one wake-up, the mean of REPS. */
function measure(wake) {
  decisions = 0;
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  for (let r = 0; r < REPS; r++) wake();
  const wallMs = (performance.now() - t0) / REPS;
  const c = process.cpuUsage(c0);
  return { decisions: decisions / REPS, cpuMs: (c.user + c.system) / 1000 / REPS, wallMs };
}
// Warm up the decide path.
measure(() => queue.notify('i0'));
const rows = {
  'first token / finish on the busy holder i0 (still busy)': measure(() => queue.notify('i0')),
  [`first token / finish on a free instance i${C - 1}`]: measure(() => queue.notify(`i${C - 1}`)),
};
// A new request of a pool with a waiter joins behind it and takes its turn (the old code: a whole
// pass, as each waiter's own one-second timer did too; now: its own try, as its timer's).
let late = N;
rows['a request arriving behind a waiter of its pool'] = measure(() => join(late++, 'm0'));
// (Last: it leaves waiters due, which the next wake-ups go on with.)
rows['a change no instance is named for (notify())'] = measure(() => queue.notify());

console.log(`root ${a.root}: ${held} waiters held for i0 (setup ${setup} decisions), ${C} candidates, ${REPS} reps`);
for (const [k, v] of Object.entries(rows))
  console.log(
    `  ${k}: ${v.decisions.toFixed(1)} decisions, ${v.cpuMs.toFixed(3)} ms CPU (${v.wallMs.toFixed(3)} ms wall) per wake-up`,
  );
if (queue.depth !== held + REPS) console.log(`  (queue depth now ${queue.depth}: some went)`);
for (const ac of aborts) ac.abort();
await Promise.all(waits);
console.log(`  after abort: queue depth ${queue.depth}, bookings ${s.active.size ?? '?'}`);
