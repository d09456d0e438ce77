// Adapter that drives one EngineCore in real time: a pass runs when the previous one has ended
// (virtual durations become timers), its KV events are published at pass start (as Dynamo's
// mocker does for vLLM) and its tokens are delivered at pass end. An idle rank holds no timer.
import { performance } from 'node:perf_hooks';
import type { EngineCore, StepOutput, TokenOutput } from '../core/engine-core.js';
import type { CoreKvEvent } from '../core/kv-events.js';
import type { SimRequestSpec } from '../core/request.js';
import { encodeBatch, type WireEncoder } from '../events/wire.js';
import type { ZmqEventPublisher } from '../events/zmq-publisher.js';
import type { EngineMetrics } from './metrics.js';

export interface RequestSink {
  onToken(out: TokenOutput): void;
  /** The engine cannot serve the request (it can never fit, or shutdown); no token follows. */
  onError(message: string): void;
}

interface Tracked {
  sink: RequestSink;
  arrival: number;
  last: number;
}

// Beyond this lag (event loop stalls) the loop stops catching up and re-anchors to the wall clock.
const MAX_LAG_MS = 50;

export class RankRunner {
  private readonly tracked = new Map<string, Tracked>();
  private timer: { cancel: () => void } | null = null;
  private closed = false;
  private readonly origin = performance.now();

  constructor(
    readonly rank: number,
    readonly core: EngineCore,
    private readonly encoder: WireEncoder,
    readonly publisher: ZmqEventPublisher | null,
    private readonly metrics: EngineMetrics,
  ) {}

  private now(): number {
    return performance.now() - this.origin;
  }

  /** Load used to pick a rank (waiting requests weigh more than running ones, as in vLLM's DP balancer). */
  get load(): number {
    const s = this.core.stats();
    return s.waiting * 4 + s.running;
  }

  submit(spec: SimRequestSpec, sink: RequestSink): void {
    if (this.closed) throw new Error('engine is shutting down');
    const now = this.now();
    this.core.add(spec, now);
    this.tracked.set(spec.id, { sink, arrival: now, last: now });
    // Deferred, so requests arriving in the same tick share the first pass.
    if (!this.timer) this.after(0, () => this.pass(this.now()));
  }

  abort(id: string): void {
    this.tracked.delete(id);
    this.core.abort(id);
  }

  resetPrefixCache(): void {
    this.publish(this.core.resetPrefixCache());
  }

  close(): void {
    this.closed = true;
    this.timer?.cancel();
    this.timer = null;
    for (const [id, t] of this.tracked) {
      this.core.abort(id);
      t.sink.onError('engine shut down');
    }
    this.tracked.clear();
  }

  private after(delayMs: number, fn: () => void): void {
    const run = (): void => {
      this.timer = null;
      if (!this.closed) fn();
    };
    if (delayMs < 1) {
      const h = setImmediate(run);
      this.timer = { cancel: () => clearImmediate(h) };
    } else {
      const h = setTimeout(run, delayMs);
      this.timer = { cancel: () => clearTimeout(h) };
    }
  }

  private pass(virtualStart: number): void {
    const wall = this.now();
    const out = this.core.step(wall - virtualStart > MAX_LAG_MS ? wall : virtualStart);
    if (!out) return;
    this.publish(out.events);
    for (const a of out.admitted) this.metrics.onAdmission(this.rank, a);
    if (out.preempted.length > 0) this.metrics.onPreempt(this.rank, out.preempted.length);
    this.after(out.endMs - wall, () => {
      this.deliver(out);
      this.pass(out.endMs);
    });
  }

  private deliver(out: StepOutput): void {
    for (const t of out.tokens) {
      const tr = this.tracked.get(t.requestId);
      if (!tr) continue;
      const now = this.now();
      this.metrics.onToken(this.rank, t.index === 0, (now - tr.arrival) / 1000, (now - tr.last) / 1000);
      tr.last = now;
      if (t.finishReason) {
        this.tracked.delete(t.requestId);
        this.metrics.onFinish(this.rank, t.finishReason, (now - tr.arrival) / 1000);
      }
      tr.sink.onToken(t);
    }
    for (const id of out.rejected) {
      const tr = this.tracked.get(id);
      this.tracked.delete(id);
      tr?.sink.onError(`request ${id} needs more KV blocks than this engine has`);
    }
  }

  private publish(events: readonly CoreKvEvent[]): void {
    if (events.length === 0 || !this.publisher) return;
    const nowMs = Date.now();
    const payload = encodeBatch(nowMs / 1000, this.encoder.render(events, nowMs), this.rank);
    this.metrics.onBatch(this.rank, this.publisher.publish(payload).dropped);
  }
}
