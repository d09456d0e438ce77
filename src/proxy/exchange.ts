// One exchange with an upstream on undici's handler API. The response body reaches the proxy chunk
// by chunk through a sink (false = pause until resume()), instead of through a Readable stream and
// a promise per chunk as `pool.request()` gives it: measured at about 30 µs less CPU per request
// (docs/profile.md). Transport errors, timeouts and aborts arrive as rejections, as with request().
import type { IncomingHttpHeaders } from 'node:http';
import { type Dispatcher, errors } from 'undici';

export interface ExchangeHead {
  statusCode: number;
  headers: IncomingHttpHeaders;
}

export class UpstreamExchange implements Dispatcher.DispatchHandler {
  /** Resolves at the response's status and headers; rejects if the exchange fails before them. */
  readonly head: Promise<ExchangeHead>;
  private controller: Dispatcher.DispatchController | null = null;
  private abortReason: Error | null = null;
  private headDone = false;
  private resolveHead!: (h: ExchangeHead) => void;
  private rejectHead!: (e: Error) => void;
  /** Chunks that came before a sink (they often share a read with the head). */
  private early: Buffer[] = [];
  private sink: ((chunk: Buffer) => boolean) | null = null;
  private ended = false;
  private failure: Error | null = null;
  private settleBody: { resolve: () => void; reject: (e: Error) => void } | null = null;
  private onEnd: (() => void) | null = null;

  constructor(dispatcher: Dispatcher, opts: Dispatcher.DispatchOptions) {
    this.head = new Promise<ExchangeHead>((resolve, reject) => {
      this.resolveHead = resolve;
      this.rejectHead = reject;
    });
    // The caller awaits `head`; a rejection before that must not count as unhandled.
    this.head.catch(() => undefined);
    dispatcher.dispatch(opts, this);
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.controller = controller;
    if (this.abortReason) controller.abort(this.abortReason);
  }

  onResponseStart(_c: Dispatcher.DispatchController, statusCode: number, headers: IncomingHttpHeaders): void {
    if (statusCode < 200) return; // 1xx: the real head follows
    this.headDone = true;
    this.resolveHead({ statusCode, headers });
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.sink === null) this.early.push(chunk);
    else if (!this.sink(chunk)) controller.pause();
  }

  onResponseEnd(): void {
    this.ended = true;
    this.onEnd?.();
    this.settleBody?.resolve();
  }

  onResponseError(_c: Dispatcher.DispatchController, err: Error): void {
    if (!this.headDone) {
      this.headDone = true;
      this.rejectHead(err);
      return;
    }
    this.failure = err;
    this.settleBody?.reject(err);
  }

  /**
   * Hand the body to `sink` chunk by chunk (false pauses until resume()); resolves at its end.
   * `onEnd` runs at the end itself, in the same turn as the last chunk: a response ended there leaves
   * in the same socket write as that chunk (a promise continuation would come after Node has written
   * the turn's data, and cost a write of its own).
   */
  pipe(sink: (chunk: Buffer) => boolean, onEnd?: () => void): Promise<void> {
    this.sink = sink;
    this.onEnd = onEnd ?? null;
    let paused = false;
    for (const c of this.early.splice(0)) if (!sink(c)) paused = true;
    if (paused) this.controller?.pause();
    if (this.failure) return Promise.reject(this.failure);
    if (this.ended) {
      onEnd?.();
      return Promise.resolve();
    }
    return new Promise<void>((resolve, reject) => (this.settleBody = { resolve, reject }));
  }

  /** The whole body as text (an error answer read before a retry). */
  async text(): Promise<string> {
    const chunks: Buffer[] = [];
    await this.pipe((c) => (chunks.push(c), true));
    return Buffer.concat(chunks).toString('utf8');
  }

  resume(): void {
    this.controller?.resume();
  }

  /** End the exchange (the client went away, the attempt was cut): `head` or `pipe` rejects. */
  abort(reason: Error = new errors.RequestAbortedError()): void {
    if (this.controller) this.controller.abort(reason);
    else this.abortReason ??= reason;
  }
}
