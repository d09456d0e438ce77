// Hit rule of hybrid KV-cache groups (src/indexer/groups.ts), hand-worked per group kind, and the
// path from normalized events through the applier to the scheduler's overlaps.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decodeBatch, encodeBatch, encodeOp } from '../../src/cluster/event-wire.js';
import { indexSnapshotFromJson } from '../../src/cluster/snapshot-json.js';
import { parseJson, stringifyJson } from '../../src/common/json.js';
import { seqHashes } from '../../src/hashing/index.js';
import { dumpIndex, type IndexSnapshot, restoreIndex } from '../../src/indexer/snapshot.js';
import { EventApplier } from '../../src/indexer/apply.js';
import { KvGroups } from '../../src/indexer/groups.js';
import type { KvCacheGroup, KvEvent, StoredEvent } from '../../src/indexer/kv-event.js';
import { TieredIndexer } from '../../src/indexer/namespaces.js';
import type { CostWeights } from '../../src/scheduler/cost.js';
import { type RouteInput, Scheduler } from '../../src/scheduler/scheduler.js';
import { TIER_BIT } from '../../src/indexer/tiers.js';

const BS = 16;
// Eight blocks' router seq hashes of a prompt; stand-ins are fine for the rule itself.
const SEQ = BigUint64Array.from([11n, 12n, 13n, 14n, 15n, 16n, 17n, 18n]);
const swa = (window: number, blockSize = BS): KvCacheGroup => ({ idx: 1, kind: 'sliding_window', window, blockSize });
const mamba = (blockSize = BS, idx = 2): KvCacheGroup => ({ idx, kind: 'mamba', window: 0, blockSize });
const DEV = TIER_BIT.GPU;

/** Groups of instance 'a' holding the given block positions of SEQ in one group. */
function holding(
  group: KvCacheGroup,
  positions: number[],
  medium: 'GPU' | 'CPU' = 'GPU',
  g = new KvGroups(),
): KvGroups {
  const router = BigUint64Array.from(positions.map((p) => SEQ[p]));
  g.store(
    'a',
    'a',
    0,
    medium,
    group,
    BS,
    router,
    Array.from(router, (h) => h + 1000n),
  );
  return g;
}

describe('sliding window: the last ceil((W-1)/block) blocks before the hit end', () => {
  it('W = 33 tokens, 16-token blocks: 2 blocks must precede the end', () => {
    // Held 0 1 . . 4 5 . . ; full-attention hit 8. Scanning down from 8: 7 and 6 missing, 5 and 4
    // held -> the hit ends at 6.
    const g = holding(swa(33), [0, 1, 4, 5]);
    expect(g.clamp('a', 0, SEQ, 8, 8, DEV)).toBe(6);
    // The full-attention hit stops at 5: blocks 4 and 3 before it; 3 missing, 4 held but alone;
    // then 1 and 0 -> 2.
    expect(g.clamp('a', 0, SEQ, 5, 8, DEV)).toBe(2);
    // The engine reuses at most the prompt less its last token: maxBlocks caps first.
    expect(g.clamp('a', 0, SEQ, 8, 5, DEV)).toBe(2);
  });

  it('a held run shorter than the window counts when it reaches block 0', () => {
    // W = 65: 4 blocks needed; only blocks 0 and 3 held -> the run from 0 is 1 block long.
    expect(holding(swa(65), [0, 3]).clamp('a', 0, SEQ, 5, 8, DEV)).toBe(1);
    // Nothing held at all: no hit.
    expect(holding(swa(65), []).clamp('a', 0, SEQ, 5, 8, DEV)).toBe(0);
  });

  it('W = 17 needs exactly one block (ceil(16/16)); W = 1 needs none', () => {
    expect(holding(swa(17), [2]).clamp('a', 0, SEQ, 6, 8, DEV)).toBe(3);
    expect(holding(swa(1), []).clamp('a', 0, SEQ, 6, 8, DEV)).toBe(6);
  });

  it('an inflated group block (64 tokens = 4 router blocks) needs whole group blocks', () => {
    // W = 100 -> ceil(99/64) = 2 group blocks = 8 router blocks before the end.
    const g = holding(swa(100, 64), [0, 1, 2, 3, 4, 5, 6, 7]);
    expect(g.clamp('a', 0, SEQ, 8, 8, DEV)).toBe(8);
    const h = holding(swa(100, 64), [4, 5, 6, 7]);
    expect(h.clamp('a', 0, SEQ, 8, 8, DEV)).toBe(0);
  });

  it('reads only the tiers of the level asked: a block on the host counts for host, not device', () => {
    const g = holding(swa(33), [0, 1, 2, 3]);
    holding(swa(33), [4, 5], 'CPU', g);
    expect(g.clamp('a', 0, SEQ, 6, 8, DEV)).toBe(4);
    expect(g.clamp('a', 0, SEQ, 6, 8, TIER_BIT.GPU | TIER_BIT.CPU)).toBe(6);
  });
});

describe('Mamba: the hit ends at a stored state block', () => {
  it('the largest end at or below the hit whose state is held', () => {
    // States after blocks 2 and 5 (ends 3 and 6).
    const g = holding(mamba(), [2, 5]);
    expect(g.clamp('a', 0, SEQ, 8, 8, DEV)).toBe(6);
    expect(g.clamp('a', 0, SEQ, 5, 8, DEV)).toBe(3);
    expect(g.clamp('a', 0, SEQ, 2, 8, DEV)).toBe(0);
  });

  it('an inflated state block (64 tokens) keeps only its last router block as the checkpoint', () => {
    // One event of two 64-token state blocks = 8 router blocks: states end at 4 and 8.
    const g = holding(mamba(64), [0, 1, 2, 3, 4, 5, 6, 7]);
    expect(g.clamp('a', 0, SEQ, 8, 8, DEV)).toBe(8);
    expect(g.clamp('a', 0, SEQ, 7, 8, DEV)).toBe(4);
    expect(g.clamp('a', 0, SEQ, 3, 8, DEV)).toBe(0);
    // Removing the second state block (named by its engine id) leaves the first.
    g.remove('a', 0, 'GPU', 2, [SEQ[7] + 1000n]);
    expect(g.clamp('a', 0, SEQ, 8, 8, DEV)).toBe(4);
  });
});

describe('several groups: the largest end every group accepts', () => {
  it('iterates to the fixed point (SWA 2 blocks + Mamba)', () => {
    // SWA holds 0..3; Mamba states end at 3 and 6. Mamba: 8 -> 6; SWA at 6: 5,4 missing, 3,2 held
    // -> 4; Mamba at 4: no state ends at 4, one ends at 3 -> 3; SWA at 3: 2,1 held -> 3.
    const g = holding(swa(33), [0, 1, 2, 3]);
    holding(mamba(), [2, 5], 'GPU', g);
    expect(g.clamp('a', 0, SEQ, 8, 8, DEV)).toBe(3);
  });

  it('only the candidate that has groups is clamped; purges forget them', () => {
    const g = holding(swa(33), [0, 1]);
    expect(g.clamp('b', 0, SEQ, 8, 8, DEV)).toBe(8);
    expect(g.clamp('a', 1, SEQ, 8, 8, DEV)).toBe(8);
    expect(g.clamp('a', 0, SEQ, 8, 8, DEV)).toBe(2);
    expect(g.empty).toBe(false);
    g.clear('a');
    expect(g.empty).toBe(true);
    expect(g.clamp('a', 0, SEQ, 8, 8, DEV)).toBe(8);
  });
});

// --- Through the applier and the scheduler -----------------------------------------------------

const TOKENS = Uint32Array.from({ length: 8 * BS + 5 }, (_, i) => 1000 + i);

function stored(
  blocks: [number, number],
  group?: KvCacheGroup,
  over: Partial<StoredEvent> = {},
  engine = (i: number) => 5000n + BigInt(i),
): StoredEvent {
  const [from, to] = blocks;
  const ev: StoredEvent = {
    model_name: 'm',
    block_size: BS,
    additional_salt: null,
    lora_name: null,
    tenant_id: 'default',
    backend_id: 'a',
    medium: null,
    dp_rank: 0,
    event_id: null,
    timestamp: null,
    event_type: 'stored',
    seq_hashes: Array.from({ length: to - from }, (_, k) => engine(from + k)),
    base_block_idx: from === 0 ? 0 : null,
    parent_hash: from === 0 ? null : engine(from - 1),
    token_ids: TOKENS.slice(from * BS, to * BS),
    ...over,
  };
  if (group) ev.group = group;
  return ev;
}

function deviceHit(indexer: TieredIndexer, candidates = [{ instance: 'a', dpRank: 0 }]): number[] {
  const weights: CostWeights = {
    model: 'blocks',
    overlapWeight: 1,
    medium: { cpu: 0.5, disk: 0.25, shared: 0.5 },
    trackActiveBlocks: true,
    decodeInterference: 0,
  };
  const s = new Scheduler(indexer, () => 0.5);
  const input: RouteInput = {
    ns: { model: 'm', blockSize: BS, loraName: null, salt: null, tenant: 'default' },
    tokens: TOKENS,
    candidates,
    policy: 'kv',
    weights,
    temperature: 0,
  };
  return s.score(input, 0).candidates.map((c) => c.indexedBlocks);
}

function apply(indexer: TieredIndexer, events: KvEvent[]): void {
  const a = new EventApplier(indexer);
  for (const ev of events) {
    const out = a.apply(ev);
    expect(out.status, out.reason).toBe('ok');
  }
}

describe('applier and query', () => {
  it('a single-group engine is answered exactly as before: no groups object, the full prefix', () => {
    const idx = new TieredIndexer();
    apply(idx, [stored([0, 8])]);
    const ns = idx.find({ model: 'm', blockSize: BS })!;
    expect(ns.groups).toBeNull();
    expect(idx.queryTokens(ns.id, TOKENS, 0).candidates[0].device).toBe(8);
  });

  it('sliding-window blocks re-hashed to router hashes clamp the query; full_attention mode ignores them', () => {
    for (const mode of ['all', 'full_attention'] as const) {
      const idx = new TieredIndexer({ kvCacheGroups: mode });
      // Full attention holds 0..7; the window group (W = 33: 2 blocks) holds 0..3 only (4..7 evicted).
      apply(idx, [stored([0, 8]), stored([0, 4], swa(33))]);
      const ns = idx.find({ model: 'm', blockSize: BS })!;
      const hit = idx.queryTokens(ns.id, TOKENS, 0).candidates[0].device;
      expect(hit).toBe(mode === 'all' ? 4 : 8);
      expect(ns.groups === null).toBe(mode === 'full_attention');
    }
  });

  it('removals by engine hash, and the group parent resolved through the prefix index', () => {
    const idx = new TieredIndexer();
    // The window group's blocks 4..7 arrive in a later event naming block 3 as parent, which only
    // the full-attention group stored: they must hash to the same router hashes as the prompt's.
    apply(idx, [stored([0, 8]), stored([0, 2], swa(33)), stored([4, 8], swa(33))]);
    const ns = idx.find({ model: 'm', blockSize: BS })!;
    expect(idx.queryTokens(ns.id, TOKENS, 0).candidates[0].device).toBe(8);
    const removed: KvEvent = {
      ...stored([0, 1]),
      event_type: 'removed',
      seq_hashes: [5007n, 5006n],
      group: swa(33),
    } as KvEvent;
    apply(idx, [removed]);
    // 7 and 6 gone: 5 and 4 are the last two before 6.
    expect(idx.queryTokens(ns.id, TOKENS, 0).candidates[0].device).toBe(6);
    const seq = seqHashes(TOKENS, BS, ns.space);
    expect(ns.groups!.clamp('a', 0, seq, 8, 8, DEV)).toBe(6);
  });

  it('the scheduler credits the clamped prefix, and a purge of the backend drops its groups', () => {
    const idx = new TieredIndexer();
    apply(idx, [stored([0, 8]), stored([2, 3], mamba(), {}), stored([0, 8], undefined, { backend_id: 'b' })]);
    const hits = deviceHit(idx, [
      { instance: 'a', dpRank: 0 },
      { instance: 'b', dpRank: 0 },
    ]);
    expect(hits).toEqual([3, 8]);
    idx.removeBackend('a');
    expect(idx.find({ model: 'm', blockSize: BS })!.groups!.empty).toBe(true);
  });
});

describe('relayed events (kvrouter relay -> JetStream -> routers)', () => {
  it('keep their KV-cache group, so a relay consumer indexes a window block as a window block', () => {
    const ev = stored([0, 2], swa(33));
    const removed = { ...stored([0, 1]), event_type: 'removed', seq_hashes: [5000n], group: mamba(64) } as KvEvent;
    const plain = stored([0, 2]);
    const back = decodeBatch(
      encodeBatch(
        'r',
        [ev, removed, plain].map((event) => encodeOp({ op: 'event', event })),
      ),
    ).ops.map((o) => (o.op === 'event' ? o.event : null));
    expect((back[0] as StoredEvent).group).toEqual(swa(33));
    expect((back[1] as KvEvent & { group?: KvCacheGroup }).group).toEqual(mamba(64));
    expect((back[2] as StoredEvent).group).toBeUndefined();
  });
});

describe('co-location on hybrid instances', () => {
  it('keys a new session past the full-attention prefix every instance holds, not on the shared system prompt', () => {
    // Four instances hold a 16-block system prompt (full attention) but no Mamba state at its end,
    // so no instance can reuse it. Sessions differ after it: they must not all meet on one instance.
    const ns = { model: 'm', blockSize: 4, loraName: null, salt: null, tenant: 'default' };
    const cands = ['a', 'b', 'c', 'd'].map((instance) => ({ instance, dpRank: 0 }));
    const system = Array.from({ length: 64 }, (_, i) => i + 1);
    const prompt = (q: number) => [...system, ...Array.from({ length: 24 }, (_, i) => 500_000 + q * 100 + i)];
    const idx = new TieredIndexer();
    const n = idx.namespace(ns);
    const seq = seqHashes(system, 4, n.space);
    for (const c of cands) {
      n.index.store(n.index.holder(c.instance, 0, 'GPU'), seq);
      n.hybridGroups().store(c.instance, c.instance, 0, 'GPU', mamba(4), 4, BigUint64Array.of(42n), [42n]);
    }
    const weights: CostWeights = {
      model: 'time',
      overlapWeight: 1,
      medium: { cpu: 0.5, disk: 0.25, shared: 0.5 },
      trackActiveBlocks: true,
      decodeInterference: 0,
    };
    const s = new Scheduler(idx, () => 0.5);
    const picks = new Set<string>();
    for (let q = 0; q < 12; q++) {
      const d = s.decide(
        {
          ns,
          candidates: cands,
          tokens: prompt(q),
          policy: 'kv',
          weights,
          temperature: 0,
          prefixAffinity: 0.5,
          affinityBlocks: 4,
        },
        0,
      );
      expect(d.chosen!.indexedBlocks).toBe(0);
      expect(d.chosen!.hybridPrefix).toBe(16);
      picks.add(d.chosen!.instance);
    }
    expect(picks.size).toBeGreaterThan(1);
  });
});

describe('snapshots (GET /dump, peer recovery)', () => {
  it('carry the groups: a restored index clamps as the original, through JSON', () => {
    const idx = new TieredIndexer();
    apply(idx, [stored([0, 8]), stored([0, 4], swa(33))]);
    const ns = idx.find({ model: 'm', blockSize: BS })!;
    expect(idx.queryTokens(ns.id, TOKENS, 0).candidates[0].device).toBe(4);
    const wire = stringifyJson(dumpIndex(idx, 0));
    const copy = new TieredIndexer();
    restoreIndex(copy, parseJson(wire) as unknown as IndexSnapshot, 0);
    expect(copy.queryTokens(ns.id, TOKENS, 0).candidates[0].device).toBe(4);
    // A removal by engine hash still finds its block in the restored copy: block 3 gone, the last
    // two blocks before 3 (1 and 2) are held.
    const removed = { ...stored([0, 1]), event_type: 'removed', seq_hashes: [5003n], group: swa(33) } as KvEvent;
    apply(copy, [removed]);
    expect(copy.queryTokens(ns.id, TOKENS, 0).candidates[0].device).toBe(3);
    // A full-attention-only index ignores them.
    const fa = new TieredIndexer({ kvCacheGroups: 'full_attention' });
    restoreIndex(fa, parseJson(wire) as unknown as IndexSnapshot, 0);
    expect(fa.queryTokens(ns.id, TOKENS, 0).candidates[0].device).toBe(8);
  });
});

describe('snapshots through the JSON reader of peer recovery and relay snapshots (indexSnapshotFromJson)', () => {
  const dumped = (): { idx: TieredIndexer; wire: string } => {
    const idx = new TieredIndexer();
    apply(idx, [stored([0, 8]), stored([0, 4], swa(33))]);
    return { idx, wire: stringifyJson(dumpIndex(idx, 0)) };
  };

  it('keep the groups: the recovered index clamps as the original', () => {
    const { idx, wire } = dumped();
    const ns = idx.find({ model: 'm', blockSize: BS })!;
    const copy = new TieredIndexer();
    restoreIndex(copy, indexSnapshotFromJson(parseJson(wire)), 0);
    expect(copy.queryTokens(ns.id, TOKENS, 0).candidates[0].device).toBe(4);
    // Removals by engine id still find the group's blocks (block 3 gone: the hit ends at 3).
    const removed = { ...stored([0, 1]), event_type: 'removed', seq_hashes: [5003n], group: swa(33) } as KvEvent;
    apply(copy, [removed]);
    expect(copy.queryTokens(ns.id, TOKENS, 0).candidates[0].device).toBe(3);
  });

  it('read a dump from before groups existed (no groups key) as before', () => {
    const { idx, wire } = dumped();
    const old = parseJson(wire) as { namespaces: Array<Record<string, unknown>> };
    for (const n of old.namespaces) delete n.groups;
    const snap = indexSnapshotFromJson(old as unknown as Parameters<typeof indexSnapshotFromJson>[0]);
    expect(snap.namespaces[0].groups).toBeUndefined();
    const copy = new TieredIndexer();
    restoreIndex(copy, snap, 0);
    expect(copy.queryTokens(idx.find({ model: 'm', blockSize: BS })!.id, TOKENS, 0).candidates[0].device).toBe(8);
  });

  it('reject a group spec or lists the clamp cannot use, naming the field', () => {
    const bad: Array<[(g: Record<string, unknown>) => void, RegExp]> = [
      [(g) => ((g.group as Record<string, unknown>).window = -4), /window/],
      [(g) => ((g.group as Record<string, unknown>).blockSize = 0), /blockSize/],
      [(g) => ((g.group as Record<string, unknown>).kind = 'chunked_local_attention'), /kind/],
      [(g) => (g.tiers = [1]), /tiers/],
      [(g) => (g.tiers = (g.tiers as number[]).map(() => 64)), /tiers/],
      [(g) => (g.engine_seq_hashes = []), /engine_seq_hashes/],
      [(g) => (g.seq_hashes = ['x']), /seq_hashes/],
    ];
    for (const [spoil, msg] of bad) {
      const snap = parseJson(dumped().wire) as { namespaces: Array<{ groups: Array<Record<string, unknown>> }> };
      spoil(snap.namespaces[0].groups[0]);
      expect(() => indexSnapshotFromJson(snap as unknown as Parameters<typeof indexSnapshotFromJson>[0])).toThrow(msg);
    }
  });
});

describe('the window scan that skips answers as vLLM block by block scan', () => {
  /** SlidingWindowManager.find_longest_cache_hit, transcribed: right to left, one block at a time. */
  function reference(held: Set<number>, need: number, c: number): number {
    let run = 0;
    for (let i = c - 1; i >= 0; i--) {
      if (held.has(i)) {
        if (++run >= need) return i + need;
      } else run = 0;
    }
    return run;
  }

  it('on random held sets, windows and hit ends', () => {
    const seq = BigUint64Array.from({ length: 48 }, (_, i) => 100n + BigInt(i));
    fc.assert(
      fc.property(
        fc.array(fc.boolean(), { minLength: 48, maxLength: 48 }),
        fc.integer({ min: 1, max: 8 }),
        fc.integer({ min: 0, max: 48 }),
        (bits, needBlocks, c) => {
          const positions = bits.flatMap((b, i) => (b ? [i] : []));
          const g = new KvGroups();
          const router = BigUint64Array.from(positions.map((p) => seq[p]));
          g.store('a', 'a', 0, 'GPU', swa(needBlocks * BS, BS), BS, router, Array.from(router));
          // W = need x 16 tokens: ceil((W - 1) / 16) = need blocks.
          expect(g.clamp('a', 0, seq, c, 48, DEV)).toBe(c === 0 ? 0 : reference(new Set(positions), needBlocks, c));
        },
      ),
      { numRuns: 2000 },
    );
  });
});

describe('backend bindings', () => {
  it('a backend rebound to another instance takes its groups along', () => {
    const idx = new TieredIndexer();
    apply(idx, [stored([0, 8]), stored([0, 4], swa(33))]);
    const ns = idx.find({ model: 'm', blockSize: BS })!;
    idx.bindBackend('a', 'x');
    const seq = seqHashes(TOKENS, BS, ns.space);
    expect(ns.groups!.clamp('x', 0, seq, 8, 8, DEV)).toBe(4);
    expect(ns.groups!.clamp('a', 0, seq, 8, 8, DEV)).toBe(8);
    expect(idx.queryTokens(ns.id, TOKENS, 0).candidates.map((c) => [c.instance, c.device])).toEqual([['x', 4]]);
  });
});

describe('group parents', () => {
  it('a window block names a parent the group already evicted, in ids the full-attention group does not use', () => {
    // Full attention names its blocks 9000+i, the window group 5000+i (a group block size of its own
    // gives the group other engine ids); the group evicts 0..3 before 4..5 arrive naming 3 as parent.
    const idx = new TieredIndexer();
    const fa = (i: number) => 9000n + BigInt(i);
    const gone = { ...stored([0, 1]), event_type: 'removed', seq_hashes: [5000n, 5001n, 5002n, 5003n], group: swa(33) };
    apply(idx, [stored([0, 8], undefined, {}, fa), stored([0, 4], swa(33)), gone as KvEvent, stored([4, 6], swa(33))]);
    const ns = idx.find({ model: 'm', blockSize: BS })!;
    // Blocks 4 and 5 are the last two before 6: a hit of 6 (their router hashes are the prompt's).
    expect(idx.queryTokens(ns.id, TOKENS, 0).candidates[0].device).toBe(6);
  });
});
