// `kvrouter bench indexer`: applied block-events/s, query latency by prompt length, block size and
// fleet size over a 1M-block index, hashing tokens/s, and bytes per indexed (block, holder).
import { mulberry32 } from '../common/prng.js';
import { EventApplier } from '../indexer/apply.js';
import type { StoredEvent } from '../indexer/kv-event.js';
import { hashSpace, seqHashes } from '../hashing/index.js';
import { BlockIndex } from '../indexer/block-index.js';
import { TieredIndexer } from '../indexer/namespaces.js';
import { intOption, type OptionTable, parseCommand } from '../common/args.js';
import { percentile, type Table, writeReport } from './report.js';

const OPTIONS: OptionTable = {
  blocks: { type: 'string', default: '1000000', arg: 'N', help: 'indexed (block, holder) pairs for the query benchmark' },
  queries: { type: 'string', default: '300', arg: 'N', help: 'queries per configuration' },
  quick: { type: 'boolean', help: 'smaller run (100k blocks, fewer configurations)' },
  out: { type: 'string', arg: 'DIR', help: 'report directory (default bench/results/indexer-<time>)' },
};

const rng = mulberry32;

function randomHashes(n: number, r: () => number): BigUint64Array {
  const a = new BigUint64Array(n);
  const v = new Uint32Array(a.buffer);
  for (let i = 0; i < v.length; i++) v[i] = (r() * 4294967296) >>> 0;
  return a;
}

const BATCH = 16;

function benchApply(totalBlocks: number): { coldFill: number; indexOnly: number; applier: number; applierRehash: number; removes: number } {
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
  const coldFill = rate(() => batches.forEach((b, i) => idx.store(holders[i % 64], b)));
  const removes = rate(() => batches.forEach((b, i) => idx.remove(holders[i % 64], b)));
  const indexOnly = rate(() => batches.forEach((b, i) => idx.store(holders[i % 64], b)));
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
  const dual = evs.slice(0, n2).map((e, i) => ({ ...e, token_ids: Array.from({ length: BATCH * 16 }, (_, k) => (i * 7919 + k) % 151_000) }));
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

function benchQueries(totalRecords: number, queries: number, blockSizes: number[], fleets: number[], lengths: number[]): { rows: QueryRow[]; bytesPerRecord: number } {
  const rows: QueryRow[] = [];
  let bytesPerRecord = 0;
  for (const bs of blockSizes) {
    for (const fleet of fleets) {
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
        rows.push({ blockSize: bs, instances: fleet, tokens, p50us: percentile(lat, 50), p99us: percentile(lat, 99), matchedBlocks: matched });
      }
      void records;
    }
  }
  return { rows, bytesPerRecord };
}

function benchHashing(): Array<{ blockSize: number; tokensPerSec: number }> {
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
  const parsed = parseCommand('bench indexer', 'Indexer throughput, query latency, hashing speed and memory.', OPTIONS, argv);
  if ('code' in parsed) return parsed.code;
  const v = parsed.values;
  const quick = v.quick === true;
  const total = quick ? 100_000 : intOption(v, 'blocks');
  const queries = quick ? 50 : intOption(v, 'queries');
  process.stderr.write(`applying ${total.toLocaleString()} block events...\n`);
  const apply = benchApply(total);
  process.stderr.write('querying...\n');
  const q = benchQueries(total, queries, quick ? [16] : [16, 64], quick ? [8, 64] : [8, 64, 512], quick ? [1024, 32768] : [1024, 8192, 32768, 131072]);
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
    { title: 'Hashing (XXH3-64 seq hashes, 32k-token prompt)', columns: ['block size', 'tokens/s'], rows: hashing.map((h) => [h.blockSize, h.tokensPerSec]) },
    { title: 'Memory', columns: ['measure', 'value'], rows: [['bytes per indexed (block, holder)', q.bytesPerRecord]] },
  ];
  writeReport('indexer', { apply, queries: q.rows, hashing, bytesPerRecord: q.bytesPerRecord }, tables, typeof v.out === 'string' ? v.out : undefined);
  return 0;
}
