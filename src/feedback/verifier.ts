// Closed-loop check of the router's cache predictions: for each proxied request, the prefix the
// index said the chosen instance holds against what the engine then reported as cached. A few
// misses are normal (an eviction between routing and admission, a sibling still prefilling); the
// same direction in most of the last `window` informative requests is not: the index is scoped or
// fed wrongly for that instance (block size, hash seed, chat template, LoRA, salt), and every
// decision that relies on it is wrong without any error. Pure: callers pass every observation.

export type Verdict = 'agree' | 'over' | 'under';
export type Direction = 'over' | 'under';

export interface VerifierOptions {
  /** Informative requests judged per instance (the alarm needs a full window). */
  window: number;
  /** Share of the window wrong in one direction that raises the alarm (cleared below half of it). */
  alarmRatio: number;
}

export interface Alarm {
  instance: string;
  direction: Direction;
  /** Requests wrong in that direction, of `of` in the window. */
  count: number;
  of: number;
  /** Mean predicted and reported cached tokens over those requests. */
  meanPredicted: number;
  meanReported: number;
  since: number;
  message: string;
}

interface Sample {
  verdict: Verdict;
  predicted: number;
  reported: number;
}

interface InstanceState {
  samples: Sample[];
  next: number;
  /** Verdicts in the window (kept as samples come and go: no scan per request). */
  inWindow: Record<Verdict, number>;
  alarm: Alarm | null;
  totals: Record<Verdict, number>;
}

export interface Observation {
  verdict: Verdict;
  /** reported - predicted, tokens. */
  error: number;
  /** The instance's alarm changed with this observation (raised or cleared). */
  raised: Alarm | null;
  cleared: Alarm | null;
}

export const DEFAULT_VERIFIER: VerifierOptions = { window: 50, alarmRatio: 0.8 };

/**
 * The engine counts whole blocks of its own size and never the prompt's last token; anything
 * within one block of the prediction agrees.
 */
export function judge(predicted: number, reported: number, tolerance: number): Verdict {
  if (reported < predicted - tolerance) return 'over';
  if (reported > predicted + tolerance) return 'under';
  return 'agree';
}

export class HitVerifier {
  private readonly instances = new Map<string, InstanceState>();

  constructor(private readonly opts: VerifierOptions = DEFAULT_VERIFIER) {}

  /**
   * One request: `predicted` cached tokens (the index's view, before any distrust), `reported` by
   * the engine, `tolerance` in tokens (a block). Requests where neither side expects a hit say
   * nothing about the index and are not judged.
   */
  observe(instance: string, predicted: number, reported: number, tolerance: number, now: number): Observation | null {
    if (Math.max(predicted, reported) <= tolerance) return null;
    let st = this.instances.get(instance);
    if (!st)
      this.instances.set(
        instance,
        (st = {
          samples: [],
          next: 0,
          inWindow: { agree: 0, over: 0, under: 0 },
          alarm: null,
          totals: { agree: 0, over: 0, under: 0 },
        }),
      );
    const verdict = judge(predicted, reported, tolerance);
    st.totals[verdict]++;
    const s = { verdict, predicted, reported };
    if (st.samples.length < this.opts.window) st.samples.push(s);
    else {
      st.inWindow[st.samples[st.next].verdict]--;
      st.samples[st.next] = s;
    }
    st.inWindow[verdict]++;
    st.next = (st.next + 1) % this.opts.window;
    const out: Observation = { verdict, error: reported - predicted, raised: null, cleared: null };
    const n = st.samples.length;
    const wrong = (d: Direction) => st!.samples.filter((x) => x.verdict === d);
    if (st.alarm) {
      if (st.inWindow[st.alarm.direction] < (this.opts.alarmRatio / 2) * n) {
        out.cleared = st.alarm;
        st.alarm = null;
      } else st.alarm = this.alarmOf(instance, st.alarm.direction, wrong(st.alarm.direction), n, st.alarm.since);
    } else if (n >= this.opts.window) {
      for (const d of ['over', 'under'] as const) {
        if (st.inWindow[d] >= this.opts.alarmRatio * n) {
          st.alarm = out.raised = this.alarmOf(instance, d, wrong(d), n, now);
          break;
        }
      }
    }
    return out;
  }

  private alarmOf(instance: string, direction: Direction, w: Sample[], of: number, since: number): Alarm {
    const meanPredicted = w.reduce((a, x) => a + x.predicted, 0) / w.length;
    const meanReported = w.reduce((a, x) => a + x.reported, 0) / w.length;
    const n = (x: number) => Math.round(x).toLocaleString('en-US');
    const hint =
      direction === 'over'
        ? 'the index credits blocks the engine does not reuse: check block_size, hash seed, LoRA / cache_salt scoping, or an engine that lost its cache without a cleared event'
        : 'the engine reuses blocks the index does not know: check the chat template and tokenizer, block_size, hash seed, or KV events that do not arrive';
    return {
      instance,
      direction,
      count: w.length,
      of,
      meanPredicted,
      meanReported,
      since,
      message: `instance ${instance}: predicted ${n(meanPredicted)} cached tokens, engine reported ${n(meanReported)} in ${w.length} of ${of} requests: ${hint}`,
    };
  }

  /** Start the instance's window afresh (after a re-sync, or when it leaves the pool). */
  reset(instance: string): void {
    this.instances.delete(instance);
  }

  alarm(instance: string): Alarm | null {
    return this.instances.get(instance)?.alarm ?? null;
  }

  alarms(): Alarm[] {
    return [...this.instances.values()].flatMap((s) => (s.alarm ? [s.alarm] : []));
  }

  totals(instance: string): Record<Verdict, number> {
    return { ...(this.instances.get(instance)?.totals ?? { agree: 0, over: 0, under: 0 }) };
  }
}
