// The "never stale" state machine of one publisher's stream, without sockets, timers or clocks:
// socket events, live batches, replay outcomes and timer ticks go in; what to do comes out as actions
// (zmq-listener.ts runs them). Sequencing rules (per publisher, by the 8-byte seq):
//   seq == next        apply
//   seq >  next        gap: replay [next, ...] from replay_endpoint while holding live batches, then
//                      resume; no replay endpoint, a failed replay or lost history -> purge
//   seq <  next        publisher restart: purge, then treat the new incarnation from seq 0
//   disconnect > T     purge (disconnectPurgeMs); on reconnect with replay, the last applied batch is
//                      re-read and compared byte for byte to tell a blip from a restart
import type { PurgeReason, ReplayResult } from './metrics.js';
import type { ListenerStatus, Registration } from './registry.js';

/** The options the sequencer decides with (a subset of ListenerOptions). */
export interface SequencerOptions {
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
  /** On an undecodable batch: skip it (counted) or also purge the stream. */
  onDecodeError: 'skip' | 'purge';
}

/** A batch with its publisher seq, live or replayed. */
export interface SeqBatch {
  seq: bigint;
  payload: Uint8Array;
}

/** What one replay request to the publisher's replay endpoint came back with. */
export type ReplayOutcome =
  | { ok: true; batches: SeqBatch[] }
  | { ok: false; kind: 'timeout' | 'failed' | 'overflow'; error: string };

export type SequencerTimer = 'disconnect' | 'silence' | 'tail';

export type SequencerInput =
  /** The listener starts (status pending). */
  | { kind: 'start' }
  | { kind: 'connected' }
  | { kind: 'disconnected'; reason: string }
  /** A connection attempt failed; the transport retries. */
  | { kind: 'retrying'; reason: string }
  /** The transport cannot go on. */
  | { kind: 'failed'; reason: string }
  /** A live batch; seq null for publishers that send none (they cannot be gap-checked). */
  | { kind: 'live'; seq: bigint | null; payload: Uint8Array }
  /** A live message whose seq could not be read: traffic all the same, and the next batch shows its gap. */
  | { kind: 'unreadable' }
  /**
   * Applying (or reading) a batch found a problem. `batchLost`: the batch's seq was consumed, so
   * with onDecodeError 'purge' its loss purges the stream. May arrive while an `apply` action runs.
   */
  | { kind: 'problem'; detail: string; batchLost: boolean }
  | { kind: 'timer'; timer: SequencerTimer; now: number }
  /** The outcome of the `replay` action with this id. */
  | { kind: 'replayed'; id: number; outcome: ReplayOutcome; now: number }
  /** Stop for good; `purge` drops what the stream published (unregistered). */
  | { kind: 'close'; purge: boolean };

export type SequencerAction =
  /** Decode and apply a batch payload; `replayed` when it came from a replay. */
  | { kind: 'apply'; payload: Uint8Array; replayed: boolean }
  /** Drop every block the stream published. */
  | { kind: 'purge'; reason: PurgeReason }
  /** Report the registration's status and last error. */
  | { kind: 'status'; status: ListenerStatus; lastError: string | null }
  /** Ask the replay endpoint for every batch from `from`; answer with a `replayed` input of this id. */
  | { kind: 'replay'; id: number; from: bigint }
  /** Close the running replay's socket: its outcome is no longer wanted. */
  | { kind: 'cancelReplay' }
  /** (Re)start a timer: a `timer` input is due `ms` from now. */
  | { kind: 'arm'; timer: SequencerTimer; ms: number }
  | { kind: 'disarm'; timer: SequencerTimer }
  /** Count a seq gap (kv_events_applied_total{status="gap"}). */
  | { kind: 'gap' }
  /** Count a replay by result (kv_events_replays_total). */
  | { kind: 'replayResult'; result: ReplayResult };

// tail: the re-read run after a quiet period (nothing is known to be lost when it fails).
type ReplayWhy = 'gap' | 'bootstrap' | 'reconnect' | 'tail';

/** After a failed tail check, no other one for this long: a dead or absent replay endpoint would
 * otherwise stall every burst's first batches for a replay timeout. */
export const TAIL_BACKOFF_MS = 60_000;

/**
 * One stream's ordering and recovery. Actions are emitted in the order they must run, synchronously,
 * so an `apply` whose outcome comes back as a `problem` input lands exactly where it happened
 * (a `problem` touches only the status and last error, never the ordering state).
 */
export class StreamSequencer {
  private status: ListenerStatus = 'pending';
  private lastError: string | null = null;
  private closed = false;

  private next: bigint | null = null;
  private lastPayload: Uint8Array | null = null;
  /** The replay whose outcome is awaited (null: none; an abandoned replay's outcome is ignored). */
  private replay: { id: number; from: bigint; why: ReplayWhy } | null = null;
  private replayIds = 0;
  private held: SeqBatch[] = [];
  private rounds = 0;
  private everConnected = false;
  private tailPausedUntil = 0;
  private readonly timers: Record<SequencerTimer, TimerState>;

  private gapCount = 0;
  private readonly replayCounts: Record<ReplayResult, number> = {
    ok: 0,
    history_lost: 0,
    failed: 0,
    timeout: 0,
    overflow: 0,
  };

  constructor(
    private readonly reg: Pick<Registration, 'endpoint' | 'replayEndpoint'>,
    private readonly opts: SequencerOptions,
    private readonly emit: (action: SequencerAction) => void,
  ) {
    this.timers = {
      disconnect: new TimerState('disconnect', opts.disconnectPurgeMs),
      silence: new TimerState('silence', opts.silencePurgeMs),
      tail: new TimerState('tail', opts.tailCheckMs),
    };
  }

  /** Feed one input; its actions reach `emit`, in order, before this returns. After `close`, nothing. */
  handle(input: SequencerInput): void {
    if (this.closed) return;
    switch (input.kind) {
      case 'live': // first: nearly every input is one
        return this.onLive(input.seq, input.payload);
      case 'start':
        return this.setStatus('pending', null);
      case 'connected':
        return this.onConnect();
      case 'disconnected':
        return this.onDisconnect(input.reason);
      case 'retrying':
        // Shown in /workers: a publisher that never answers is otherwise indistinguishable from a quiet one.
        if (this.status === 'pending')
          this.setStatus('pending', `cannot connect to ${this.reg.endpoint}: ${input.reason} (retrying)`);
        return;
      case 'failed':
        return this.setStatus('failed', input.reason);
      case 'unreadable':
        return this.received();
      case 'problem':
        this.noteProblem(input.detail);
        if (input.batchLost && this.opts.onDecodeError === 'purge') this.purge('decode_error');
        return;
      case 'timer': {
        const t = this.timers[input.timer];
        if (!t.armed) return; // disarmed before it fired
        t.armed = false;
        return this.onTimer(input.timer, input.now);
      }
      case 'replayed':
        if (this.replay !== null && this.replay.id === input.id)
          this.finishReplay(this.replay.from, this.replay.why, input.outcome, input.now);
        return;
      case 'close':
        return this.close(input.purge);
    }
  }

  get currentStatus(): ListenerStatus {
    return this.status;
  }

  get currentError(): string | null {
    return this.lastError;
  }

  /** Last applied seq (null before the first batch or after a purge reset). */
  get lastSeq(): bigint | null {
    return this.next === null ? null : this.next - 1n;
  }

  get replaying(): boolean {
    return this.replay !== null;
  }

  get gaps(): number {
    return this.gapCount;
  }

  get replays(): Readonly<Record<ReplayResult, number>> {
    return this.replayCounts;
  }

  // ------------------------------------------------------------------ socket events

  private onConnect(): void {
    this.disarm(this.timers.disconnect);
    const reconnect = this.everConnected;
    this.everConnected = true;
    this.setStatus('active', this.status === 'paused' ? null : this.lastError);
    this.armSilence();
    if (this.replay !== null || !this.reg.replayEndpoint) return;
    if (this.next === null) {
      // First connect, or reconnect after a purge: learn what the publisher still buffers.
      if (this.opts.bootstrapReplay) this.startReplay(0n, 'bootstrap');
    } else if (reconnect && this.lastPayload !== null) {
      // Was it a blip or a restart? Re-read the last applied batch and compare (see finishReplay).
      this.startReplay(this.next - 1n, 'reconnect');
    }
  }

  private onDisconnect(reason: string): void {
    this.setStatus('paused', `disconnected from ${this.reg.endpoint}: ${reason}`);
    this.disarm(this.timers.silence);
    // Not re-armed by a later disconnect: the deadline counts from the first one.
    if (this.opts.disconnectPurgeMs > 0 && !this.timers.disconnect.armed) this.arm(this.timers.disconnect);
  }

  /** Any live message: the stream is active and not silent. */
  private received(): void {
    if (this.status !== 'active') this.setStatus('active', this.status === 'paused' ? null : this.lastError);
    this.armSilence();
    if (this.opts.tailCheckMs > 0 && this.reg.replayEndpoint) this.arm(this.timers.tail);
  }

  private armSilence(): void {
    if (this.opts.silencePurgeMs > 0) this.arm(this.timers.silence);
  }

  private onLive(seq: bigint | null, payload: Uint8Array): void {
    this.received();
    if (seq === null) {
      this.emit({ kind: 'apply', payload, replayed: false });
      return;
    }
    if (this.replay !== null) {
      this.held.push({ seq, payload });
      if (this.held.length > this.opts.maxHeld) this.abandonReplay();
      return;
    }
    this.ingestLive(seq, payload, false);
  }

  private onTimer(timer: SequencerTimer, now: number): void {
    switch (timer) {
      case 'disconnect':
        if (this.status !== 'paused') return;
        this.purge('disconnected');
        return this.forgetPosition();
      case 'silence':
        this.purge('silence');
        return this.forgetPosition();
      case 'tail':
        // Same check as after a reconnect: the last applied batch must still be there, and
        // anything after it is applied (a restarted publisher is purged).
        if (this.replay !== null || this.status !== 'active' || this.next === null || this.lastPayload === null) return;
        if (now < this.tailPausedUntil) return;
        return this.startReplay(this.next - 1n, 'tail');
    }
  }

  private close(purge: boolean): void {
    this.closed = true;
    this.disarm(this.timers.disconnect);
    this.disarm(this.timers.silence);
    this.disarm(this.timers.tail);
    // Not this.purge: a removed registration has no status left to report.
    if (purge) this.emit({ kind: 'purge', reason: 'unregistered' });
    if (this.replay !== null) this.emit({ kind: 'cancelReplay' });
  }

  // ------------------------------------------------------------------ ordering

  // seq and payload apart, not a SeqBatch: an in-order batch (nearly all of them) allocates nothing here.
  private ingestLive(seq: bigint, payload: Uint8Array, fromHeld: boolean): void {
    if (this.next === null || seq === this.next) {
      if (this.next !== null && !fromHeld) this.rounds = 0;
      this.applyAt(seq, payload, false);
      return;
    }
    if (seq < this.next) {
      if (fromHeld) return; // already recovered through the replay
      // seq restarts at 0 when the engine restarts: everything it published before is gone.
      this.purge('seq_regression');
      if (seq === 0n || !this.reg.replayEndpoint) {
        this.applyAt(seq, payload, false);
        return;
      }
      this.next = 0n; // and recover the new incarnation's first batches through replay
    }
    // A gap [next, seq).
    this.gapCount++;
    this.emit({ kind: 'gap' });
    if (this.reg.replayEndpoint && this.rounds < this.opts.maxReplayRounds) {
      this.rounds++;
      this.held.push({ seq, payload });
      this.startReplay(this.next, 'gap');
      return;
    }
    this.purge(this.reg.replayEndpoint ? 'replay_rounds' : 'gap_no_replay');
    this.applyAt(seq, payload, false);
  }

  private applyAt(seq: bigint, payload: Uint8Array, replayed: boolean): void {
    this.emit({ kind: 'apply', payload, replayed });
    this.next = seq + 1n;
    this.lastPayload = payload;
  }

  // ------------------------------------------------------------------ replay

  private startReplay(from: bigint, why: ReplayWhy): void {
    const id = ++this.replayIds;
    this.replay = { id, from, why };
    this.emit({ kind: 'replay', id, from });
  }

  private countReplay(result: ReplayResult): void {
    this.replayCounts[result]++;
    this.emit({ kind: 'replayResult', result });
  }

  private finishReplay(from: bigint, why: ReplayWhy, res: ReplayOutcome, now: number): void {
    if (!res.ok && why === 'tail') {
      // Only a precaution failed: keep the stream and its position, say so, and pause the checks.
      this.countReplay(res.kind);
      this.tailPausedUntil = now + TAIL_BACKOFF_MS;
      this.noteProblem(`tail check: ${res.error}`);
      this.endReplay();
      return;
    }
    if (!res.ok) {
      this.countReplay(res.kind);
      this.noteProblem(res.error);
      // A bootstrap that fails loses nothing we had; any other failure leaves a hole.
      if (why !== 'bootstrap') this.purge('replay_failed');
      this.forgetPosition();
      this.endReplay();
      return;
    }
    let batches = res.batches;
    if (why === 'reconnect' || why === 'tail') {
      const first = batches[0];
      if (
        first &&
        first.seq === from &&
        this.lastPayload !== null &&
        Buffer.compare(first.payload, this.lastPayload) === 0
      ) {
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
    const lost =
      why === 'gap' ? first === undefined || first > from : why !== 'bootstrap' && first !== undefined && first > from;
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
      this.applyAt(b.seq, b.payload, true);
    }
    this.endReplay();
  }

  private endReplay(): void {
    this.replay = null;
    this.drain();
  }

  /** Feed held live batches in arrival order; stops holding again if one of them starts a replay. */
  private drain(): void {
    const held = this.held;
    this.held = [];
    for (let i = 0; i < held.length; i++) {
      if (this.replay !== null) {
        // Draining hit another gap and started a new replay: keep holding the rest.
        for (let j = i; j < held.length; j++) this.held.push(held[j]);
        return;
      }
      this.ingestLive(held[i].seq, held[i].payload, true);
    }
  }

  /** Too many live batches piled up behind a replay: give up on it and start over from live. */
  private abandonReplay(): void {
    this.countReplay('overflow');
    this.replay = null;
    this.emit({ kind: 'cancelReplay' });
    this.purge('held_overflow');
    this.forgetPosition();
    this.drain();
  }

  // ------------------------------------------------------------------ helpers

  private purge(reason: PurgeReason): void {
    this.emit({ kind: 'purge', reason });
    // A regression is followed at once by the new incarnation: nothing to report as an error.
    if (reason !== 'seq_regression') this.lastError = `purged: ${reason}`;
    if (this.status === 'active' || this.status === 'paused') this.setStatus(this.status, this.lastError);
  }

  /** After a purge that is not followed by an applied batch: the next batch starts a new baseline. */
  private forgetPosition(): void {
    this.next = null;
    this.lastPayload = null;
  }

  private noteProblem(detail: string): void {
    this.lastError = detail;
    this.emit({ kind: 'status', status: this.status, lastError: detail });
  }

  private setStatus(status: ListenerStatus, lastError: string | null): void {
    this.status = status;
    this.lastError = lastError;
    this.emit({ kind: 'status', status, lastError });
  }

  private arm(t: TimerState): void {
    t.armed = true;
    this.emit(t.arm);
  }

  private disarm(t: TimerState): void {
    if (!t.armed) return;
    t.armed = false;
    this.emit(t.disarm);
  }
}

/** Whether a timer is armed, and its actions: every live batch re-arms the tail and silence timers,
 * so they are built once, not per batch. */
class TimerState {
  armed = false;
  readonly arm: SequencerAction;
  readonly disarm: SequencerAction;

  constructor(timer: SequencerTimer, ms: number) {
    this.arm = { kind: 'arm', timer, ms };
    this.disarm = { kind: 'disarm', timer };
  }
}
