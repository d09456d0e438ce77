// `kvrouter bench indexer`: applied block-events/s, query latency by prompt length, block size and
// fleet size over a 1M-block index, the query and a whole routing decision with one prompt cached
// across a fleet, hashing tokens/s, and bytes per indexed (block, holder).
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { mulberry32 } from '../common/prng.js';
import { EventApplier } from '../indexer/apply.js';
import type { StoredEvent } from '../indexer/kv-event.js';
import { hashSpace, seqHashes } from '../hashing/index.js';
import { BlockIndex } from '../indexer/block-index.js';
import { TieredIndexer } from '../indexer/namespaces.js';
import { type RouteInput, Scheduler } from '../scheduler/scheduler.js';
import { intOption, type OptionTable, parseCommand } from '../common/args.js';
import { percentile, type Table, writeReport } from './report.js';

const OPTIONS: OptionTable = {
  blocks: {
    type: 'string',
    default: '1000000',
    arg: 'N',
    help: 'indexed (block, holder) pairs for the query benchmark',
  },
  queries: { type: 'string', default: '300', arg: 'N', help: 'queries per configuration' },
  quick: { type: 'boolean', help: 'smaller run (100k blocks, fewer configurations, fleets up to 256)' },
  fleet: {
    type: 'string',
    arg: 'N,...',
    help: 'fleet sizes for the fleet cases (default 16,64,256,1024; --quick 16,64,256)',
  },
  out: { type: 'string', arg: 'DIR', help: 'report directory (default bench/results/indexer-<time>)' },
};

const rng = mulberry32;

function randomHashes(n: number, r: () => number): BigUint64Array {
  const a = new BigUint64Array(n);
  const v = new Uint32Array(a.buffer);
  for (let i = 0; i < v.length; i++) v[i] = (r() * 4294967296) >>> 0;
  return a;
}

/**
 * A full, synchronous collection. Sections and cases run one after another in one heap: without it a
 * case's timings pay for the garbage of the one before (the 1M-pair query indexes landed in the fleet
 * section's decide figures, ~2x with `--fleet 1024` alone). `--expose-gc` set at run time is read
 * when a context is created, so a new context hands out the collector.
 */
let collector: (() => void) | null = null;
function fullGc(): void {
  if (!collector) {
    collector = (globalThis as { gc?: () => void }).gc ?? null;
    if (!collector) {
      setFlagsFromString('--expose-gc');
      collector = runInNewContext('gc') as () => void;
    }
  }
  collector();
}

const BATCH = 16;

function benchApply(totalBlocks: number): {
  coldFill: number;
  indexOnly: number;
  applier: number;
  applierRehash: number;
  removes: number;
} {
  const r = rng(7);
  // Index-level: store 16-block batches across 64 holders.
  const idx = new BlockIndex(1 << 16);
  const holders = Array.from({ length: 64 }, (_, i) => idx.holder(`w${i}`, 0, 'GPU'));
  const batches = Array.from({ length: Math.ceil(totalBlocks / BATCH) }, () => randomHashes(BATCH, r));
  const rate = (fn: () => void) => {
    const t = performance.now();
    fn();
    return (batches.length * BATCH) / ((performance.now() - t) / 1000);
  };
  // Cold fill includes growing the arrays from empty; steady state is an index at size with churn.
  const storeAll = () => {
    for (let i = 0; i < batches.length; i++) idx.store(holders[i % 64], batches[i]);
  };
  const coldFill = rate(storeAll);
  const removes = rate(() => {
    for (let i = 0; i < batches.length; i++) idx.remove(holders[i % 64], batches[i]);
  });
  const indexOnly = rate(storeAll);
  idx.removeBackend('w0');

  // Through the applier with standard hashes (what a standard publisher costs).
  const indexer = new TieredIndexer();
  const applier = new EventApplier(indexer);
  const evs: StoredEvent[] = batches.map((b, i) => ({
    event_type: 'stored',
    event_id: null,
    timestamp: null,
    model_name: 'm',
    block_size: 16,
    additional_salt: null,
    lora_name: null,
    tenant_id: 'default',
    backend_id: `w${i % 64}`,
    medium: 'GPU',
    dp_rank: 0,
    seq_hashes: [...b],
    base_block_idx: null,
    parent_hash: null,
    token_ids: null,
  }));
  let t = performance.now();
  for (const e of evs) applier.apply(e);
  const applierStd = (evs.length * BATCH) / ((performance.now() - t) / 1000);

  // Dual key: engine hashes + token_ids re-hashed into router hashes (vLLM's default).
  const n2 = Math.min(evs.length, 20_000);
  const indexer2 = new TieredIndexer();
  const applier2 = new EventApplier(indexer2);
  // Distinct tokens per event, as real prompts have (identical ones would pile every holder on 16 blocks).
  const dual = evs
    .slice(0, n2)
    .map((e, i) => ({ ...e, token_ids: Array.from({ length: BATCH * 16 }, (_, k) => (i * 7919 + k) % 151_000) }));
  t = performance.now();
  for (const e of dual) applier2.apply(e);
  const applierRehash = (n2 * BATCH) / ((performance.now() - t) / 1000);
  return { coldFill, indexOnly, applier: applierStd, applierRehash, removes };
}

interface QueryRow {
  blockSize: number;
  instances: number;
  tokens: number;
  p50us: number;
  p99us: number;
  matchedBlocks: number;
}

function benchQueries(
  totalRecords: number,
  queries: number,
  blockSizes: number[],
  fleets: number[],
  lengths: number[],
): { rows: QueryRow[]; bytesPerRecord: number } {
  const rows: QueryRow[] = [];
  let bytesPerRecord = 0;
  for (const bs of blockSizes) {
    for (const fleet of fleets) {
      fullGc(); // the previous configuration's index is garbage now
      const r = rng(bs * 1000 + fleet);
      const idx = new BlockIndex(1 << 16);
      // Base prompts long enough for the longest query; each instance caches prefixes of a few.
      const maxBlocks = Math.ceil(Math.max(...lengths) / bs);
      const bases = Array.from({ length: 32 }, () => randomHashes(maxBlocks, r));
      let records = 0;
      let inst = 0;
      const filler = Math.max(0, totalRecords - 32 * 4 * maxBlocks); // unrelated blocks to reach the target size
      for (let b = 0; b < bases.length; b++) {
        // ~4 instances per base hold prefixes of decreasing depth: the walk sees drops along the way.
        for (let k = 0; k < 4; k++) {
          const depth = Math.max(1, Math.floor(maxBlocks * (1 - k * 0.2)));
          idx.store(idx.holder(`i${inst % fleet}`, 0, k === 3 ? 'CPU' : 'GPU'), bases[b].subarray(0, depth));
          records += depth;
          inst++;
        }
      }
      for (let f = 0; f < filler; f += 4096) {
        idx.store(idx.holder(`i${(f / 4096) % fleet}`, 0, 'GPU'), randomHashes(4096, r));
        records += 4096;
      }
      const st = idx.stats();
      bytesPerRecord = st.bytes / st.records;
      for (const tokens of lengths) {
        const nb = Math.floor(tokens / bs);
        const lat: number[] = [];
        let matched = 0;
        for (let w = 0; w < 50; w++) idx.query(bases[w % bases.length].subarray(0, nb), 0); // JIT warm-up
        for (let q = 0; q < queries; q++) {
          const base = bases[q % bases.length].subarray(0, nb);
          const t0 = process.hrtime.bigint();
          const res = idx.query(base, 0);
          lat.push(Number(process.hrtime.bigint() - t0) / 1000);
          matched = Math.max(matched, ...res.candidates.map((c) => c.disk));
        }
        lat.sort((a, b) => a - b);
        rows.push({
          blockSize: bs,
          instances: fleet,
          tokens,
          p50us: percentile(lat, 50),
          p99us: percentile(lat, 99),
          matchedBlocks: matched,
        });
      }
      void records;
    }
  }
  return { rows, bytesPerRecord };
}

interface FleetRow {
  instances: number;
  /** equal: every instance holds the whole prompt; mixed: a random depth each; loaded: mixed, plus a booking per instance. */
  depths: 'equal' | 'mixed' | 'loaded';
  queryP50us: number;
  queryP99us: number;
  decideP50us: number;
  decideP99us: number;
  samples: number;
}

/**
 * Latencies (us) of up to `reps` calls, stopping once `budgetMs` is spent (at least 3), after a
 * warm-up of 30 calls or a tenth of the budget, whichever ends first (the JIT optimizes the walk
 * after a few dozen calls; two are not enough, and a 5-second call needs none).
 */
function sample(fn: () => void, reps: number, budgetMs: number): number[] {
  const warm = performance.now() + budgetMs / 10;
  for (let i = 0; i < 30 && (i === 0 || performance.now() < warm); i++) fn();
  const lat: number[] = [];
  const end = performance.now() + budgetMs;
  while (lat.length < reps && (lat.length < 3 || performance.now() < end)) {
    const t0 = process.hrtime.bigint();
    fn();
    lat.push(Number(process.hrtime.bigint() - t0) / 1000);
  }
  return lat.sort((a, b) => a - b);
}

/**
 * One 32,768-token prompt (2,048 blocks of 16) cached across a fleet: a hot system prompt held by
 * every instance (equal), or evicted unevenly / branching conversations (mixed: each instance holds
 * a prefix of random depth). `loaded` is mixed with one in-flight booking per instance (a request
 * sharing the prompt's first 256 blocks, so its speculative blocks lie on the walk) and a GPU cache
 * that has evicted: eviction awareness and the booking lookups then run for every candidate.
 * index.query excludes hashing; Scheduler.decide hashes the tokens and routes with the default
 * routing configuration (time cost model, prefix affinity 0.5, load bound 1.25, eviction aware).
 */
function benchFleet(fleets: number[], reps: number): FleetRow[] {
  const rows: FleetRow[] = [];
  const bs = 16;
  const ns = { model: 'm', blockSize: bs, loraName: null, salt: null, tenant: 'default' };
  const tokens = Uint32Array.from({ length: 32768 }, (_, i) => (i * 2654435761) % 151_000);
  for (const n of fleets) {
    for (const depths of ['equal', 'mixed', 'loaded'] as const) {
      const r = rng(n * 7 + depths.length);
      const indexer = new TieredIndexer();
      const space = indexer.namespace(ns);
      const seq = seqHashes(tokens, bs, space.space);
      const candidates = Array.from({ length: n }, (_, k) => ({ instance: `i${k}`, dpRank: 0 }));
      const now = 1_000;
      const sched = new Scheduler(indexer, r);
      for (const c of candidates) {
        const depth = depths === 'equal' ? seq.length : 1 + Math.floor(r() * seq.length);
        const gpu = space.index.holder(c.instance, 0, 'GPU');
        space.index.store(gpu, seq.subarray(0, depth));
        if (depths !== 'loaded') continue;
        space.index.remove(gpu, seq.subarray(depth - 1, depth)); // evicted once: the cache is full
        const booked = new BigUint64Array(320);
        booked.set(seq.subarray(0, 256));
        booked.set(randomHashes(64, r), 256);
        sched.active.book(`b-${c.instance}`, c.instance, 0, booked, 4096, now, ns.model);
        space.index.store(space.index.speculativeHolder(c.instance, 0, 2000), booked, null, now + 2000);
      }
      const input: RouteInput = {
        ns,
        candidates,
        tokens,
        policy: 'kv',
        weights: {
          model: 'time',
          overlapWeight: 1,
          medium: { cpu: 0.75, disk: 0.25, shared: 0.5 },
          trackActiveBlocks: true,
          decodeInterference: 0.1,
          decodeBlockMs: 0,
        },
        temperature: 0,
        prefixAffinity: 0.5,
        affinityBlocks: 4,
        loadBound: 1.25,
        evictionAware: true,
        busy: { maxActivePrefillTokens: 10_000_000, maxActiveBlocks: 1_000_000_000 },
      };
      const budget = n >= 1024 ? 4000 : 2000;
      fullGc(); // the previous case's index and scheduler are garbage now
      const q = sample(() => space.index.query(seq, now), reps, budget);
      fullGc();
      const d = sample(() => sched.decide(input, now), reps, budget);
      rows.push({
        instances: n,
        depths,
        queryP50us: percentile(q, 50),
        queryP99us: percentile(q, 99),
        decideP50us: percentile(d, 50),
        decideP99us: percentile(d, 99),
        samples: Math.min(q.length, d.length),
      });
      process.stderr.write(
        `  fleet ${n} ${depths}: query p50 ${percentile(q, 50).toFixed(1)} us, decide p50 ${percentile(d, 50).toFixed(1)} us\n`,
      );
    }
  }
  return rows;
}

function benchHashing(): Array<{ blockSize: number; tokensPerSec: number }> {
  fullGc();
  const tokens = Uint32Array.from({ length: 32768 }, (_, i) => (i * 2654435761) % 151000);
  const out: Array<{ blockSize: number; tokensPerSec: number }> = [];
  for (const bs of [16, 64]) {
    const space = hashSpace();
    seqHashes(tokens, bs, space); // warm
    const reps = 30;
    const t = performance.now();
    for (let i = 0; i < reps; i++) seqHashes(tokens, bs, space);
    out.push({ blockSize: bs, tokensPerSec: (tokens.length * reps) / ((performance.now() - t) / 1000) });
  }
  return out;
}

export async function run(argv: string[]): Promise<number> {
  const parsed = parseCommand(
    'bench indexer',
    'Indexer throughput, query latency, hashing speed and memory.',
    OPTIONS,
    argv,
  );
  if ('code' in parsed) return parsed.code;
  const v = parsed.values;
  const quick = v.quick === true;
  const total = quick ? 100_000 : intOption(v, 'blocks');
  const queries = quick ? 50 : intOption(v, 'queries');
  process.stderr.write(`applying ${total.toLocaleString()} block events...\n`);
  const apply = benchApply(total);
  process.stderr.write('querying...\n');
  fullGc(); // the applied indexes are garbage now
  const q = benchQueries(
    total,
    queries,
    quick ? [16] : [16, 64],
    quick ? [8, 64] : [8, 64, 512],
    quick ? [1024, 32768] : [1024, 8192, 32768, 131072],
  );
  const fleets =
    typeof v.fleet === 'string' ? v.fleet.split(',').map(Number) : quick ? [16, 64, 256] : [16, 64, 256, 1024];
  if (fleets.some((f) => !Number.isInteger(f) || f < 1))
    throw new Error('--fleet takes positive integers, e.g. 16,64,256');
  process.stderr.write('fleet...\n');
  fullGc(); // the query section's 1M-pair indexes are garbage now
  const fleet = benchFleet(fleets, quick ? 50 : queries);
  process.stderr.write('hashing...\n');
  const hashing = benchHashing();
  const tables: Table[] = [
    {
      title: 'Applied block events (one core)',
      columns: ['path', 'block events/s'],
      rows: [
        ['BlockIndex.store, 16-block batches, cold fill (arrays growing)', apply.coldFill],
        ['BlockIndex.store, 16-block batches, steady state', apply.indexOnly],
        ['BlockIndex.remove, 16-block batches', apply.removes],
        ['EventApplier, standard hashes', apply.applier],
        ['EventApplier, dual key (re-hash token_ids)', apply.applierRehash],
      ],
    },
    {
      title: `Query latency (${total.toLocaleString()} indexed pairs, excluding hashing)`,
      columns: ['block size', 'instances', 'prompt tokens', 'p50 us', 'p99 us', 'longest match (blocks)'],
      rows: q.rows.map((r) => [r.blockSize, r.instances, r.tokens, r.p50us, r.p99us, r.matchedBlocks]),
    },
    {
      title:
        'One 32k-token prompt across a fleet (2,048 blocks of 16; query excludes hashing, decide hashes and routes)',
      columns: [
        'instances',
        'cached depths',
        'index.query p50 us',
        'p99 us',
        'Scheduler.decide p50 us',
        'p99 us',
        'samples',
      ],
      rows: fleet.map((f) => [
        f.instances,
        f.depths,
        f.queryP50us,
        f.queryP99us,
        f.decideP50us,
        f.decideP99us,
        f.samples,
      ]),
    },
    {
      title: 'Hashing (XXH3-64 seq hashes, 32k-token prompt)',
      columns: ['block size', 'tokens/s'],
      rows: hashing.map((h) => [h.blockSize, h.tokensPerSec]),
    },
    { title: 'Memory', columns: ['measure', 'value'], rows: [['bytes per indexed (block, holder)', q.bytesPerRecord]] },
  ];
  writeReport(
    'indexer',
    { apply, queries: q.rows, fleet, hashing, bytesPerRecord: q.bytesPerRecord },
    tables,
    typeof v.out === 'string' ? v.out : undefined,
    [
      "Sections and cases are separated by a full GC: each figure is its own case, not the previous one's garbage (the query section's 1M-pair indexes, the previous fleet case).",
    ],
  );
  return 0;
}
