// One ZMQ SUB listener per registration: connects to the publisher, keeps the registry's status
// current, and keeps the index never stale. Sequencing rules (per publisher, by the 8-byte seq):
//   seq == next        apply
//   seq >  next        gap: replay [next, ...] from replay_endpoint while holding live batches, then
//                      resume; no replay endpoint, a failed replay or lost history -> purge
//   seq <  next        publisher restart: purge, then treat the new incarnation from seq 0
//   disconnect > T     purge (disconnectPurgeMs); on reconnect with replay, the last applied batch is
//                      re-read and compared byte for byte to tell a blip from a restart
// Decoding and applying live in listener-ingest.ts; this file owns sockets, timers and ordering.
import type { Dealer } from 'zeromq';
import { parseLiveFrames } from './decode/frames.js';
import { type IngestCounts, type IngestDeps, StreamIngest } from './listener-ingest.js';
import type { EventMetrics, PurgeReason, ReplayResult } from './metrics.js';
import type { ListenerStatus, PublisherType, Registration, Registry } from './registry.js';
import { openSubscriber, type SubTransport, type ZmqClient } from './sub-transport.js';
import { type ReplayBatch, type ReplayOutcome, requestReplay } from './zmq-replay.js';

export interface ListenerOptions {
  /** First reconnect delay and its cap (ZMQ doubles the delay up to the cap). */
  reconnectMs: number;
  reconnectMaxMs: number;
  /** ZMTP heartbeat interval (ms; 0 = off): detects a dead publisher host as a disconnect. */
  heartbeatMs: number;
  /** Max silence between replay replies (ms). */
  replayTimeoutMs: number;
  /** Max batches one replay may return. */
  maxReplayBatches: number;
  /** Live batches held while a replay runs; beyond it the replay is abandoned and the stream purged. */
  maxHeld: number;
  /** Consecutive replays without an in-order live batch before giving up (purge instead). */
  maxReplayRounds: number;
  /** Purge a stream disconnected this long (ms; 0 = never). */
  disconnectPurgeMs: number;
  /** Purge a connected stream silent this long (ms; 0 = never: idle engines send nothing). */
  silencePurgeMs: number;
  /**
   * With a replay endpoint, this long after the last live batch re-read from it once: a dropped
   * batch at the end of a burst has no later seq to reveal its gap (ms; 0 = off).
   */
  tailCheckMs: number;
  /** With a replay endpoint, replay the publisher's buffer from seq 0 on first connect. */
  bootstrapReplay: boolean;
  /** SUB receive high-water mark (libzmq client: messages queued before it drops). */
  receiveHwm: number;
  /** Largest accepted message; a larger one drops the connection (it reconnects). */
  maxMessageBytes: number;
  /** SUB implementation: built-in ZMTP (tcp/ipc, fastest), the libzmq binding, or auto. */
  zmqClient: ZmqClient;
  /** On an undecodable batch: skip it (counted) or also purge the stream. */
  onDecodeError: 'skip' | 'purge';
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

interface Live {
  seq: bigint;
  payload: Uint8Array;
}

// tail: the reconnect check run after a quiet period (nothing is known to be lost when it fails).
type ReplayWhy = 'gap' | 'bootstrap' | 'reconnect' | 'tail';

/** After a failed tail check, no other one for this long: a dead or absent replay endpoint would
 * otherwise stall every burst's first batches for a replay timeout. */
const TAIL_BACKOFF_MS = 60_000;

export class ZmqListener {
  readonly ingest: StreamIngest;
  private sub: SubTransport | null = null;
  private dealer: Dealer | null = null;
  private closed = false;
  private status: ListenerStatus = 'pending';
  private lastError: string | null = null;

  private next: bigint | null = null;
  private lastPayload: Uint8Array | null = null;
  private replaying = false;
  private held: Live[] = [];
  private rounds = 0;
  /** Bumped by every replay start and abandon, so a stale replay result is ignored. */
  private replayGen = 0;
  private everConnected = false;
  private tailPausedUntil = 0;

  private disconnectTimer: NodeJS.Timeout | null = null;
  private silenceTimer: NodeJS.Timeout | null = null;
  private tailTimer: NodeJS.Timeout | null = null;
  private replayDone: Promise<void> = Promise.resolve();

  private messages = 0;
  private gaps = 0;
  private connects = 0;
  private disconnects = 0;
  private lastMessageAt: number | null = null;
  private readonly replays: Record<ReplayResult, number> = { ok: 0, history_lost: 0, failed: 0, timeout: 0, overflow: 0 };

  constructor(
    readonly reg: Registration,
    private readonly deps: ListenerDeps,
    private readonly opts: ListenerOptions,
  ) {
    this.ingest = new StreamIngest(reg, deps);
  }

  /** Connect and start receiving. Never blocks and never throws: failures become status `failed`. */
  start(): void {
    this.setStatus('pending', null);
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
          connected: () => this.onConnect(),
          disconnected: (reason) => this.onDisconnect(reason),
          retrying: (reason) => {
            // Shown in /workers: a publisher that never answers is otherwise indistinguishable from a quiet one.
            if (!this.closed && this.status === 'pending') this.setStatus('pending', `cannot connect to ${this.reg.endpoint}: ${reason} (retrying)`);
          },
          message: (frames) => {
            if (!this.closed) this.onFrames(frames);
          },
          failed: (reason) => {
            if (!this.closed) this.setStatus('failed', reason);
          },
        },
      );
    } catch (err) {
      this.setStatus('failed', `connect ${this.reg.endpoint}: ${(err as Error).message}`);
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
    this.clearTimers();
    if (purge) this.ingest.purge('unregistered');
    this.dealer?.close();
    await Promise.allSettled([this.sub?.close(), this.replayDone]);
    this.sub = null;
  }

  stats(): ListenerStats {
    return {
      ...this.ingest.counts,
      applied: { ...this.ingest.counts.applied },
      key: this.reg.key,
      type: this.reg.type,
      endpoint: this.reg.endpoint,
      replayEndpoint: this.reg.replayEndpoint,
      status: this.status,
      lastError: this.lastError,
      client: this.client,
      messages: this.messages,
      lastSeq: this.next === null ? null : Number(this.next - 1n),
      gaps: this.gaps,
      replays: { ...this.replays },
      replaying: this.replaying,
      connects: this.connects,
      disconnects: this.disconnects,
      lastMessageAt: this.lastMessageAt,
    };
  }

  get currentStatus(): ListenerStatus {
    return this.status;
  }

  // ------------------------------------------------------------------ socket events

  private onConnect(): void {
    if (this.closed) return;
    this.connects++;
    if (this.disconnectTimer) clearTimeout(this.disconnectTimer);
    this.disconnectTimer = null;
    const reconnect = this.everConnected;
    this.everConnected = true;
    this.setStatus('active', this.status === 'paused' ? null : this.lastError);
    this.armSilence();
    if (this.replaying || !this.reg.replayEndpoint) return;
    if (this.next === null) {
      // First connect, or reconnect after a purge: learn what the publisher still buffers.
      if (this.opts.bootstrapReplay) this.startReplay(0n, 'bootstrap');
    } else if (reconnect && this.lastPayload !== null) {
      // Was it a blip or a restart? Re-read the last applied batch and compare (see finishReplay).
      this.startReplay(this.next - 1n, 'reconnect');
    }
  }

  private onDisconnect(reason: string): void {
    if (this.closed) return;
    this.disconnects++;
    this.setStatus('paused', `disconnected from ${this.reg.endpoint}: ${reason}`);
    if (this.silenceTimer) clearTimeout(this.silenceTimer);
    this.silenceTimer = null;
    if (this.opts.disconnectPurgeMs > 0 && !this.disconnectTimer) {
      this.disconnectTimer = setTimeout(() => {
        this.disconnectTimer = null;
        if (this.closed || this.status !== 'paused') return;
        this.purge('disconnected');
        this.forgetPosition();
      }, this.opts.disconnectPurgeMs);
      this.disconnectTimer.unref();
    }
  }

  private armSilence(): void {
    if (this.opts.silencePurgeMs <= 0) return;
    if (this.silenceTimer) this.silenceTimer.refresh();
    else {
      this.silenceTimer = setTimeout(() => {
        this.silenceTimer = null;
        if (this.closed) return;
        this.purge('silence');
        this.forgetPosition();
      }, this.opts.silencePurgeMs);
      this.silenceTimer.unref();
    }
  }

  private armTailCheck(): void {
    if (this.opts.tailCheckMs <= 0 || !this.reg.replayEndpoint) return;
    if (this.tailTimer) this.tailTimer.refresh();
    else {
      this.tailTimer = setTimeout(() => {
        this.tailTimer = null;
        // Same check as after a reconnect: the last applied batch must still be there, and
        // anything after it is applied (a restarted publisher is purged).
        if (this.closed || this.replaying || this.status !== 'active' || this.next === null || this.lastPayload === null) return;
        if (this.deps.now() < this.tailPausedUntil) return;
        this.startReplay(this.next - 1n, 'tail');
      }, this.opts.tailCheckMs);
      this.tailTimer.unref();
    }
  }

  private onFrames(frames: readonly Uint8Array[]): void {
    this.messages++;
    this.lastMessageAt = this.deps.now();
    if (this.status !== 'active') this.setStatus('active', this.status === 'paused' ? null : this.lastError);
    this.armSilence();
    this.armTailCheck();
    const f = parseLiveFrames(frames);
    if (!f.ok) {
      // The seq is unknown: the next good batch shows the gap and replay recovers the batch.
      this.ingest.decodeError(f.error);
      this.noteProblem();
      return;
    }
    const { seq, payload } = f.value;
    if (seq === null) {
      this.apply(payload, false);
      return;
    }
    if (this.replaying) {
      this.held.push({ seq, payload });
      if (this.held.length > this.opts.maxHeld) this.abandonReplay();
      return;
    }
    this.ingestLive({ seq, payload }, false);
  }

  // ------------------------------------------------------------------ ordering

  private ingestLive(m: Live, fromHeld: boolean): void {
    if (this.next === null || m.seq === this.next) {
      if (this.next !== null && !fromHeld) this.rounds = 0;
      this.applyAt(m, false);
      return;
    }
    if (m.seq < this.next) {
      if (fromHeld) return; // already recovered through the replay
      // seq restarts at 0 when the engine restarts: everything it published before is gone.
      this.purge('seq_regression');
      if (m.seq === 0n || !this.reg.replayEndpoint) {
        this.applyAt(m, false);
        return;
      }
      this.next = 0n; // and recover the new incarnation's first batches through replay
    }
    // A gap [next, m.seq).
    this.gaps++;
    this.ingest.gap();
    if (this.reg.replayEndpoint && this.rounds < this.opts.maxReplayRounds) {
      this.rounds++;
      this.held.push(m);
      this.startReplay(this.next, 'gap');
      return;
    }
    this.purge(this.reg.replayEndpoint ? 'replay_rounds' : 'gap_no_replay');
    this.applyAt(m, false);
  }

  private applyAt(m: Live, replayed: boolean): void {
    this.apply(m.payload, replayed);
    this.next = m.seq + 1n;
    this.lastPayload = m.payload;
  }

  private apply(payload: Uint8Array, replayed: boolean): void {
    const before = this.ingest.problems;
    const r = this.ingest.applyPayload(payload, replayed);
    if (this.ingest.problems !== before) this.noteProblem();
    if (!r.ok && this.opts.onDecodeError === 'purge') this.purge('decode_error');
  }

  // ------------------------------------------------------------------ replay

  private startReplay(from: bigint, why: ReplayWhy): void {
    this.replaying = true;
    const gen = ++this.replayGen;
    const endpoint = this.reg.replayEndpoint!;
    this.replayDone = requestReplay({
      endpoint,
      from,
      timeoutMs: this.opts.replayTimeoutMs,
      maxBatches: this.opts.maxReplayBatches,
      onSocket: (s) => (this.dealer = s),
    }).then(
      (res) => {
        if (!this.closed && gen === this.replayGen) this.finishReplay(from, why, res);
      },
      (err: unknown) => {
        if (!this.closed && gen === this.replayGen) this.finishReplay(from, why, { ok: false, kind: 'failed', error: String(err) });
      },
    );
  }

  private countReplay(r: ReplayResult): void {
    this.replays[r]++;
    this.deps.metrics.replay(r);
  }

  private finishReplay(from: bigint, why: ReplayWhy, res: ReplayOutcome): void {
    if (!res.ok && why === 'tail') {
      // Only a precaution failed: keep the stream and its position, say so, and pause the checks.
      this.countReplay(res.kind);
      this.tailPausedUntil = this.deps.now() + TAIL_BACKOFF_MS;
      this.noteProblem(`tail check: ${res.error}`);
      this.endReplay();
      return;
    }
    if (!res.ok) {
      this.countReplay(res.kind);
      this.lastError = res.error;
      this.noteProblem(res.error);
      // A bootstrap that fails loses nothing we had; any other failure leaves a hole.
      if (why !== 'bootstrap') this.purge('replay_failed');
      this.forgetPosition();
      this.endReplay();
      return;
    }
    let batches: ReplayBatch[] = res.batches;
    if (why === 'reconnect' || why === 'tail') {
      const first = batches[0];
      if (first && first.seq === from && this.lastPayload !== null && Buffer.compare(first.payload, this.lastPayload) === 0) {
        batches = batches.slice(1);
        from += 1n;
      } else {
        // The publisher behind the endpoint is not the one we followed (restart) or lost our place.
        this.countReplay('history_lost');
        this.purge('publisher_changed');
        this.forgetPosition();
        // Learn the new incarnation from its buffer, as on a first connect (if that is wanted).
        if (this.opts.bootstrapReplay) this.startReplay(0n, 'bootstrap');
        else this.endReplay();
        return;
      }
    }
    const first = batches[0]?.seq;
    // A gap replay must return `from` itself. After a verified re-read (reconnect, tail check) an
    // empty rest means nothing was missed; only a hole after the verified batch is lost history.
    const lost = why === 'gap' ? first === undefined || first > from : why !== 'bootstrap' && first !== undefined && first > from;
    if (lost) {
      // The publisher no longer holds `from` (window exceeded) or never sent it: history is lost.
      this.countReplay('history_lost');
      this.purge('history_lost');
      this.forgetPosition();
    } else {
      this.countReplay('ok');
    }
    for (const b of batches) {
      if (this.next !== null && b.seq < this.next) continue;
      if (this.next !== null && b.seq > this.next) {
        // A permanent hole inside the publisher's buffer (a batch it failed to encode).
        this.purge('history_lost');
      }
      this.applyAt(b, true);
    }
    this.endReplay();
  }

  private endReplay(): void {
    this.replaying = false;
    this.drain();
  }

  /** Feed held live batches in arrival order; stops holding again if one of them starts a replay. */
  private drain(): void {
    const held = this.held;
    this.held = [];
    for (let i = 0; i < held.length; i++) {
      if (this.replaying) {
        // Draining hit another gap and started a new replay: keep holding the rest.
        for (let j = i; j < held.length; j++) this.held.push(held[j]);
        return;
      }
      this.ingestLive(held[i], true);
    }
  }

  /** Too many live batches piled up behind a replay: give up on it and start over from live. */
  private abandonReplay(): void {
    this.countReplay('overflow');
    this.replaying = false;
    this.replayGen++;
    this.dealer?.close();
    this.purge('held_overflow');
    this.forgetPosition();
    this.drain();
  }

  // ------------------------------------------------------------------ helpers

  private purge(reason: PurgeReason): void {
    this.ingest.purge(reason);
    if (reason !== 'unregistered' && reason !== 'seq_regression') this.lastError = `purged: ${reason}`;
    if (this.status === 'active' || this.status === 'paused') this.setStatus(this.status, this.lastError);
  }

  /** After a purge that is not followed by an applied batch: the next batch starts a new baseline. */
  private forgetPosition(): void {
    this.next = null;
    this.lastPayload = null;
  }

  private noteProblem(detail?: string): void {
    this.lastError = detail ?? this.ingest.lastProblem;
    this.deps.registry.setStatus(this.reg.key, this.status, this.lastError);
  }

  private setStatus(status: ListenerStatus, lastError: string | null): void {
    this.status = status;
    this.lastError = lastError;
    this.deps.registry.setStatus(this.reg.key, status, lastError);
  }

  private clearTimers(): void {
    if (this.disconnectTimer) clearTimeout(this.disconnectTimer);
    if (this.silenceTimer) clearTimeout(this.silenceTimer);
    if (this.tailTimer) clearTimeout(this.tailTimer);
    this.disconnectTimer = null;
    this.silenceTimer = null;
    this.tailTimer = null;
  }
}
