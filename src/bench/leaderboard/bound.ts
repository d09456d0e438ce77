// The TTFT no router can beat on a workload: every request alone on an idle engine, with the
// oracle's cache (infinite and shared: every block an earlier prompt computed is cached). Its first
// token then waits only for its own uncached tokens, prefilled in the engine's chunks with the
// engines' perf model, plus the request's hop. Any real placement waits at least that long (other
// requests' passes, a smaller cache, a cold instance), so a policy's TTFT p90 cannot fall below the
// floor's: how far the best peer is above it is the most any router could gain over that peer.
import { type PerfModel, passMs, type TimingKnobs } from '../../engine-sim/core/perf-model.js';
import { resolveOptions } from '../../engine-sim/options.js';
import { loadPerfModel } from '../../engine-sim/perf-models.js';
import type { FleetSetup } from '../fleet.js';
import { dist } from '../stats.js';
import { oracle } from '../workloads/oracle.js';

/** An idle engine's time to a prompt's first token: `uncached` tokens after `cached` ones, in chunks of at most `chunk`. */
export function idlePrefillMs(
  model: PerfModel,
  knobs: TimingKnobs,
  chunk: number,
  uncached: number,
  cached: number,
): number {
  let ms = 0;
  for (let done = 0; done < uncached; done += chunk) {
    const newTokens = Math.min(chunk, uncached - done);
    ms += passMs(
      model,
      { prefills: [{ newTokens, contextTokens: cached + done }], decodes: 0, decodeContextTokens: 0, kvUsage: 0 },
      0,
      knobs,
    );
  }
  return ms;
}

/** The TTFT p90 floor of a bench fleet setup's workload (ms). */
export async function ttftFloorP90(s: FleetSetup): Promise<number> {
  // As bench fleet builds its engines (the GPU blocks do not change a lone prefill's time).
  const o = resolveOptions({ blockSize: s.blockSize, numGpuBlocks: 1, speedup: s.speedup });
  const model = loadPerfModel(s.perfModel).model;
  const knobs: TimingKnobs = { speedup: o.speedup, decodeSpeedup: o.decodeSpeedup, cpuLoadFraction: o.cpuLoadFraction };
  const chunk = o.enableChunkedPrefill ? o.maxNumBatchedTokens : Number.POSITIVE_INFINITY;
  const ttfts: number[] = [];
  await oracle(s.workload, s.blockSize, undefined, (_i, promptTokens, hitTokens) => {
    ttfts.push(s.requestLatencyMs + idlePrefillMs(model, knobs, chunk, promptTokens - hitTokens, hitTokens));
  });
  return dist(ttfts).p90;
}
