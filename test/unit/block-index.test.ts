import { describe, expect, it } from 'vitest';
import { BlockIndex } from '../../src/indexer/block-index.js';
import { U64Table } from '../../src/indexer/u64-table.js';

const H = (...xs: Array<number | bigint>) => BigUint64Array.from(xs.map((x) => BigInt(x)));
const overlap = (idx: BlockIndex, q: BigUint64Array, now = 0) =>
  Object.fromEntries(
    idx.query(q, now).candidates.map((c) => [`${c.instance}/${c.dpRank}`, [c.device, c.host, c.disk]]),
  );

describe('U64Table', () => {
  it('inserts, finds, and deletes with backward shift across growth', () => {
    const t = new U64Table(4, 4);
    const keys: Array<[number, number]> = [];
    for (let i = 0; i < 5000; i++) keys.push([(i * 2654435761) | 0, i & 7]);
    keys.forEach(([lo, hi], i) => {
      const s = t.insert(lo, hi);
      expect(t.created).toBe(true);
      t.data[s * 4 + 3] = i;
    });
    expect(t.size).toBe(5000);
    expect(t.insert(keys[9][0], keys[9][1]) >= 0 && t.created).toBe(false);
    keys.forEach(([lo, hi], i) => {
      expect(t.data[t.find(lo, hi) * 4 + 3]).toBe(i);
    });
    for (let i = 0; i < 5000; i += 2) t.removeSlot(t.find(keys[i][0], keys[i][1]));
    expect(t.size).toBe(2500);
    keys.forEach(([lo, hi], i) => {
      const s = t.find(lo, hi);
      if (i % 2) expect(t.data[s * 4 + 3]).toBe(i);
      else expect(s).toBe(-1);
    });
    expect(t.find(1, 1 << 30)).toBe(-1);
  });
});

describe('BlockIndex tiers and ranks', () => {
  it('reports cumulative device <= host <= disk prefixes per dp rank', () => {
    const idx = new BlockIndex();
    const q = H(1, 2, 3, 4, 5);
    idx.store(idx.holder('w0', 0, 'GPU'), H(1, 2));
    idx.store(idx.holder('w0', 0, 'CPU'), H(2, 3, 4));
    idx.store(idx.holder('w0', 0, 'DISK'), H(5));
    idx.store(idx.holder('w0', 1, 'GPU'), H(1));
    expect(overlap(idx, q)).toEqual({ 'w0/0': [2, 4, 5], 'w0/1': [1, 1, 1] });
  });

  it('a hole ends every level; a block on a lower tier only still counts for that level', () => {
    const idx = new BlockIndex();
    idx.store(idx.holder('w', 0, 'GPU'), H(1, 3));
    idx.store(idx.holder('w', 0, 'DISK'), H(2));
    expect(overlap(idx, H(1, 2, 3))).toEqual({ 'w/0': [1, 1, 3] });
    expect(overlap(idx, H(2, 3))).toEqual({ 'w/0': [0, 0, 2] });
  });

  it('a shared pool is reported separately and not credited to an instance', () => {
    const idx = new BlockIndex();
    idx.bindBackend('store', null);
    idx.store(idx.holder('store', 0, 'CPU'), H(1, 2, 3));
    idx.store(idx.holder('w', 0, 'GPU'), H(1));
    const r = idx.query(H(1, 2, 3, 4), 0);
    expect(r.sharedBlocks).toBe(3);
    expect(r.candidates).toEqual([{ instance: 'w', dpRank: 0, device: 1, host: 1, disk: 1 }]);
  });

  it('backends bound to another instance credit that instance', () => {
    const idx = new BlockIndex();
    idx.store(idx.holder('daemon-1', 0, 'CPU'), H(1, 2));
    idx.bindBackend('daemon-1', 'engine-a');
    expect(overlap(idx, H(1, 2))).toEqual({ 'engine-a/0': [0, 2, 2] });
  });

  it('limits the query to a set of instances', () => {
    const idx = new BlockIndex();
    idx.store(idx.holder('a', 0, 'GPU'), H(1));
    idx.store(idx.holder('b', 0, 'GPU'), H(1));
    expect(idx.query(H(1), 0, new Set(['b'])).candidates.map((c) => c.instance)).toEqual(['b']);
  });
});

describe('BlockIndex writes', () => {
  it('removes, clears and frees entries', () => {
    const idx = new BlockIndex();
    const g = idx.holder('w', 0, 'GPU');
    expect(idx.store(g, H(1, 2, 3))).toBe(3);
    expect(idx.store(g, H(1, 2, 3))).toBe(0); // duplicate store
    expect(idx.remove(g, H(2, 99))).toBe(1);
    expect(overlap(idx, H(1, 2, 3))).toEqual({ 'w/0': [1, 1, 1] });
    expect(idx.clearHolder(g)).toBe(2);
    expect(idx.stats()).toMatchObject({ blocks: 0, records: 0 });
  });

  it('maps engine hashes to router hashes for removal and parent resolution (dual key)', () => {
    const idx = new BlockIndex();
    const g = idx.holder('w', 0, 'GPU');
    const c = idx.holder('w', 0, 'CPU');
    idx.store(g, H(101, 102), H(9001, 9002));
    expect(idx.resolve(g, 9002n)).toBe(102n);
    expect(idx.resolve(c, 9002n)).toBe(102n); // same backend and rank, other medium
    expect(idx.resolve(idx.holder('other', 0, 'GPU'), 9002n)).toBeNull();
    idx.store(c, H(102), H(9002)); // offload copy
    expect(idx.remove(g, H(9002))).toBe(1); // GPU copy evicted, CPU copy stays
    expect(idx.resolve(g, 9002n)).toBe(102n);
    expect(overlap(idx, H(101, 102))).toEqual({ 'w/0': [1, 2, 2] });
    expect(idx.remove(c, H(9002))).toBe(1);
    expect(idx.resolve(g, 9002n)).toBeNull();
  });

  it("an engine hash's row never outlives its record (re-stored under a new hash, freed, the record reused)", () => {
    const idx = new BlockIndex();
    const g = idx.holder('w', 0, 'GPU');
    idx.store(g, H(1), H(11));
    idx.store(g, H(1), H(12)); // the engine re-published block 1 under another hash: the latest store's is the block's
    expect(idx.resolve(g, 12n)).toBe(1n);
    expect(idx.resolve(g, 11n)).toBeNull();
    expect(idx.remove(g, H(12))).toBe(1);
    idx.store(g, H(2), H(21)); // takes the freed record
    expect(idx.resolve(g, 11n)).toBeNull();
    expect(idx.resolve(g, 12n)).toBeNull();
    expect(idx.remove(g, H(11, 12))).toBe(0);
    expect(overlap(idx, H(2))).toEqual({ 'w/0': [1, 1, 1] });
    expect(idx.resolve(g, 21n)).toBe(2n);
  });

  it('holds a fleet-shaped dual-key index in <= 100 bytes per (block, holder)', () => {
    // 256 engines x 4,400 blocks (the 1,024 x 10,000 fleet's per engine): a shared 64-block prefix,
    // then chains of their own; every block under an engine hash that differs from the router's.
    const idx = new BlockIndex();
    const prefix = Array.from({ length: 64 }, (_, i) => BigInt(i + 1));
    for (let e = 0; e < 256; e++) {
      const h = idx.holder(`e${e}`, 0, 'GPU');
      const own = Array.from({ length: 4400 - 64 }, (_, i) => BigInt(1e6 + e * 1e5 + i));
      const seq = BigUint64Array.from([...prefix, ...own]);
      idx.store(
        h,
        seq,
        seq.map((x) => x ^ 0x5555_5555_5555n),
      );
    }
    const s = idx.stats();
    expect(s.records).toBe(256 * 4400);
    expect(s.bytes / s.records).toBeLessThanOrEqual(100);
  });

  it('clearing one medium forgets engine hashes only that medium held', () => {
    const idx = new BlockIndex();
    const g = idx.holder('w', 0, 'GPU');
    const c = idx.holder('w', 0, 'CPU');
    idx.store(g, H(1, 2), H(11, 12));
    idx.store(c, H(1), H(11));
    idx.clearHolder(g);
    expect(idx.resolve(c, 11n)).toBe(1n);
    expect(idx.resolve(c, 12n)).toBeNull();
  });

  it('speculative entries count as device blocks until they expire, and confirmed stores replace them', () => {
    const idx = new BlockIndex();
    const s = idx.speculativeHolder('w', 0, 2000);
    idx.store(s, H(1, 2, 3), null, 2000);
    expect(overlap(idx, H(1, 2, 3), 1999)).toEqual({ 'w/0': [3, 3, 3] });
    expect(overlap(idx, H(1, 2, 3), 2000)).toEqual({});
    idx.store(idx.holder('w', 0, 'GPU'), H(1));
    expect(idx.holderInfo(s).blocks).toBe(2);
    expect(idx.expire(1500)).toBe(0);
    expect(idx.expire(2000)).toBe(2);
    expect(idx.stats()).toMatchObject({ blocks: 1, records: 1 });
  });

  it('refreshing a speculative entry extends it', () => {
    const idx = new BlockIndex();
    const s = idx.speculativeHolder('w', 0, 1000);
    idx.store(s, H(1, 2), null, 1000);
    idx.store(s, H(1), null, 5000);
    expect(idx.expire(1000)).toBe(1);
    expect(overlap(idx, H(1), 4000)).toEqual({ 'w/0': [1, 1, 1] });
  });

  it('adjacent speculative blocks with different expiries are judged one by one', () => {
    const idx = new BlockIndex();
    const s = idx.speculativeHolder('w', 0, 1000);
    idx.store(s, H(1, 2, 3), null, 1000);
    idx.store(s, H(1), null, 3000); // re-routed with a shorter prompt: only block 1 refreshed
    expect(overlap(idx, H(1, 2, 3), 2000)).toEqual({ 'w/0': [1, 1, 1] });
    expect(overlap(idx, H(1, 2, 3), 500)).toEqual({ 'w/0': [3, 3, 3] });
  });

  it("a withdrawn speculative insert takes only its own claims: served and in-flight inserts' blocks stay, and so do confirmed ones", () => {
    const idx = new BlockIndex();
    const q = H(1, 2, 3, 4, 5, 6);
    // A served request claimed blocks 1-2; a later attempt claims 1-4 and fails: 3-4 go, 1-2 stay.
    idx.speculate('w', 0, H(1, 2), 1000, 0);
    const failed = idx.speculate('w', 0, H(1, 2, 3, 4), 1000, 10);
    expect(overlap(idx, q, 20)).toEqual({ 'w/0': [4, 4, 4] });
    expect(idx.withdrawSpeculative('w', 0, H(1, 2, 3, 4), failed, 20)).toBe(2);
    expect(overlap(idx, q, 20)).toEqual({ 'w/0': [2, 2, 2] });
    // Two in flight with the same prompt: the first failure leaves the other's claim; the second removes it.
    const x = idx.speculate('w', 0, H(1, 2, 3, 4, 5, 6), 1000, 30);
    const y = idx.speculate('w', 0, H(1, 2, 3, 4, 5, 6), 1000, 31);
    expect(idx.withdrawSpeculative('w', 0, H(1, 2, 3, 4, 5, 6), x, 40)).toBe(0);
    expect(overlap(idx, q, 40)).toEqual({ 'w/0': [6, 6, 6] });
    expect(idx.withdrawSpeculative('w', 0, H(1, 2, 3, 4, 5, 6), y, 40)).toBe(4);
    expect(overlap(idx, q, 40)).toEqual({ 'w/0': [2, 2, 2] });
    // The engine confirmed block 3 meanwhile: the failed insert cannot take it back.
    const z = idx.speculate('w', 0, H(1, 2, 3, 4), 1000, 50);
    idx.store(idx.holder('w', 0, 'GPU'), H(1, 2, 3));
    idx.withdrawSpeculative('w', 0, H(1, 2, 3, 4), z, 60);
    expect(overlap(idx, q, 60)).toEqual({ 'w/0': [3, 3, 3] });
    // Past its own expiry an insert has lapsed: what is alive then is a later insert's.
    const lapsed = idx.speculate('v', 0, H(1, 2), 100, 0);
    idx.speculate('v', 0, H(1, 2), 100, 90);
    expect(idx.withdrawSpeculative('v', 0, H(1, 2), lapsed, 100)).toBe(0);
    expect(overlap(idx, H(1, 2), 150)['v/0']).toEqual([2, 2, 2]);
  });

  it('long runs of blocks with the same holders still end exactly where a holder drops', () => {
    const idx = new BlockIndex();
    const run = Array.from({ length: 500 }, (_, i) => BigInt(i + 1));
    idx.store(idx.holder('a', 0, 'GPU'), H(...run));
    idx.store(idx.holder('b', 0, 'GPU'), H(...run.slice(0, 300)));
    idx.store(idx.holder('b', 0, 'CPU'), H(...run.slice(0, 400)));
    idx.remove(idx.holder('a', 0, 'GPU'), H(250n));
    idx.store(idx.holder('a', 0, 'DISK'), H(250n));
    expect(overlap(idx, H(...run))).toEqual({ 'a/0': [249, 249, 500], 'b/0': [300, 400, 400] });
  });

  it('removeInstance purges its backends and speculative entries; removeBackend one rank', () => {
    const idx = new BlockIndex();
    idx.store(idx.holder('a', 0, 'GPU'), H(1, 2));
    idx.store(idx.holder('a', 1, 'GPU'), H(1));
    idx.store(idx.speculativeHolder('a', 0, 10), H(5), null, 10);
    idx.store(idx.holder('b', 0, 'GPU'), H(1));
    expect(idx.removeBackend('a', 1)).toBe(1);
    expect(overlap(idx, H(1, 2))).toEqual({ 'a/0': [2, 2, 2], 'b/0': [1, 1, 1] });
    expect(idx.removeInstance('a')).toBe(3);
    expect(overlap(idx, H(1, 2))).toEqual({ 'b/0': [1, 1, 1] });
    // A purged holder is recreated cleanly on the next event.
    idx.store(idx.holder('a', 0, 'GPU'), H(1));
    expect(overlap(idx, H(1))).toEqual({ 'a/0': [1, 1, 1], 'b/0': [1, 1, 1] });
  });

  it('handles hashes above 2^63 exactly', () => {
    const idx = new BlockIndex();
    const big = (1n << 64n) - 5n;
    idx.store(idx.holder('w', 0, 'GPU'), H(big, big - 1n));
    expect(overlap(idx, H(big, big - 1n))).toEqual({ 'w/0': [2, 2, 2] });
    expect(idx.holderBlocks(idx.holder('w', 0, 'GPU')).map((b) => b.hash)).toEqual([big, big - 1n]);
  });
});

describe('EventApplier stream cache', () => {
  it('never writes into a purged holder whose id was reused by another stream', async () => {
    const { TieredIndexer } = await import('../../src/indexer/namespaces.js');
    const { EventApplier } = await import('../../src/indexer/apply.js');
    const indexer = new TieredIndexer();
    const ap = new EventApplier(indexer);
    const ev = (backend: string, hashes: bigint[]) => ({
      event_type: 'stored' as const,
      event_id: null,
      timestamp: null,
      model_name: 'm',
      block_size: 4,
      additional_salt: null,
      lora_name: null,
      tenant_id: 'default',
      backend_id: backend,
      medium: 'GPU',
      dp_rank: 0,
      seq_hashes: hashes,
      base_block_idx: 0,
      parent_hash: null,
      token_ids: null,
    });
    const ns = { model: 'm', blockSize: 4, loraName: null, salt: null, tenant: 'default' };
    const who = (h: bigint) => indexer.queryHashes(ns, BigUint64Array.of(h), 0).candidates.map((c) => c.instance);
    ap.apply(ev('x', [1n]));
    indexer.removeBackend('x'); // frees x's holder id while the applier still remembers it
    expect(ap.apply(ev('x', [4n]))).toEqual({ status: 'ok', blocks: 1 });
    expect(who(4n)).toEqual(['x']);
    indexer.removeBackend('x');
    ap.apply(ev('y', [2n])); // y reuses the freed id
    ap.apply(ev('x', [3n])); // must not land in y's holder
    expect(who(2n)).toEqual(['y']);
    expect(who(3n)).toEqual(['x']);
    expect(who(1n)).toEqual([]);
  });
});

describe('eviction awareness', () => {
  const seqA = H(...Array.from({ length: 10 }, (_, i) => 100 + i));
  const seqB = H(...Array.from({ length: 10 }, (_, i) => 200 + i));

  it('a holder that never evicted keeps every block, whatever is queued', () => {
    const idx = new BlockIndex();
    idx.store(idx.holder('a', 0, 'GPU'), seqA);
    expect(idx.survivingPrefix('a', 0, seqA, 10, 1_000_000)).toBe(10);
    expect(idx.survivingPrefix('nobody', 0, seqA, 10, 1_000_000)).toBe(10);
  });

  it('under LRU the oldest prefix goes first, and a routed-to prefix becomes the newest', () => {
    const idx = new BlockIndex();
    const h = idx.holder('a', 0, 'GPU');
    idx.store(h, seqA); // stored first: A9 oldest ... A0
    idx.store(h, seqB); // then B9 ... B0 newest; 20 blocks = the cache's size
    idx.remove(h, H(208n, 209n)); // evicted: 18 held, room for 2
    // Room absorbs two allocations.
    expect(idx.survivingPrefix('a', 0, seqA, 10, 2)).toBe(10);
    // Five allocations evict three: A9, A8, A7 truly (7 survive); the estimate counts the two
    // evicted blocks as newer too and keeps 5, erring on the cautious side.
    expect(idx.survivingPrefix('a', 0, seqA, 10, 5)).toBe(5);
    expect(idx.survivingPrefix('a', 0, seqB, 8, 5)).toBe(8);
    // Routing a request to A's prefix makes it the most recently used.
    idx.touch('a', 0, seqA, 10);
    expect(idx.survivingPrefix('a', 0, seqA, 10, 5)).toBe(10);
    // Re-use is not counted as newer for others (B truly keeps 5 of 8 here): touches of a hot
    // prefix never make the rest of the cache look evicted.
    expect(idx.survivingPrefix('a', 0, seqB, 8, 5)).toBe(8);
    for (let i = 0; i < 1000; i++) idx.touch('a', 0, seqA, 10);
    expect(idx.survivingPrefix('a', 0, seqB, 8, 3)).toBe(8);
    // More than the whole cache: nothing survives.
    expect(idx.survivingPrefix('a', 0, seqA, 10, 40)).toBe(0);
  });

  it('finds the instance through its backend binding, and a deeper newer block does not hide an older shallow one', () => {
    const idx = new BlockIndex();
    idx.bindBackend('pod-7', 'a');
    const h = idx.holder('pod-7', 0, 'GPU');
    idx.store(h, seqA.subarray(0, 5)); // A0..A4 first (older)
    idx.store(h, seqB); // 10 newer blocks
    idx.store(h, seqA.subarray(5)); // A5..A9 appended later: newer than A0..A4
    idx.remove(h, H(209n)); // evicted once: full
    // 19 held, room for 1; 4 allocations evict 3 of the oldest: A4, A3, A2, so 2 blocks survive
    // truly; the estimate (the evicted B9 counted as newer) keeps 1. Not 10: the newer A5..A9 do
    // not hide the older blocks before them.
    expect(idx.survivingPrefix('a', 0, seqA, 10, 4)).toBe(1);
  });
});
