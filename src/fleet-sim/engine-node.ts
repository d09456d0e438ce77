// One simulated engine in virtual time: the engine-sim's own EngineCore, driven the way its
// RankRunner drives it in real time (src/engine-sim/runtime/rank-runner.ts): a pass starts when the
// previous one ends, or at the first request after idling; its KV events are published at pass
// start; its tokens are delivered at pass end. Counters follow the engine's vLLM metrics.
import type { EngineCore, StepOutput } from '../engine-sim/core/engine-core.js';
import type { CoreKvEvent } from '../engine-sim/core/kv-events.js';
import type { EngineTally } from './types.js';

export interface PassStart {
  /** When the pass ends (its tokens are delivered then, and the next pass starts). */
  endMs: number;
  events: readonly CoreKvEvent[];
}

export class EngineNode {
  readonly tally: EngineTally;
  /** A pass is running (or about to start): the engine's next step is on the queue. */
  scheduled = false;
  private pending: StepOutput | null = null;

  constructor(
    readonly index: number,
    readonly id: string,
    readonly core: EngineCore,
  ) {
    this.tally = {
      id,
      queries: 0,
      gpuHits: 0,
      hostHits: 0,
      promptTokens: 0,
      generationTokens: 0,
      preemptions: 0,
      requests: 0,
      passes: 0,
      busyMs: 0,
      batches: 0,
    };
  }

  /** The previous pass's tokens (delivered at its end), then clears them. */
  takeOutput(): StepOutput | null {
    const out = this.pending;
    this.pending = null;
    return out;
  }

  /** Start the next pass at `now`; null when the engine has nothing to do (it idles). */
  startPass(now: number): PassStart | null {
    const out = this.core.step(now);
    if (!out) return null;
    const t = this.tally;
    t.passes++;
    t.busyMs += out.endMs - out.startMs;
    for (const a of out.admitted) {
      // As EngineMetrics.onAdmission (vllm:prefix_cache_* and prompt tokens of first admissions).
      t.queries += a.queried;
      t.gpuHits += a.gpuHitTokens;
      t.hostHits += a.hostHitTokens;
      if (a.first) t.promptTokens += a.req.promptLen;
    }
    t.preemptions += out.preempted.length;
    t.generationTokens += out.tokens.length;
    for (const tok of out.tokens) if (tok.finishReason) t.requests++;
    if (out.events.length > 0) t.batches++;
    this.pending = out;
    return out;
  }
}
