// A small fleet simulation for unit tests: seeded prompts over shared prefixes, engine-sim cores
// sized by the test, and the fleet input bench fleet would build (one router, no sync, no scrapes,
// msgpack KV events), for a test to override what it is about.
import { routerPlan } from '../../src/bench/fleet.js';
import { variant } from '../../src/bench/cluster/policies.js';
import { mulberry32 } from '../../src/common/prng.js';
import { rangeVocab } from '../../src/engine-sim/core/config.js';
import { EngineCore } from '../../src/engine-sim/core/engine-core.js';
import type { FleetInput } from '../../src/fleet-sim/types.js';

/**
 * `n` prompts, prompt i = prefix (i mod `prefixes`) + its own tail of `tailMin` + [0, `tailSpan`)
 * tokens; the prefixes are drawn first, then each tail (its length first, when it varies).
 */
export function prefixPrompts(
  seed: number,
  n: number,
  o: { prefixes: number; prefixLen: number; tailMin: number; tailSpan: number },
): Uint32Array[] {
  const rand = mulberry32(seed);
  const tok = () => 1000 + Math.floor(rand() * 30_000);
  const prefixes = Array.from({ length: o.prefixes }, () => Array.from({ length: o.prefixLen }, tok));
  return Array.from({ length: n }, (_, i) => {
    const len = o.tailMin + (o.tailSpan > 0 ? Math.floor(rand() * o.tailSpan) : 0);
    return Uint32Array.from([...prefixes[i % o.prefixes], ...Array.from({ length: len }, tok)]);
  });
}

export interface SmallFleet {
  input: FleetInput;
  /** The engines the input steps (a test may read their live stats). */
  engines: EngineCore[];
}

/** A fleet of engines `ids` (16-token blocks) behind `policy`, sending `prompts` at `atMs(i)`. */
export function smallFleet(
  policy: string,
  ids: string[],
  prompts: Uint32Array[],
  o: { atMs: (i: number) => number; maxTokens: number; numGpuBlocks: number; maxNumSeqs?: number },
): SmallFleet {
  const plan = routerPlan(variant(policy), ids, 16);
  const engines = ids.map(
    (_, k) =>
      new EngineCore({
        blockSize: 16,
        numGpuBlocks: o.numGpuBlocks,
        maxNumSeqs: o.maxNumSeqs ?? 4,
        maxNumBatchedTokens: 512,
        seed: k,
        hashFlavor: 'murmur',
        routerHashSeed: BigInt(plan.cfg.hashing.seed),
        outputVocab: rangeVocab(100, 200),
      }),
  );
  const input: FleetInput = {
    requests: prompts.map((_, i) => ({ atMs: o.atMs(i), after: null, maxTokens: o.maxTokens, sessionKey: null })),
    prompt: (i) => prompts[i],
    engines,
    ids,
    model: plan.cfg.models[0].name,
    blockSize: 16,
    routers: 1,
    router: plan,
    seed: 3,
    requestLatencyMs: 0,
    kvEventDelayMs: 1,
    eventWire: 'bytes',
    syncDelayMs: null,
    scrapeIntervalMs: null,
    drainTimeoutMs: 600_000,
  };
  return { input, engines };
}
