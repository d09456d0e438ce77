// The closed loop: each finished request's prediction against the engine's report, through the
// verifier, into metrics, a one-line log per alarm, and the configured action. Pure wiring over
// interfaces (the index writer, the scheduler's distrust set, a log function); no I/O of its own.
import type { IndexWriter } from '../indexer/writer.js';
import type { Decision } from '../scheduler/scheduler.js';
import type { EngineUsage } from './usage-tail.js';
import { type Alarm, HitVerifier, type Verdict } from './verifier.js';

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

/** What the router predicts the engine will report as cached: whole blocks, never the last token. */
export function predictedCachedTokens(d: Decision): number {
  const c = d.chosen!;
  const reusable = Math.floor(Math.max(0, d.isl - 1) / d.blockSize) * d.blockSize;
  return Math.min(reusable, c.indexedBlocks * d.blockSize);
}

export class FeedbackLoop {
  readonly verifier: HitVerifier;
  /** Actions taken, by alarm (for /health and tests). */
  readonly actions: Array<{ at: number; instance: string; action: VerifyAction | 'trust'; message: string }> = [];

  constructor(
    private opts: FeedbackOptions,
    private readonly sinks: FeedbackSinks,
  ) {
    this.verifier = new HitVerifier({ window: opts.window, alarmRatio: opts.alarmRatio });
  }

  /** A reload may change the action or turn the check off; windows and alarms stay. */
  configure(opts: FeedbackOptions): void {
    const wasDistrusting = this.opts.action === 'distrust';
    this.opts = opts;
    if (wasDistrusting && (opts.action !== 'distrust' || !opts.enabled)) this.sinks.distrusted.clear();
  }

  /** The forward observer's `reported` hook. */
  reported(d: Decision, usage: EngineUsage | null): void {
    if (!this.opts.enabled || !d.chosen || d.isl === 0) return;
    const instance = d.chosen.instance;
    if (!usage || usage.cachedTokens === null) {
      this.sinks.judged?.(instance, 'unverified', null);
      return;
    }
    const predicted = predictedCachedTokens(d);
    const o = this.verifier.observe(instance, predicted, usage.cachedTokens, d.blockSize, this.sinks.now());
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
      this.verifier.reset(a.instance); // judge the re-synced index afresh
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
    this.sinks.log(`kvrouter: hit-prediction alarm cleared: instance ${a.instance}'s predictions agree with the engine again${was ? '; its index entries are credited again' : ''}`);
  }

  private record(a: FeedbackLoop['actions'][number]): void {
    this.actions.push(a);
    if (this.actions.length > 100) this.actions.shift();
  }

  /** An instance left the pool. */
  forget(instance: string): void {
    this.verifier.reset(instance);
    this.sinks.distrusted.delete(instance);
  }
}
