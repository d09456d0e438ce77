// Dynamo mocker's default polynomial perf model (lib/mocker/src/common/perf_model.rs), in ms.
// Prefill cost grows with the new tokens computed in a pass (no prefix term); decode cost with KV
// occupancy only (not with the batch or its context).
import type { PassContents, PassTime, PerfModel } from './perf-model.js';

/** Prefill time of one pass that computes `newTokens` prompt tokens (summed over the batch). */
export function prefillMs(newTokens: number): number {
  if (newTokens <= 0) return 0;
  return Math.max(0, 4.209989e-7 * newTokens * newTokens + 1.518344e-2 * newTokens + 1.650142e1);
}

/** Decode step time at KV usage `p` = active KV tokens / total KV tokens (0..1). */
export function decodeMs(p: number): number {
  const x = Math.min(1, Math.max(0, p));
  return Math.max(1.0, -25.74 * x * x + 54.01 * x + 5.74);
}

/** The mocker: a pass costs prefill(summed new tokens) + decode(KV usage), the two simply added. */
export const mockerModel: PerfModel = {
  name: 'mocker',
  pass(c: PassContents, out?: PassTime): PassTime {
    let tokens = 0;
    for (const p of c.prefills) tokens += p.newTokens;
    const t = out ?? { prefillMs: 0, decodeMs: 0 };
    t.prefillMs = prefillMs(tokens);
    t.decodeMs = c.decodes > 0 ? decodeMs(c.kvUsage) : 0;
    return t;
  },
};
