// The closed loop: each finished request's prediction against the engine's report, through the
// verifier, into metrics, a one-line log per alarm, and the configured action. Pure wiring over
// interfaces (the index writer, the scheduler's distrust set, a log function); no I/O of its own.
import type { IndexWriter } from '../indexer/writer.js';
import type { KeptDecision } from '../scheduler/scheduler.js';
import type { EngineUsage } from './usage-tail.js';
import { type Alarm, HitVerifier, type Verdict } from './verifier.js';
import { predictsHits } from '../scheduler/policies/registry.js';

export const VERIFY_ACTIONS = ['warn', 'resync', 'distrust'] as const;
export type VerifyAction = (typeof VERIFY_ACTIONS)[number];

export interface FeedbackOptions {
  enabled: boolean;
  window: number;
  alarmRatio: number;
  action: VerifyAction;
}

export interface FeedbackSinks {
  writer: IndexWriter;
  /** The scheduler's set of instances whose index entries earn no credit. */
  distrusted: Set<string>;
  log: (line: string) => void;
  /** Metrics: one judged request, or one the engine gave no cached count for. */
  judged?(instance: string, verdict: Verdict | 'unverified', errorTokens: number | null): void;
  now: () => number;
}

/** What the check needs of a decision (the decision API keeps only this per open booking). */
export interface Prediction {
  instance: string;
  isl: number;
  blockSize: number;
  /** The index's prefix for the chosen instance, before any distrust (blocks). */
  indexedBlocks: number;
}

export function predictionOf(d: KeptDecision): Prediction | null {
  return d.chosen
    ? { instance: d.chosen.instance, isl: d.isl, blockSize: d.blockSize, indexedBlocks: d.chosen.indexedBlocks }
    : null;
}

/**
 * The prediction the closed loop will judge when the request ends, or null when it judges none: only
 * decisions that used the index are judged (a cache-blind policy, round-robin, session, ..., routes
 * the same whatever the index says, and on a router without KV events its empty view would raise
 * alarms nobody can act on). A caller keeping a request open keeps this, not the decision and its
 * candidates' scores (1,024 of them at fleet scale).
 */
export function judgedPrediction(d: KeptDecision): Prediction | null {
  return predictsHits(d.policy) ? predictionOf(d) : null;
}

/** What the router predicts the engine will report as cached: whole blocks, never the last token. */
export function predictedCachedTokens(p: Prediction): number {
  const reusable = Math.floor(Math.max(0, p.isl - 1) / p.blockSize) * p.blockSize;
  return Math.min(reusable, p.indexedBlocks * p.blockSize);
}

export class FeedbackLoop {
  private current: HitVerifier;
  /** Actions taken, by alarm (for /health and tests). */
  readonly actions: Array<{ at: number; instance: string; action: VerifyAction | 'trust'; message: string }> = [];

  constructor(
    private opts: FeedbackOptions,
    private readonly sinks: FeedbackSinks,
  ) {
    this.current = new HitVerifier({ window: opts.window, alarmRatio: opts.alarmRatio });
  }

  get verifier(): HitVerifier {
    return this.current;
  }

  /**
   * A reload: a new window or ratio starts the windows afresh (alarms included); a new action
   * applies to the alarms already open (distrust takes them out of credit, any other lets them back).
   */
  configure(opts: FeedbackOptions): void {
    if (opts.window !== this.opts.window || opts.alarmRatio !== this.opts.alarmRatio) {
      this.current = new HitVerifier({ window: opts.window, alarmRatio: opts.alarmRatio });
      this.sinks.distrusted.clear();
    }
    this.opts = opts;
    if (opts.action !== 'distrust' || !opts.enabled) this.sinks.distrusted.clear();
    else for (const a of this.current.alarms()) this.sinks.distrusted.add(a.instance);
  }

  /** The forward observer's `reported` hook (judgedPrediction: which decisions are judged). */
  reported(d: KeptDecision, usage: EngineUsage | null): void {
    const p = judgedPrediction(d);
    if (p) this.check(p, usage);
  }

  /** One prediction against the engine's usage (null: the response carried none). */
  check(p: Prediction, usage: EngineUsage | null): void {
    if (!this.opts.enabled || p.isl === 0) return;
    const instance = p.instance;
    if (!usage || usage.cachedTokens === null) {
      this.sinks.judged?.(instance, 'unverified', null);
      return;
    }
    const predicted = predictedCachedTokens(p);
    const o = this.current.observe(instance, predicted, usage.cachedTokens, p.blockSize, this.sinks.now());
    if (!o) return;
    this.sinks.judged?.(instance, o.verdict, o.error);
    if (o.raised) this.raise(o.raised);
    if (o.cleared) this.clear(o.cleared);
  }

  private raise(a: Alarm): void {
    const act = this.opts.action;
    let what: string;
    if (act === 'resync') {
      const n = this.sinks.writer.purge({ backend: a.instance });
      this.current.reset(a.instance); // judge the re-synced index afresh
      what = `re-synced: purged its ${n} indexed block(s); its events rebuild the view`;
    } else if (act === 'distrust') {
      this.sinks.distrusted.add(a.instance);
      what = 'its index entries earn no credit until predictions agree again';
    } else what = 'warning only (verification.action: warn)';
    this.record({ at: this.sinks.now(), instance: a.instance, action: act, message: a.message });
    this.sinks.log(`kvrouter: hit-prediction alarm: ${a.message}; ${what}`);
  }

  private clear(a: Alarm): void {
    const was = this.sinks.distrusted.delete(a.instance);
    if (was) this.record({ at: this.sinks.now(), instance: a.instance, action: 'trust', message: a.message });
    this.sinks.log(
      `kvrouter: hit-prediction alarm cleared: instance ${a.instance}'s predictions agree with the engine again${was ? '; its index entries are credited again' : ''}`,
    );
  }

  private record(a: FeedbackLoop['actions'][number]): void {
    this.actions.push(a);
    if (this.actions.length > 100) this.actions.shift();
  }

  /** An instance left the pool. */
  forget(instance: string): void {
    this.current.reset(instance);
    this.sinks.distrusted.delete(instance);
  }
}
