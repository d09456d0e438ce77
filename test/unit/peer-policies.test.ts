// The peers' default algorithms, each held to an example worked by hand from its source's formula
// (the arithmetic is in the comments), and the pipeline they need: state across requests, the
// request text, the engines' gauges per candidate, a peer's own cost and prediction lifetime.
import { describe, expect, it } from 'vitest';
import { hashSpace, seqHashes } from '../../src/hashing/index.js';
import type { EngineLoad } from '../../src/engine-load/load-view.js';
import { TieredIndexer } from '../../src/indexer/namespaces.js';
import { codePoints, requestText } from '../../src/router/request-text.js';
import type { CostWeights } from '../../src/scheduler/cost.js';
import { aibrix } from '../../src/scheduler/policies/aibrix.js';
import { gie } from '../../src/scheduler/policies/gie.js';
import { llmD } from '../../src/scheduler/policies/llm-d.js';
import { llmDSticky, type StickyState } from '../../src/scheduler/policies/llm-d-sticky.js';
import { approxBlockHashes } from '../../src/scheduler/policies/parts/prefix-lru.js';
import { PrefixTable } from '../../src/scheduler/policies/parts/prefix-table.js';
import { TextTree } from '../../src/scheduler/policies/parts/text-tree.js';
import { sglang, type SglangState } from '../../src/scheduler/policies/sglang.js';
import type { PolicyContext, PolicySpec, RequestText } from '../../src/scheduler/policies/types.js';
import { vllmRouter } from '../../src/scheduler/policies/vllm-router.js';
import { type CandidateScore, type RouteInput, Scheduler } from '../../src/scheduler/scheduler.js';

const NS = { model: 'm', blockSize: 16, loraName: null, salt: null, tenant: 'default' };

/** A candidate as Scheduler.score makes it, zero but for what an example sets. */
function cand(
  instance: string,
  over: Partial<Omit<CandidateScore, 'load'>> & { load?: Partial<CandidateScore['load']> } = {},
): CandidateScore {
  const { load, ...rest } = over;
  return {
    instance,
    dpRank: 0,
    device: 0,
    host: 0,
    disk: 0,
    shared: 0,
    newBlocks: 0,
    creditedBlocks: 0,
    prefillBlocks: 0,
    decodeBlocks: 0,
    queueMs: 0,
    prefillMs: 0,
    ttftMs: 0,
    interferenceMs: 0,
    tokensPerS: 0,
    indexedBlocks: 0,
    distrusted: false,
    adapterLoadMs: 0,
    unbookedRequests: 0,
    engine: null,
    cost: 0,
    busy: false,
    ...rest,
    load: {
      activePrefillTokens: 0,
      activeAttention: 0,
      activeBlocks: 0,
      activeRequests: 0,
      decodingRequests: 0,
      decodingContext: 0,
      ...load,
    },
  };
}

const engine = (waiting: number, kvUsage: number): EngineLoad => ({ running: 0, waiting, kvUsage, at: 0 });

function context<S>(spec: PolicySpec<string, S>, state: S, over: Partial<PolicyContext<S>> = {}): PolicyContext<S> {
  return {
    temperature: 0,
    rand: () => 0,
    nextTurn: () => 0,
    sessionKey: null,
    target: null,
    prefixAffinity: 0,
    affinityBlocks: 4,
    loadBound: 0,
    loadBoundUnique: false,
    loadBoundNewSession: false,
    recomputeWeightSaturated: 0,
    affinityAny: false,
    seq: new BigUint64Array(0),
    tokens: null,
    isl: 0,
    ns: NS,
    text: null,
    now: 0,
    state,
    memo: null,
    ...over,
  };
}

let booked = 0;

/** Pick, then book the pick (or `bookOn`) as the Scheduler does; returns the picked instance. */
function route<S>(
  spec: PolicySpec<string, S>,
  state: S,
  c: CandidateScore[],
  over: Partial<PolicyContext<S>> = {},
  bookOn?: string,
): string {
  const ctx = context(spec, state, over);
  const i = spec.pick(c, ctx);
  const chosen = bookOn ? c.find((x) => x.instance === bookOn)! : c[i];
  spec.booked?.(state, { requestId: `r${++booked}`, chosen, memo: ctx.memo, isl: ctx.isl, now: ctx.now });
  return c[i].instance;
}

const chars = (s: string): RequestText => ({ kind: 'chars', symbols: codePoints(s) });

describe('dynamo (selector/default.rs)', () => {
  it("prices blocks with Dynamo's defaults whatever routing.cost_model says, and ignores the engines' gauges", () => {
    // Block size 4, a 32-token prompt (8 blocks). a holds blocks 0-5 on GPU and has a request in
    // flight (16 prefill tokens, 10 blocks); b holds all 8 on CPU only; c nothing.
    //   credit  a = 1.0 x 6 = 6        b = 0.75 x 8 = 6          c = 0
    //   prefill a = (16 + 32)/4 - 6 = 6   b = 32/4 - 6 = 2      c = 8
    //   decode  a = 10 + 8 new = 18    b = 0 + 8 = 8             c = 8
    //   cost    a = 24                 b = 10                    c = 16      -> b
    const ns = { ...NS, blockSize: 4 };
    const tokens = Array.from({ length: 32 }, (_, i) => 100 + i);
    const indexer = new TieredIndexer();
    const idx = indexer.namespace(ns).index;
    const seq = seqHashes(tokens, 4, hashSpace());
    idx.store(idx.holder('a', 0, 'GPU'), seq.subarray(0, 6));
    idx.store(idx.holder('b', 0, 'CPU'), seq.subarray(0, 8));
    const s = new Scheduler(indexer, () => 0);
    s.active.book(
      'x',
      'a',
      0,
      BigUint64Array.from({ length: 10 }, (_, i) => BigInt(9000 + i)),
      16,
      0,
    );
    // routing says: time model, overlap weight 5, no host credit; and the engines report a queue.
    const routing: CostWeights = {
      model: 'time',
      overlapWeight: 5,
      medium: { cpu: 0, disk: 0, shared: 0.5 },
      trackActiveBlocks: false,
      decodeInterference: 0.1,
    };
    const input: RouteInput = {
      ns,
      candidates: ['a', 'b', 'c'].map((instance) => ({ instance, dpRank: 0 })),
      tokens,
      policy: 'dynamo',
      weights: routing,
      temperature: 0,
      engineLoad: (i) => (i === 'b' ? engine(40, 0.95) : null),
      engineWeights: { waiting: 1, running: 1, kvUsageMs: 1000 },
    };
    const d = s.decide(input, 0);
    expect(d.candidates.map((c) => [c.instance, c.creditedBlocks, c.prefillBlocks, c.decodeBlocks, c.cost])).toEqual([
      ['a', 6, 6, 18, 24],
      ['b', 6, 2, 8, 10],
      ['c', 0, 8, 8, 16],
    ]);
    expect(d.chosen!.instance).toBe('b');
    // The gauges reach the candidate (for policies that read them) but not Dynamo's cost.
    expect(d.candidates[1].engine).toEqual(engine(40, 0.95));
    expect(d.candidates[1].unbookedRequests).toBe(0);
  });
});

describe('sglang (cache_aware.rs, CLI defaults)', () => {
  const fresh = () => sglang.createState!() as SglangState;
  const three = (a: number, b: number, c: number) => [
    cand('a', { load: { activeRequests: a } }),
    cand('b', { load: { activeRequests: b } }),
    cand('c', { load: { activeRequests: c } }),
  ];

  it('follows a matched prefix above 0.3, spills past 1.5 x and 64 over the mean, else takes the least loaded', () => {
    const s = fresh();
    // 1. Empty tree: rate 0 -> min (load, sent, index) = b (load 1, before c).
    expect(route(sglang, s, three(2, 1, 1), { text: chars('Hello world, tell me a story') })).toBe('b');
    // 2. "Hello world, tell me a joke": 23 of 27 characters match b's path, 23/27 = 0.85 > 0.3;
    //    b's load 1 <= 1.5 x mean 1.33 -> b.
    expect(route(sglang, s, three(2, 1, 1), { text: chars('Hello world, tell me a joke') })).toBe('b');
    // 3. Same text, b at 200 in flight: mean 66.7; 200 > 1.5 x 66.7 = 100 and 200 > 66.7 + 64 =
    //    130.7 -> min-load a (0, sent 0; c too, a comes first). The text is inserted for a.
    expect(route(sglang, s, three(0, 200, 0), { text: chars('Hello world, tell me a joke') })).toBe('a');
    // 4. The same text again: its holders are b and a now; the least loaded holder, a (0), wins.
    expect(route(sglang, s, three(0, 90, 1), { text: chars('Hello world, tell me a joke') })).toBe('a');
    // 5. "Hello, a completely different question" shares "Hello" (5 of 38 characters): 0.13 <= 0.3
    //    -> the least loaded: c (a 1, b 1, c 0).
    expect(route(sglang, s, three(1, 1, 0), { text: chars('Hello, a completely different question') })).toBe('c');
    // Requests sent (the min-load tie-break): b 2, a 2, c 1.
    expect([...s.sent.entries()].map(([k, v]) => [k.split('\u0000')[0], v])).toEqual([
      ['b', 2],
      ['a', 2],
      ['c', 1],
    ]);
  });

  it('matches token ids in whole 16-token pages (SMG over gRPC; the fleet simulator)', () => {
    const t = new TextTree(16);
    const base = Uint32Array.from({ length: 40 }, (_, i) => i);
    t.insert(base, 'w');
    // 35 tokens in common: 2 whole pages (32); input 40 -> rate 0.8.
    const probe = Uint32Array.from({ length: 40 }, (_, i) => (i < 35 ? i : 1000 + i));
    expect(t.match(probe)).toEqual({ matched: 32, input: 40, tenants: ['w'] });
    // 15 in common: no whole page.
    expect(t.match(Uint32Array.from({ length: 40 }, (_, i) => (i < 15 ? i : 1000 + i))).matched).toBe(0);
  });

  it('evicts the least recently routed leaves until the tree fits', () => {
    const t = new TextTree(1);
    t.insert(codePoints('abcdef'), 'x'); // x holds 6
    t.insert(codePoints('abcXYZ'), 'y'); // split: "abc" (x, y) + "def" (x) + "XYZ" (y): x 6, y 6
    t.insert(codePoints('abcdef'), 'x'); // x is the most recent now
    expect(t.size()).toBe(12);
    t.evict(9); // y's leaf "XYZ" is the oldest: y keeps "abc" (3); total 9
    expect(t.size()).toBe(9);
    expect(t.match(codePoints('abcXYZ'))).toEqual({ matched: 3, input: 6, tenants: ['x', 'y'] });
    t.evict(6); // y's "abc" is now y's leaf and the oldest: gone
    expect(t.match(codePoints('abcd')).tenants).toEqual(['x']);
    t.removeTenant('x');
    expect(t.size()).toBe(0);
    expect(t.match(codePoints('abcdef')).matched).toBe(0);
  });
});

describe('gie (defaults.go: queue 2, kv-cache-utilization 2, prefix-cache 3)', () => {
  // Block size 16 -> blocks of 64 characters. R is 256 characters: 4 blocks.
  const R = 'A'.repeat(64) + 'B'.repeat(64) + 'C'.repeat(64) + 'D'.repeat(64);
  const seeded = () => {
    const idx = gie.createState!() as ReturnType<NonNullable<typeof gie.createState>>;
    const pods = [cand('a'), cand('b'), cand('c')];
    // a was sent a prompt sharing R's first 3 blocks, b one sharing its first block.
    route(gie, idx, pods, { text: chars(R.slice(0, 192) + 'x'.repeat(64)) }, 'a');
    route(gie, idx, pods, { text: chars(R.slice(0, 64) + 'y'.repeat(64)) }, 'b');
    return idx;
  };

  it('sums the weighted scorers and takes the highest', () => {
    // prefix: block 0 held by a and b (a 1, b 1), blocks 1-2 by a (a 3), block 3 by none:
    //   a = 3/4 = 0.75, b = 1/4 = 0.25, c = 0
    // queue (waiting a 6, b 2, c 0; max 6, min 0): a = 0, b = 4/6 = 0.667, c = 1
    // kv (usage a 0.9, b 0.5, c 0.2): a = 0.1, b = 0.5, c = 0.8
    //   a = 2 x 0 + 2 x 0.1 + 3 x 0.75 = 2.45
    //   b = 2 x 0.667 + 2 x 0.5 + 3 x 0.25 = 3.083
    //   c = 2 x 1 + 2 x 0.8 + 0 = 3.6        -> c
    const idx = seeded();
    const pods = [
      cand('a', { engine: engine(6, 0.9) }),
      cand('b', { engine: engine(2, 0.5) }),
      cand('c', { engine: engine(0, 0.2) }),
    ];
    const ctx = context(gie, idx, { text: chars(R) });
    expect(pods[gie.pick(pods, ctx)].instance).toBe('c');
    expect((ctx.memo as BigUint64Array).length).toBe(4);
    // a lighter (waiting 1, usage 0.3; queue max 2): a = 2 x 0.5 + 2 x 0.7 + 2.25 = 4.65,
    // b = 0 + 1 + 0.75 = 1.75, c = 2 + 1.6 = 3.6 -> a.
    const lighter = [
      cand('a', { engine: engine(1, 0.3) }),
      cand('b', { engine: engine(2, 0.5) }),
      cand('c', { engine: engine(0, 0.2) }),
    ];
    expect(lighter[gie.pick(lighter, context(gie, idx, { text: chars(R) }))].instance).toBe('a');
    // Queue against cache: waiting a 4, b 0, c 2 -> queue a 0, b 1, c 0.5; usage a 0.2, b 0.6,
    // c 0.9 -> kv a 0.8, b 0.4, c 0.1. a = 0 + 1.6 + 2.25 = 3.85, b = 2 + 0.8 + 0.75 = 3.55,
    // c = 1 + 0.2 + 0 = 1.2 -> a (with the queue at weight 3, b would win: 4.55).
    const queued = [
      cand('a', { engine: engine(4, 0.2) }),
      cand('b', { engine: engine(0, 0.6) }),
      cand('c', { engine: engine(2, 0.9) }),
    ];
    expect(queued[gie.pick(queued, context(gie, idx, { text: chars(R) }))].instance).toBe('a');
  });

  it('scores a pod without a fresh scrape as zeros: the prefix decides', () => {
    // All gauges null: queue 1 each, kv 1 each; prefix 0.75 / 0.25 / 0 -> a.
    const idx = seeded();
    const pods = [cand('a'), cand('b'), cand('c')];
    expect(pods[gie.pick(pods, context(gie, idx, { text: chars(R) }))].instance).toBe('a');
  });

  it('hashes 64-character blocks, at most 256, with the partial tail as one more block', () => {
    const space = hashSpace();
    expect(approxBlockHashes(chars('x'.repeat(63)), 16, 256, space).length).toBe(0);
    expect(approxBlockHashes(chars('x'.repeat(130)), 16, 256, space).length).toBe(3);
    expect(approxBlockHashes(chars('x'.repeat(64 * 300)), 16, 256, space).length).toBe(256);
    // Token ids are tokens already: 16 to a block.
    expect(approxBlockHashes({ kind: 'tokens', symbols: new Uint32Array(40) }, 16, 256, space).length).toBe(3);
    // Chained: equal prefixes, equal hashes; a different first block changes every later one.
    const [p, q] = [
      approxBlockHashes(chars('a'.repeat(128)), 16, 256, space),
      approxBlockHashes(chars('b'.repeat(64) + 'a'.repeat(64)), 16, 256, space),
    ];
    expect(p[1]).not.toBe(q[1]);
  });
});

describe('llm-d (v0.8 precise prefix profile: prefix 2, kv-cache-utilization 1, queue 1)', () => {
  it('weights blocks by tier, min-max normalises over pods with hits, and adds the gauges', () => {
    // Weighted prefix (gpu 1.0, cpu 0.8, others 1.0):
    //   a: 10 GPU                    = 10
    //   b: 4 GPU + 8 more on CPU     = 4 + 8 x 0.8 = 10.4
    //   c: none                      = 0 (no hit: 0)
    //   d: 2 GPU                     = 2
    // min-max over a, b, d (min 2, max 10.4): a = 8/8.4 = 0.952, b = 1, d = 0
    // queue (waiting a 3, b 5, c 0, d 1): a = 2/5 = 0.4, b = 0, c = 1, d = 0.8
    // kv (usage a 0.6, b 0.7, c 0.1, d 0.2): a 0.4, b 0.3, c 0.9, d 0.8
    //   a = 2 x 0.952 + 0.4 + 0.4 = 2.705;  b = 2 + 0.3 + 0 = 2.3;  c = 0.9 + 1 = 1.9;  d = 0.8 + 0.8 = 1.6  -> a
    const pods = [
      cand('a', { device: 10, host: 10, disk: 10, engine: engine(3, 0.6) }),
      cand('b', { device: 4, host: 12, disk: 12, engine: engine(5, 0.7) }),
      cand('c', { engine: engine(0, 0.1) }),
      cand('d', { device: 2, host: 2, disk: 2, engine: engine(1, 0.2) }),
    ];
    expect(pods[llmD.pick(pods, context(llmD, undefined))].instance).toBe('a');
    // b with a's load instead: b = 2 + 0.4 + 0.4 = 2.8 > a = 2 x 0.952 + 0.3 + 0 = 2.205 -> b.
    pods[0] = cand('a', { device: 10, host: 10, disk: 10, engine: engine(5, 0.7) });
    pods[1] = cand('b', { device: 4, host: 12, disk: 12, engine: engine(3, 0.6) });
    expect(pods[llmD.pick(pods, context(llmD, undefined))].instance).toBe('b');
    // Min-max, not a share of the prompt: a holds 8 blocks and is idle, b holds 10 with 1 waiting
    // and usage 0.5. a = 2 x 0 + 1 + 1 = 2 (the lowest hit scores 0), b = 2 x 1 + 0.5 + 0 = 2.5 -> b.
    // (Scored as matched / 10 prompt blocks, as v0.10 does: a = 1.6 + 2 = 3.6 > b = 2.5.)
    const two = [
      cand('a', { device: 8, host: 8, disk: 8, engine: engine(0, 0) }),
      cand('b', { device: 10, host: 10, disk: 10, engine: engine(1, 0.5) }),
    ];
    expect(two[llmD.pick(two, context(llmD, undefined))].instance).toBe('b');
  });

  it('counts a block on CPU at 0.8 of one on GPU', () => {
    // a: 10 on GPU = 10; b: 12 on CPU only = 12 x 0.8 = 9.6. Min-max over both: a 1, b 0 -> a
    // (were CPU blocks worth 1, b = 12 would win).
    const pods = [cand('a', { device: 10, host: 10, disk: 10 }), cand('b', { host: 12, disk: 12 })];
    expect(pods[llmD.pick(pods, context(llmD, undefined))].instance).toBe('a');
  });

  it('gives every pod with a hit 1 when their weighted prefixes are equal', () => {
    // a and b both 5 -> 1 each; c no hit -> 0. Equal gauges -> a or b, never c.
    const pods = [cand('a', { device: 5, host: 5, disk: 5 }), cand('b', { device: 5, host: 5, disk: 5 }), cand('c')];
    expect(['a', 'b']).toContain(pods[llmD.pick(pods, context(llmD, undefined, { rand: () => 0.99 }))].instance);
    expect(['a', 'b']).toContain(pods[llmD.pick(pods, context(llmD, undefined, { rand: () => 0 }))].instance);
  });
  it('keeps a lone holder of the first block while its KV usage is below 1, however long its queue', () => {
    // Every Mooncake conversation prompt starts with the same 512 tokens. Only a holds them (8 blocks):
    // min-max over the one pod with a hit gives it 1; b and c have no hit: 0.
    // a: waiting 160, usage 0.57 -> queue (160 - 160) / 160 = 0, kv 0.43: 2 x 1 + 0.43 + 0 = 2.43
    // b, c: idle -> queue 1, kv 1: 0 + 1 + 1 = 2                                  -> a
    // (The gauges cannot outweigh the prefix term: a non-holder scores at most 2, the holder
    // 2 + (1 - usage). This is llm-d's v0.8 profile, not a reading of the gauges gone wrong.)
    const pods = [
      cand('a', { device: 8, host: 8, disk: 8, engine: engine(160, 0.57) }),
      cand('b', { engine: engine(0, 0) }),
      cand('c', { engine: engine(0, 0) }),
    ];
    for (const r of [0, 0.5, 0.99])
      expect(pods[llmD.pick(pods, context(llmD, undefined, { rand: () => r }))].instance).toBe('a');
    // At usage 1 (preempting): a = 2 + 0 + 0 = 2 = b = c: a three-way tie, broken at random.
    pods[0] = cand('a', { device: 8, host: 8, disk: 8, engine: engine(160, 1) });
    const picks = new Set(
      [0, 0.5, 0.99].map((r) => pods[llmD.pick(pods, context(llmD, undefined, { rand: () => r }))].instance),
    );
    expect(picks.size).toBeGreaterThan(1);
  });
});

describe('llm-d-sticky (prefix-cache-affinity-filter + token-load-scorer)', () => {
  // Blocks of max(16, 64) = 64 tokens. R: 320 tokens = 5 blocks.
  const R = Uint32Array.from({ length: 320 }, (_, i) => i + 1);
  const variant = (shared: number, tag: number) => Uint32Array.from(R, (t, i) => (i < shared ? t : tag * 10_000 + i));
  const pods = () => [cand('a'), cand('b'), cand('c')];
  const book = (s: StickyState, tokens: Uint32Array, on: string, id: string) => {
    const ctx = context(llmDSticky, s, { tokens, isl: tokens.length });
    llmDSticky.pick(pods(), ctx);
    llmDSticky.booked!(s, { requestId: id, chosen: cand(on), memo: ctx.memo, isl: tokens.length, now: 0 });
  };
  const seeded = () => {
    const s = llmDSticky.createState!() as StickyState;
    book(s, variant(256, 1), 'a', 'p1'); // shares R's first 4 blocks
    book(s, variant(192, 2), 'b', 'p2'); // shares R's first 3 blocks
    return s;
  };

  it('keeps the pods at >= 0.8 of the prompt while their estimated TTFT is within 18 s of the others', () => {
    const s = seeded();
    // p1 had no match: 5 blocks x 64 = 320 uncached tokens in flight on a; p2 matched a's 3
    // blocks, not b's: 320 on b too. Both reach their first token: nothing in flight.
    expect(s.inflight.get('a\u00000')).toBe(320);
    llmDSticky.prefillDone!(s, 'p1');
    llmDSticky.prefillDone!(s, 'p2');
    expect(s.inflight.size).toBe(0);
    // prefix a = 4/5 = 0.8 (sticky), b = 3/5 = 0.6, c = 0 -> only a is kept -> a.
    expect(route(llmDSticky, s, pods(), { tokens: R, isl: 320 })).toBe('a');
  });

  it('breaks stickiness when the sticky pod is 18 s of prefill behind', () => {
    const s = seeded();
    s.inflight.clear();
    // a: 280,000 tokens in flight -> 280,000 / 15,928 = 17.58 s <= 18 s ahead of b and c (0): sticky -> a.
    s.inflight.set('a\u00000', 280_000);
    expect(route(llmDSticky, s, pods(), { tokens: R, isl: 320 })).toBe('a');
    // 300,000 -> 18.83 s > 18 s: all kept; token load a = 1 - 300,000 / 4,194,304 = 0.928, b = c = 1 -> b or c.
    s.inflight.set('a\u00000', 300_000);
    expect(['b', 'c']).toContain(route(llmDSticky, s, pods(), { tokens: R, isl: 320, rand: () => 0.99 }));
    expect(['b', 'c']).toContain(route(llmDSticky, s, pods(), { tokens: R, isl: 320, rand: () => 0 }));
  });

  it("counts a request's uncached tokens in flight until its first token", () => {
    const s = seeded();
    s.inflight.clear();
    // R on a: 4 of 5 blocks matched -> (5 - 4) x 64 + max(0, 320 - 320) = 64 tokens.
    const ctx = context(llmDSticky, s, { tokens: R, isl: 320 });
    llmDSticky.pick(pods(), ctx);
    llmDSticky.booked!(s, { requestId: 'r', chosen: cand('a'), memo: ctx.memo, isl: 320, now: 0 });
    expect(s.inflight.get('a\u00000')).toBe(64);
    llmDSticky.prefillDone!(s, 'r');
    llmDSticky.freed!(s, 'r');
    expect(s.inflight.has('a\u00000')).toBe(false);
  });
});

describe('aibrix (prefix_cache.go: imbalance gate 8, mean + 1 sd)', () => {
  // Blocks of 4 characters. R = 16 characters: 4 blocks.
  const R = 'abcdefghijklmnop';
  const seeded = () => {
    const t = aibrix.createState!() as ReturnType<NonNullable<typeof aibrix.createState>>;
    const all = ['a', 'b', 'c', 'd'].map((i) => cand(i));
    route(aibrix, t, all, { text: chars('abcdefghijklXXXX') }, 'a'); // R's first 3 blocks
    route(aibrix, t, all, { text: chars('abcdefghYYYYYYYY') }, 'b'); // R's first 2
    return t;
  };
  const running = (...n: number[]) => n.map((r, i) => cand('abcd'[i], { load: { activeRequests: r } }));

  it('takes the best match whose running requests are within mean + 1 sd', () => {
    // Match: block 0 held by a and b (25 %), block 1 by a and b (50 %), block 2 by a only (75 %;
    // b drops out), block 3 by none: a 75, b 50.
    // Running a 5, b 1, c 0, d 2: mean 2, sample sd = sqrt((9 + 1 + 4 + 0) / 3) = 2.16 -> limit 4.16.
    // Sorted: a (75, 5 > 4.16: skipped), b (50, 1) -> b.
    expect(route(aibrix, seeded(), running(5, 1, 0, 2), { text: chars(R) })).toBe('b');
    // a at 2: mean 1.25, sd = sqrt((0.5625 + 0.0625 + 1.5625 + 0.5625) / 3) = 0.957 -> limit 2.21:
    // a (75 %, 2) qualifies -> a.
    expect(route(aibrix, seeded(), running(2, 1, 0, 2), { text: chars(R) })).toBe('a');
  });

  it('matches only the least loaded pods when max - min running > 8, then falls back to the fewest', () => {
    // a 10, b 1, c 0, d 0: 10 - 0 > 8 -> only c and d are matched; block 0 is held by a and b only:
    // no match -> the fewest running: c or d.
    expect(['c', 'd']).toContain(route(aibrix, seeded(), running(10, 1, 0, 0), { text: chars(R), rand: () => 0 }));
    expect(['c', 'd']).toContain(route(aibrix, seeded(), running(10, 1, 0, 0), { text: chars(R), rand: () => 0.99 }));
    // a 8, b 1, c 0, d 0: 8 is not > 8, all are matched. Mean 2.25, sd = sqrt((33.06 + 1.56 +
    // 5.06 + 5.06) / 3) = 3.86 -> limit 6.11: a (75 %, 8) is skipped, b (50 %, 1) -> b.
    expect(route(aibrix, seeded(), running(8, 1, 0, 0), { text: chars(R) })).toBe('b');
  });

  it("keeps the table's blocks in write order: a rewrite is the newest, the oldest write goes at capacity or after 20 min", () => {
    const t = new PrefixTable(4, 1000);
    const H = (...xs: number[]) => BigUint64Array.from(xs.map(BigInt));
    t.add(H(1, 2, 3), 'a', 0);
    t.add(H(2), 'b', 10); // 2 rewritten: now the newest, naming a and b
    expect(t.order()).toEqual([1n, 3n, 2n]);
    t.add(H(4, 5), 'c', 20); // 5 blocks > 4: the oldest write (1) goes
    expect(t.order()).toEqual([3n, 2n, 4n, 5n]);
    // Block 1 is gone, so a prompt starting with it matches nothing; 3 still matches a.
    expect(t.match(H(1, 2), ['a', 'b'], 20).size).toBe(0);
    expect([...t.match(H(3, 9), ['a', 'b'], 20)]).toEqual([['a', 50]]);
    // Written at 0 (3) and 10 (2): expired at 1,011 (> 1,000 ms); 4 and 5 (written at 20) stay.
    t.match(H(9), [], 1011);
    expect(t.order()).toEqual([4n, 5n]);
    t.add(H(6), 'a', 1011);
    t.removePod((p) => p === 'c');
    expect(t.order()).toEqual([6n]);
    expect(t.size).toBe(1);
  });
});

describe('vllm-router (kv_aware.rs)', () => {
  it('takes the longest prefix on any tier, the last of equals; with no hit, the least loaded, the first of equals', () => {
    const seq = BigUint64Array.of(1n, 2n, 3n, 4n, 5n);
    // a: 3 on GPU; b: 5 on GPU or CPU; c: 5 on any tier -> 5 = 5: the last, c.
    const c = [cand('a', { device: 3, host: 3, disk: 3 }), cand('b', { host: 5, disk: 5 }), cand('c', { disk: 5 })];
    expect(c[vllmRouter.pick(c, context(vllmRouter, undefined, { seq }))].instance).toBe('c');
    // No hit: in flight a 3, b 1, c 1 -> b (the first of 1s).
    const cold = [
      cand('a', { load: { activeRequests: 3 } }),
      cand('b', { load: { activeRequests: 1 } }),
      cand('c', { load: { activeRequests: 1 } }),
    ];
    expect(cold[vllmRouter.pick(cold, context(vllmRouter, undefined, { seq }))].instance).toBe('b');
    // A prompt without a complete block: least loaded, whatever the index says.
    expect(c[vllmRouter.pick(c, context(vllmRouter, undefined))].instance).toBe('a');
  });
});

describe('the pipeline the peers need', () => {
  const cands = ['a', 'b', 'c'].map((instance) => ({ instance, dpRank: 0 }));
  const W: CostWeights = {
    model: 'time',
    overlapWeight: 1,
    medium: { cpu: 0.75, disk: 0.25, shared: 0.5 },
    trackActiveBlocks: true,
    decodeInterference: 0.1,
  };
  const input = (policy: RouteInput['policy'], text: string, over: Partial<RouteInput> = {}): RouteInput => ({
    ns: NS,
    candidates: cands,
    tokens: [],
    policy,
    weights: W,
    temperature: 0,
    text: chars(text),
    ...over,
  });

  it("keeps a policy's state per pool across requests, changed by bookings only, and forgets a dropped instance", () => {
    const s = new Scheduler(new TieredIndexer(), () => 0);
    const text = 'The same long system prompt, then a question';
    const d1 = s.decide(input('sglang', text), 0);
    expect(d1.chosen!.instance).toBe('a');
    // A decision that is not booked (/debug/route, /v1/route without an id) teaches nothing: with a
    // request in flight on a, the text matches no one and the least loaded, b, wins (a booked
    // decision would have made a the text's holder, and a would win: see below).
    s.active.book('x', 'a', 0, new BigUint64Array(0), 0, 0);
    expect(s.decide(input('sglang', text), 0).chosen!.instance).toBe('b');
    s.free('x');
    s.book(d1, NS, { requestId: 'r1', now: 0, speculativeTtlMs: 0 });
    // a has 1 in flight, b and c 0; the text matches a's path fully (1 > 0.3) and a's load 1 is
    // not over 1.5 x the mean 0.33 AND the mean + 64: a again.
    expect(s.decide(input('sglang', text), 0).chosen!.instance).toBe('a');
    // Another model's pool has its own tree: nothing matches there, the least loaded is b.
    expect(s.decide(input('sglang', text, { ns: { ...NS, model: 'n' } }), 0).chosen!.instance).toBe('b');
    s.free('r1');
    // Candidates b, a, c: a is the only holder -> a. Once a is dropped (and comes back), the text
    // matches nobody: the least loaded by (load, sent, order) is b.
    const bac = [cands[1], cands[0], cands[2]];
    expect(s.decide(input('sglang', text, { candidates: bac }), 0).chosen!.instance).toBe('a');
    s.dropInstance('a');
    expect(s.decide(input('sglang', text, { candidates: bac }), 0).chosen!.instance).toBe('b');
  });

  it("gives every candidate the engines' gauges, null without a fresh scrape", () => {
    const s = new Scheduler(new TieredIndexer(), () => 0);
    const d = s.decide(input('gie', 'hello', { engineLoad: (i) => (i === 'a' ? engine(3, 0.5) : null) }), 0);
    expect(d.candidates.map((c) => c.engine?.waiting ?? null)).toEqual([3, null, null]);
    expect(s.decide(input('gie', 'hello'), 0).candidates.map((c) => c.engine)).toEqual([null, null, null]);
  });

  it('tells the booking policy of the first token: llm-d-sticky releases its in-flight tokens then', () => {
    const s = new Scheduler(new TieredIndexer(), () => 0.99); // ties go to the first
    const R = Array.from({ length: 320 }, (_, i) => i + 1);
    const sticky = (tokens: number[], id: string | null, candidates = cands) => {
      const d = s.decide({ ns: NS, candidates, tokens, policy: 'llm-d-sticky', weights: W, temperature: 0 }, 0);
      if (id) s.book(d, NS, { requestId: id, now: 0, speculativeTtlMs: 0 });
      return d.chosen!.instance;
    };
    expect(sticky(R, 'r1')).toBe('a');
    s.prefillComplete('r1', 5);
    s.free('r1');
    // A 300,000-token prompt on a: 2,048 hashed blocks x 64 + 168,928 past them = 300,000 uncached
    // tokens in flight -> a's estimated TTFT 18.8 s > 18 s over b and c: R is not kept on a.
    sticky(
      Array.from({ length: 300_000 }, (_, i) => 1_000_000 + i),
      'big',
      [cands[0]],
    );
    expect(sticky(R, null)).toBe('b');
    // Its first token releases them: R is sticky on a again.
    s.prefillComplete('big', 10);
    expect(sticky(R, null)).toBe('a');
    s.free('big');
  });

  it("a peer reads the index as it stands: distrust is kvrouter's", () => {
    const indexer = new TieredIndexer();
    const idx = indexer.namespace(NS).index;
    const tokens = Array.from({ length: 64 }, (_, i) => i + 1);
    idx.store(idx.holder('b', 0, 'GPU'), seqHashes(tokens, 16, hashSpace()));
    const s = new Scheduler(indexer, () => 0);
    s.distrusted.add('b');
    const run = (policy: RouteInput['policy']) =>
      s.decide({ ns: NS, candidates: cands, tokens, policy, weights: W, temperature: 0 }, 0).candidates[1].device;
    expect(run('kv')).toBe(0);
    expect(run('vllm-router')).toBe(4);
  });
});

describe('the request text', () => {
  it("joins a chat's message texts with spaces (SMG) and keeps token ids as tokens", () => {
    const t = requestText({
      kind: 'chat',
      chat: {
        messages: [
          { role: 'system', content: 'You are' },
          { role: 'user', content: [{ type: 'text', text: 'Hi' }, { type: 'image_url' }, { type: 'text', text: '' }] },
          { role: 'assistant', content: 'Yo', reasoning_content: 'think' },
          { role: 'user', content: null },
        ],
      },
    });
    expect(t.kind).toBe('chars');
    expect(String.fromCodePoint(...t.symbols)).toBe('You are Hi Yo think');
    expect(requestText({ kind: 'tokens', tokens: Uint32Array.of(5, 6) })).toEqual({
      kind: 'tokens',
      symbols: Uint32Array.of(5, 6),
    });
    // A surrogate pair is one symbol.
    expect(codePoints('a😀b')).toEqual(Uint32Array.of(97, 0x1f600, 98));
  });
});
