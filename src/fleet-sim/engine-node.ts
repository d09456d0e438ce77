// One simulated engine in virtual time: the engine-sim's own EngineCore, driven the way its
// RankRunner drives it in real time (src/engine-sim/runtime/rank-runner.ts): a pass starts when the
// previous one ends, or at the first request after idling; its KV events are published at pass
// start; its tokens are delivered at pass end. Counters follow the engine's vLLM metrics.
import type { CoreStats, EngineCore, TokenOutput } from '../engine-sim/core/engine-core.js';
import type { CoreKvEvent } from '../engine-sim/core/kv-events.js';
import type { SimRequestSpec } from '../engine-sim/core/request.js';
import type { Recurrence } from './event-queue.js';
import type { EngineTally } from './types.js';

export interface PassStart {
  /** When the pass ends (its tokens are delivered then, and the next pass starts). */
  endMs: number;
  events: readonly CoreKvEvent[];
}

/** What a pass delivers at its end that the proxy sees. */
export interface PassEnd {
  /** A request's first and last tokens, in the pass's order (the others move no state). */
  visible: readonly TokenOutput[];
  /** Requests that cannot fit this engine at all. */
  rejected: readonly string[];
}

// An engine's counters, one row of a fleet-wide array (its cache line or two, read and written
// every pass: a tally object and its boxed busy time were two more cold objects per pass).
const QUERIES = 0;
const GPU_HITS = 1;
const HOST_HITS = 2;
const PROMPT_TOKENS = 3;
const GENERATION_TOKENS = 4;
const PREEMPTIONS = 5;
const REQUESTS = 6;
const PASSES = 7;
const BUSY_MS = 8;
const BATCHES = 9;
/** Counters per engine (the row length of the array `EngineNode` takes). */
export const TALLY_FIELDS = 10;

const NO_TOKENS: readonly TokenOutput[] = [];

export class EngineNode {
  /** A pass is running (or about to start): the engine's next step is on the queue. */
  scheduled = false;
  /**
   * The engine's step event recurs through its quiet window (EngineCore.planQuiet): the queue
   * passes the ends of its passes silently but for the last, whose pass is not quiet.
   */
  readonly window: Recurrence = { times: new Float64Array(0), next: 0, last: 0 };
  /** Passes in the open window (0: none); they are applied to the core when it closes. */
  private windowPasses = 0;
  /** The running pass's delivery, picked out of its output while that was fresh (null: none). */
  private pending: PassEnd | null = null;
  private readonly at: number;
  /** What `startPass` returns for a window (read at once by the caller). */
  private readonly quiet: PassStart = { endMs: 0, events: [] };

  constructor(
    readonly index: number,
    readonly id: string,
    private readonly core: EngineCore,
    /** The fleet's counters, TALLY_FIELDS per engine; this engine's row is `index`. */
    private readonly counts: Float64Array,
    /** False: every pass is stepped and delivered on its own (the reference windows must equal). */
    private readonly windows = true,
  ) {
    this.at = index * TALLY_FIELDS;
  }

  get tally(): EngineTally {
    const c = this.counts;
    const a = this.at;
    return {
      id: this.id,
      queries: c[a + QUERIES],
      gpuHits: c[a + GPU_HITS],
      hostHits: c[a + HOST_HITS],
      promptTokens: c[a + PROMPT_TOKENS],
      generationTokens: c[a + GENERATION_TOKENS],
      preemptions: c[a + PREEMPTIONS],
      requests: c[a + REQUESTS],
      passes: c[a + PASSES],
      busyMs: c[a + BUSY_MS],
      batches: c[a + BATCHES],
    };
  }

  /** The previous pass's delivery (at its end), then clears it. */
  takeOutput(): PassEnd | null {
    const out = this.pending;
    this.pending = null;
    return out;
  }

  /** A request reaches the engine. */
  add(spec: SimRequestSpec, now: number): void {
    this.closeWindow();
    this.core.add(spec, now);
  }

  abort(id: string): void {
    this.closeWindow();
    this.core.abort(id);
  }

  /** The engine's state as a scrape reads it. */
  stats(): CoreStats {
    this.closeWindow();
    return this.core.stats();
  }

  /**
   * Start the next pass at `now`; null when the engine has nothing to do (it idles). Most passes
   * are quiet: a window of them starts here, its passes' ends recur on the queue silently (nothing
   * delivered, no event) and it is applied when it closes.
   */
  startPass(now: number): PassStart | null {
    this.closeWindow();
    const n = this.windows ? this.core.planQuiet(now) : 0;
    if (n > 0) {
      const w = this.window;
      w.times = this.core.quietEnds;
      w.next = 0;
      w.last = n - 1;
      this.windowPasses = n;
      this.pending = null;
      this.quiet.endMs = w.times[0];
      return this.quiet;
    }
    const out = this.core.step(now);
    if (!out) return null;
    const c = this.counts;
    const a = this.at;
    c[a + PASSES]++;
    c[a + BUSY_MS] += out.endMs - out.startMs;
    for (const adm of out.admitted) {
      // As EngineMetrics.onAdmission (vllm:prefix_cache_* and prompt tokens of first admissions).
      c[a + QUERIES] += adm.queried;
      c[a + GPU_HITS] += adm.gpuHitTokens;
      c[a + HOST_HITS] += adm.hostHitTokens;
      if (adm.first) c[a + PROMPT_TOKENS] += adm.req.promptLen;
    }
    c[a + PREEMPTIONS] += out.preempted.length;
    c[a + GENERATION_TOKENS] += out.tokens.length;
    let visible: TokenOutput[] | null = null;
    for (const tok of out.tokens) {
      if (tok.finishReason) c[a + REQUESTS]++;
      if (tok.index === 0 || tok.finishReason) (visible ??= []).push(tok);
    }
    if (out.events.length > 0) c[a + BATCHES]++;
    this.pending =
      visible === null && out.rejected.length === 0
        ? NO_DELIVERY
        : { visible: visible ?? NO_TOKENS, rejected: out.rejected };
    return out;
  }

  /**
   * The open window ends after its running pass (the pending occurrence on the queue becomes its
   * last): the passes started so far are applied to the core, and counted pass by pass as
   * `startPass` counts them (the busy time summed in the same order).
   */
  private closeWindow(): void {
    const passes = this.windowPasses;
    if (passes === 0) return;
    const w = this.window;
    const started = w.next + 1;
    w.last = w.next;
    this.windowPasses = 0;
    const c = this.counts;
    const a = this.at;
    const ends = w.times;
    let start = this.core.quietStartMs;
    for (let i = 0; i < started; i++) {
      c[a + PASSES]++;
      c[a + BUSY_MS] += ends[i] - start;
      start = ends[i];
    }
    c[a + GENERATION_TOKENS] += started * this.core.quietTokens;
    this.core.runQuiet(started);
  }
}

/** A pass that delivers nothing the proxy sees (most: decodes of neither a first nor a last token). */
const NO_DELIVERY: PassEnd = { visible: NO_TOKENS, rejected: [] };
