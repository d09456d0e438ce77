// The write path's shortcuts for batches of many engines' events (apply.ts, writes.ts): the stream
// memo kept per backend, and the prefetch of one-block removals ahead (vLLM publishes a BlockRemoved
// per block). Both are speed only: a writer that uses them must leave the index exactly as an
// applier that resolves every event afresh and never prefetches, write by write, on a table past
// the prefetch's 1 MiB (a reservation sizes it so) with dual-key events (the engine maps' path);
// and both must hold exactly what each engine's LRU holds (removals of one block each, their hashes
// views into one slab, as the fast decoder gives them).
import { describe, expect, it } from 'vitest';
import { mulberry32 } from '../../src/common/prng.js';
import type { KvEvent } from '../../src/indexer/kv-event.js';
import { TieredIndexer } from '../../src/indexer/namespaces.js';
import { dumpIndex } from '../../src/indexer/snapshot.js';
import { KvIndexWriter } from '../../src/indexer/writer.js';
import { PREFETCH_REMOVALS } from '../../src/indexer/apply.js';

const BS = 4;
const BACKENDS = ['e0', 'e1', 'e2', 'e3', 'e4'];
const NS = { model: 'm', blockSize: BS, loraName: null, salt: null, tenant: 'default' };

function base(backend: string) {
  return {
    model_name: 'm',
    block_size: BS,
    additional_salt: null,
    lora_name: null,
    tenant_id: 'default',
    backend_id: backend,
    medium: 'GPU',
    dp_rank: 0,
    event_id: null,
    timestamp: null,
  };
}

/** One engine: its chain of blocks (engine hash, tokens), oldest first, as an LRU that evicts from the front. */
interface Engine {
  id: string;
  held: bigint[];
  next: number;
}

/** A batch of one engine: stores of a new chain (parent-chained chunks) after one-block removals of its oldest. */
function batch(rnd: () => number, e: Engine, cap: number): KvEvent[] {
  const out: KvEvent[] = [];
  const n = 1 + Math.floor(rnd() * 40);
  const over = e.held.length + n - cap;
  // One slab for the batch's removed hashes, each event's list a view into it (as the fast decoder
  // gives them), from the slab's second word.
  const slab = new BigUint64Array(Math.max(0, over) + 1);
  for (let k = 0; k < over; k++) slab[k + 1] = e.held.shift()!;
  for (let k = 0; k < over; k++)
    out.push({
      ...base(e.id),
      event_type: 'removed',
      seq_hashes: slab.subarray(k + 1, k + 2),
      base_block_idx: null,
    } as KvEvent);
  let parent: bigint | null = rnd() < 0.5 && e.held.length > 0 ? e.held[e.held.length - 1] : null;
  for (let done = 0; done < n; ) {
    const m = Math.min(n - done, 1 + Math.floor(rnd() * 8));
    const hashes = new BigUint64Array(m);
    const tokens = new Uint32Array(m * BS);
    for (let i = 0; i < m; i++) hashes[i] = BigInt(e.next++) * 0x1_0000_0001n + 7n;
    for (let t = 0; t < tokens.length; t++) tokens[t] = Math.floor(rnd() * 50_000);
    out.push({
      ...base(e.id),
      event_type: 'stored',
      seq_hashes: hashes,
      base_block_idx: null,
      parent_hash: parent,
      token_ids: tokens,
    } as KvEvent);
    for (const h of hashes) e.held.push(h);
    parent = hashes[m - 1];
    done += m;
  }
  return out;
}

describe('applying batches of many engines', () => {
  for (const seed of [1, 2, 3]) {
    it(`memo per backend and removal prefetch leave the index as fresh appliers do (seed ${seed})`, () => {
      const rnd = mulberry32(seed);
      // 100,000 reserved records: a block table of 4 MiB, past the prefetch's threshold.
      const opts = { reserveRecords: 100_000, reserveEngineHashes: 1_000 };
      const ix = new TieredIndexer(opts);
      const ref = new TieredIndexer(opts);
      const writer = new KvIndexWriter(ix);
      const engines: Engine[] = BACKENDS.map((id, k) => ({ id, held: [], next: 1 + k * 1_000_000 }));
      const prefetched = { calls: 0 };
      const prefetch = writer.prefetch.bind(writer);
      writer.prefetch = (evs, from, to) => {
        prefetched.calls++;
        prefetch(evs, from, to);
      };
      let last = '';
      for (let b = 0; b < 300; b++) {
        // Interleaved engines, never the same one twice in a row (the single memo misses each time).
        let e = engines[Math.floor(rnd() * engines.length)];
        if (e.id === last) e = engines[(engines.indexOf(e) + 1) % engines.length];
        last = e.id;
        const evs = batch(rnd, e, 120);
        // As StreamIngest.applyDecoded does it.
        for (let i = 0; i < evs.length; i++) {
          if (i % PREFETCH_REMOVALS === 1) writer.prefetch(evs, i, Math.min(evs.length, i + PREFETCH_REMOVALS));
          const got = writer.apply(evs[i]);
          expect(got.status).toBe('ok');
          const want = new KvIndexWriter(ref).apply(evs[i]);
          expect(got).toEqual(want);
        }
        // An engine forgotten by its namespace serves it again at its next event, as a resolution says.
        if (b % 37 === 0) {
          const gone = engines[Math.floor(rnd() * engines.length)].id;
          writer.forget(gone, 'default');
          new KvIndexWriter(ref).forget(gone, 'default');
        }
        // A purge changes the generation: every memo resolves again (the holder id may be reused).
        if (b % 53 === 52) {
          const gone = engines[Math.floor(rnd() * engines.length)];
          writer.purge({ backend: gone.id });
          new KvIndexWriter(ref).purge({ backend: gone.id });
          gone.held = [];
        }
        expect([...ix.namespace(NS).instances].sort()).toEqual([...ref.namespace(NS).instances].sort());
        if (b % 25 === 0) expect(dumpIndex(ix, 0)).toEqual(dumpIndex(ref, 0));
      }
      expect(dumpIndex(ix, 0)).toEqual(dumpIndex(ref, 0));
      expect(ix.stats()).toEqual(ref.stats());
      // And both hold what each engine holds (its LRU): every removal took its block.
      const index = ix.namespace(NS).index;
      for (const e of engines) {
        const blocks = index.holderBlocks(index.holder(e.id, 0, 'GPU')).map((b) => b.engineHash);
        expect(new Set(blocks)).toEqual(new Set(e.held));
      }
      expect(ix.stats().records).toBeGreaterThan(300);
      expect(prefetched.calls).toBeGreaterThan(100);
    });
  }
});
