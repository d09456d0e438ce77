// inference-perf / SGLang "generated shared prefix": G groups, each a system prompt shared by P
// questions. Requests arrive in a seeded random order (Poisson at `rate`); token-id prompts.
import { mix, poissonArrivals, shuffle, tokenBlock } from './tokens.js';
import type { BenchRequest, Workload } from './types.js';

export interface SharedPrefixOptions {
  groups: number;
  promptsPerGroup: number;
  systemLen: number;
  questionLen: number;
  outputLen: number;
  /** Requests per second before --rate-scale. */
  rate: number;
  seed: number;
}

export function sharedPrefixWorkload(o: SharedPrefixOptions): Workload {
  const order = shuffle(
    Array.from({ length: o.groups * o.promptsPerGroup }, (_, i) => ({
      group: Math.floor(i / o.promptsPerGroup),
      q: i % o.promptsPerGroup,
    })),
    o.seed,
  );
  const arrivals = poissonArrivals(order.length, o.rate, o.seed);
  const tokens = (i: number): Uint32Array => {
    const { group, q } = order[i];
    const out = new Uint32Array(o.systemLen + o.questionLen);
    out.set(tokenBlock(o.seed, mix(1, group), o.systemLen), 0);
    out.set(tokenBlock(o.seed, mix(2, group, q), o.questionLen), o.systemLen);
    return out;
  };
  const requests: BenchRequest[] = order.map(({ group }, i) => ({
    atMs: arrivals[i],
    after: null,
    path: '/v1/completions',
    body: () => ({ prompt: Array.from(tokens(i)) }),
    maxTokens: o.outputLen,
    sessionKey: `g${group}`,
  }));
  return {
    name: 'shared-prefix',
    description:
      `shared prefix: ${o.groups} groups x ${o.promptsPerGroup} prompts, system ${o.systemLen} + question ${o.questionLen} tokens, ` +
      `output ${o.outputLen}, Poisson ${o.rate} req/s, seed ${o.seed}`,
    requests,
    engineTokenizer: 'none',
    promptTokens: async (i) => tokens(i),
    tokensNow: tokens,
    close: async () => undefined,
  };
}
