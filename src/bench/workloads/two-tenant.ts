// Two tenants on one fleet: an interactive tenant's short requests (a few apps, each a shared system
// prompt, then a short question and a short answer, Poisson over the whole run) beside a batch
// tenant's flood of long prompts (a shared instruction, then a long document of its own, arriving
// Poisson at several times the interactive rate over the middle half of the run). The question
// it asks of a router: do the interactive requests keep their TTFT while the batch flood lasts?
// Token-id prompts; every request carries its tenant so reports can break TTFT down per class.
import { mix, poissonArrivals, rng, tokenBlock } from './tokens.js';
import type { BenchRequest, Workload } from './types.js';

export interface TwoTenantOptions {
  interactive: number;
  batch: number;
  /** Interactive requests per second (before --rate-scale); the batch flood arrives at `batchRate`. */
  rate: number;
  batchRate: number;
  /** Interactive apps, each with its own shared system prompt. */
  apps: number;
  systemLen: number;
  questionLen: number;
  outputLen: number;
  /** Batch: instruction shared by every batch prompt, then a document of its own. */
  instructionLen: number;
  documentLen: number;
  batchOutputLen: number;
  seed: number;
}

export const TENANTS = ['interactive', 'batch'] as const;

export function twoTenantWorkload(o: TwoTenantOptions): Workload {
  const inter = poissonArrivals(o.interactive, o.rate, o.seed);
  const span = inter.length ? inter[inter.length - 1] : 0;
  // The flood starts a quarter into the interactive span.
  const flood = poissonArrivals(o.batch, o.batchRate, mix(o.seed, 0xba7c)).map((t) => span / 4 + t);
  const app = rng(mix(o.seed, 0xa99));
  const who: Array<{ tenant: 'interactive' | 'batch'; k: number; app: number }> = [];
  for (let k = 0; k < o.interactive; k++) who.push({ tenant: 'interactive', k, app: Math.floor(app() * o.apps) });
  for (let k = 0; k < o.batch; k++) who.push({ tenant: 'batch', k, app: 0 });
  const at = who.map((w) => (w.tenant === 'interactive' ? inter[w.k] : flood[w.k]));
  // Requests in arrival order (ties: interactive first), so that a cap keeps a prefix in time.
  const order = who.map((_, i) => i).sort((a, b) => at[a] - at[b] || a - b);
  const tokens = (i: number): Uint32Array => {
    const w = who[order[i]];
    if (w.tenant === 'interactive') {
      const out = new Uint32Array(o.systemLen + o.questionLen);
      out.set(tokenBlock(o.seed, mix(5, w.app), o.systemLen), 0);
      out.set(tokenBlock(o.seed, mix(6, w.k), o.questionLen), o.systemLen);
      return out;
    }
    const out = new Uint32Array(o.instructionLen + o.documentLen);
    out.set(tokenBlock(o.seed, mix(7), o.instructionLen), 0);
    out.set(tokenBlock(o.seed, mix(8, w.k), o.documentLen), o.instructionLen);
    return out;
  };
  const requests: BenchRequest[] = order.map((j, i) => {
    const w = who[j];
    return {
      atMs: at[j],
      after: null,
      path: '/v1/completions',
      body: () => ({ prompt: Array.from(tokens(i)) }),
      maxTokens: w.tenant === 'interactive' ? o.outputLen : o.batchOutputLen,
      sessionKey: w.tenant === 'interactive' ? `app${w.app}` : `batch${w.k}`,
      tenant: w.tenant,
    };
  });
  return {
    name: 'two-tenant',
    description:
      `two tenants: ${o.interactive} interactive (${o.apps} apps, system ${o.systemLen} + question ${o.questionLen} tokens, output ${o.outputLen}, Poisson ${o.rate} req/s) ` +
      `beside ${o.batch} batch (instruction ${o.instructionLen} + document ${o.documentLen} tokens, output ${o.batchOutputLen}, Poisson ${o.batchRate} req/s from a quarter of the run), seed ${o.seed}`,
    requests,
    engineTokenizer: 'none',
    promptTokens: async (i) => tokens(i),
    tokensNow: tokens,
    close: async () => undefined,
  };
}
