// One ZMQ SUB listener per registration: the socket, timer and replay-client side of a stream. What
// to apply, purge, replay or report is decided by the pure StreamSequencer (stream-sequencer.ts, the
// ordering rules); decoding and applying live in listener-ingest.ts. This file runs their actions.
import type { Dealer } from 'zeromq';
import { parseLiveFrames } from './decode/frames.js';
import { type IngestCounts, type IngestDeps, StreamIngest } from './listener-ingest.js';
import type { EventMetrics, ReplayResult } from './metrics.js';
import type { ListenerStatus, PublisherType, Registration, Registry } from './registry.js';
import {
  type ReplayOutcome,
  type SequencerAction,
  type SequencerOptions,
  type SequencerTimer,
  StreamSequencer,
} from './stream-sequencer.js';
import { openSubscriber, type SubTransport, type ZmqClient } from './sub-transport.js';
import { requestReplay } from './zmq-replay.js';

export interface ListenerOptions extends SequencerOptions {
  /** First reconnect delay and its cap (ZMQ doubles the delay up to the cap). */
  reconnectMs: number;
  reconnectMaxMs: number;
  /** ZMTP heartbeat interval (ms; 0 = off): detects a dead publisher host as a disconnect. */
  heartbeatMs: number;
  /** Max silence between replay replies (ms). */
  replayTimeoutMs: number;
  /** Max batches one replay may return. */
  maxReplayBatches: number;
  /** SUB receive high-water mark (libzmq client: messages queued before it drops). */
  receiveHwm: number;
  /** Largest accepted message; a larger one drops the connection (it reconnects). */
  maxMessageBytes: number;
  /** SUB implementation: built-in ZMTP (tcp/ipc, fastest), the libzmq binding, or auto. */
  zmqClient: ZmqClient;
}

export const DEFAULT_LISTENER_OPTIONS: Readonly<ListenerOptions> = {
  reconnectMs: 100,
  reconnectMaxMs: 5_000,
  heartbeatMs: 5_000,
  replayTimeoutMs: 5_000,
  maxReplayBatches: 20_000,
  maxHeld: 50_000,
  maxReplayRounds: 3,
  disconnectPurgeMs: 60_000,
  silencePurgeMs: 0,
  tailCheckMs: 1_000,
  bootstrapReplay: true,
  receiveHwm: 100_000,
  maxMessageBytes: 64 << 20, // a 1M-token prefill batch is ~3 MB of msgpack
  zmqClient: 'auto',
  onDecodeError: 'skip',
};

export interface ListenerStats extends IngestCounts {
  key: string;
  type: PublisherType;
  endpoint: string;
  replayEndpoint: string | null;
  status: ListenerStatus;
  lastError: string | null;
  /** SUB implementation in use (null when the listener could not start). */
  client: 'builtin' | 'libzmq' | null;
  /** Live messages received. */
  messages: number;
  /** Last applied publisher seq (null before the first or after a purge reset). A number so stats
   * serialize as plain JSON; seqs stay below 2^53 for centuries at any realistic batch rate. */
  lastSeq: number | null;
  gaps: number;
  replays: Record<ReplayResult, number>;
  replaying: boolean;
  connects: number;
  disconnects: number;
  lastMessageAt: number | null;
}

export interface ListenerDeps extends IngestDeps {
  registry: Registry;
  metrics: EventMetrics;
  /** Monotonic-enough ms clock for timers and lastMessageAt (default Date.now). */
  now: () => number;
}

export class ZmqListener {
  readonly ingest: StreamIngest;
  private readonly sequencer: StreamSequencer;
  private sub: SubTransport | null = null;
  private dealer: Dealer | null = null;
  private closed = false;
  private readonly disconnectTimer = new Countdown(() => this.tick('disconnect'));
  private readonly silenceTimer = new Countdown(() => this.tick('silence'));
  private readonly tailTimer = new Countdown(() => this.tick('tail'));
  private replayDone: Promise<void> = Promise.resolve();

  private messages = 0;
  private connects = 0;
  private disconnects = 0;
  private lastMessageAt: number | null = null;

  constructor(
    readonly reg: Registration,
    private readonly deps: ListenerDeps,
    private readonly opts: ListenerOptions,
  ) {
    this.ingest = new StreamIngest(reg, deps);
    this.sequencer = new StreamSequencer(reg, opts, (a) => this.run(a));
  }

  /** Connect and start receiving. Never blocks and never throws: failures become status `failed`. */
  start(): void {
    this.sequencer.handle({ kind: 'start' });
    try {
      this.sub = openSubscriber(
        this.opts.zmqClient,
        this.reg.endpoint,
        this.reg.topic,
        {
          reconnectMs: this.opts.reconnectMs,
          reconnectMaxMs: this.opts.reconnectMaxMs,
          heartbeatMs: this.opts.heartbeatMs,
          receiveHwm: this.opts.receiveHwm,
          maxMessageBytes: this.opts.maxMessageBytes,
        },
        {
          connected: () => {
            if (this.closed) return;
            this.connects++;
            this.sequencer.handle({ kind: 'connected' });
          },
          disconnected: (reason) => {
            if (this.closed) return;
            this.disconnects++;
            this.sequencer.handle({ kind: 'disconnected', reason });
          },
          retrying: (reason) => this.sequencer.handle({ kind: 'retrying', reason }),
          message: (frames) => {
            if (!this.closed) this.onFrames(frames);
          },
          failed: (reason) => this.sequencer.handle({ kind: 'failed', reason }),
        },
      );
    } catch (err) {
      this.sequencer.handle({ kind: 'failed', reason: `connect ${this.reg.endpoint}: ${(err as Error).message}` });
      this.sub = null;
    }
  }

  /** Which SUB implementation this listener uses (null before start or after a failed start). */
  get client(): 'builtin' | 'libzmq' | null {
    return this.sub?.client ?? null;
  }

  /** Stop, optionally purge what this stream published, and close every socket. */
  async stop(purge: boolean): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.sequencer.handle({ kind: 'close', purge });
    await Promise.allSettled([this.sub?.close(), this.replayDone]);
    this.sub = null;
  }

  stats(): ListenerStats {
    const lastSeq = this.sequencer.lastSeq;
    return {
      ...this.ingest.counts,
      applied: { ...this.ingest.counts.applied },
      key: this.reg.key,
      type: this.reg.type,
      endpoint: this.reg.endpoint,
      replayEndpoint: this.reg.replayEndpoint,
      status: this.sequencer.currentStatus,
      lastError: this.sequencer.currentError,
      client: this.client,
      messages: this.messages,
      lastSeq: lastSeq === null ? null : Number(lastSeq),
      gaps: this.sequencer.gaps,
      replays: { ...this.sequencer.replays },
      replaying: this.sequencer.replaying,
      connects: this.connects,
      disconnects: this.disconnects,
      lastMessageAt: this.lastMessageAt,
    };
  }

  get currentStatus(): ListenerStatus {
    return this.sequencer.currentStatus;
  }

  private onFrames(frames: readonly Uint8Array[]): void {
    this.messages++;
    this.lastMessageAt = this.deps.now();
    const f = parseLiveFrames(frames);
    if (f.ok) {
      this.sequencer.handle({ kind: 'live', seq: f.value.seq, payload: f.value.payload });
      return;
    }
    this.sequencer.handle({ kind: 'unreadable' });
    this.ingest.decodeError(f.error);
    this.sequencer.handle({ kind: 'problem', detail: this.ingest.lastProblem!, batchLost: false });
  }

  // ------------------------------------------------------------------ the sequencer's actions

  private run(a: SequencerAction): void {
    // Every live batch is an arm or two and an apply: those first.
    switch (a.kind) {
      case 'arm':
        return this.timer(a.timer).start(a.ms);
      case 'apply': {
        const before = this.ingest.problems;
        const r = this.ingest.applyPayload(a.payload, a.replayed);
        // A new problem always comes with its lastProblem.
        if (this.ingest.problems !== before)
          this.sequencer.handle({ kind: 'problem', detail: this.ingest.lastProblem!, batchLost: !r.ok });
        return;
      }
      case 'purge':
        this.ingest.purge(a.reason);
        return;
      case 'status':
        this.deps.registry.setStatus(this.reg.key, a.status, a.lastError);
        return;
      case 'replay':
        return this.startReplay(a.id, a.from);
      case 'cancelReplay':
        this.dealer?.close();
        return;
      case 'disarm':
        return this.timer(a.timer).stop();
      case 'gap':
        this.ingest.gap();
        return;
      case 'replayResult':
        this.deps.metrics.replay(a.result);
        return;
    }
  }

  // A switch, not a keyed lookup: every live batch re-arms a timer, and this is measurably cheaper.
  private timer(name: SequencerTimer): Countdown {
    switch (name) {
      case 'disconnect':
        return this.disconnectTimer;
      case 'silence':
        return this.silenceTimer;
      case 'tail':
        return this.tailTimer;
    }
  }

  private tick(timer: SequencerTimer): void {
    this.sequencer.handle({ kind: 'timer', timer, now: this.deps.now() });
  }

  private startReplay(id: number, from: bigint): void {
    const done = (outcome: ReplayOutcome): void => {
      if (!this.closed) this.sequencer.handle({ kind: 'replayed', id, outcome, now: this.deps.now() });
    };
    this.replayDone = requestReplay({
      endpoint: this.reg.replayEndpoint!,
      from,
      timeoutMs: this.opts.replayTimeoutMs,
      maxBatches: this.opts.maxReplayBatches,
      onSocket: (s) => (this.dealer = s),
    }).then(done, (err: unknown) => done({ ok: false, kind: 'failed', error: String(err) }));
  }
}

/** A restartable one-shot timer that does not keep the process alive. */
class Countdown {
  private t: NodeJS.Timeout | null = null;

  constructor(private readonly fire: () => void) {}

  /** Start, or restart from now if running (each timer always runs for the same duration). */
  start(ms: number): void {
    if (this.t) {
      this.t.refresh();
      return;
    }
    this.t = setTimeout(() => {
      this.t = null;
      this.fire();
    }, ms);
    this.t.unref();
  }

  stop(): void {
    if (this.t) clearTimeout(this.t);
    this.t = null;
  }
}
