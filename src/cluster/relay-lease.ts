// Leadership among `kvrouter relay --ha` processes of one stream: a NATS KV entry with a TTL. The
// holder renews it (compare-and-set on its revision) every third of the lease; a standby tries to
// create it, which succeeds once the entry expired or was deleted (a leader that stops cleanly
// deletes it, so the handover is immediate).
//
// Fencing: holding a revision is not enough to publish. The lease counts as valid only until
// (start of the last successful renewal) + TTL - margin, a time by which the server cannot yet
// have expired the entry; a renewal that is late (slow network, a blocked event loop) lets that
// pass, and the relay stops publishing at once, before a standby can take over. A renewal that
// fails for any reason steps down.
import type { KV } from 'nats';

export interface LeaseEvents {
  /** Leadership changed (true: we hold the lease now). */
  changed(leader: boolean): void;
}

const enc = new TextEncoder();

export class RelayLease {
  private rev: number | null = null;
  private validUntil = 0;
  private timer: NodeJS.Timeout | null = null;
  private attempt: Promise<void> | null = null;
  private stopped = false;

  /**
   * @param ttlMs the bucket's TTL (the server's expiry), which may differ from what this relay
   *   was asked for when another relay created the bucket first.
   */
  constructor(
    private readonly kv: KV,
    readonly key: string,
    private readonly holder: string,
    readonly ttlMs: number,
    private readonly events: LeaseEvents,
    private readonly now: () => number = Date.now,
  ) {}

  /** Holding the lease and inside its validity: publishing is safe. */
  get valid(): boolean {
    return this.rev !== null && this.now() < this.validUntil;
  }

  get held(): boolean {
    return this.rev !== null;
  }

  start(): void {
    this.timer = setInterval(() => void this.tick(), Math.max(20, Math.floor(this.ttlMs / 3)));
    this.timer.unref();
    void this.tick();
  }

  /** One renewal or acquisition attempt (never two at once). */
  tick(): Promise<void> {
    if (this.stopped) return Promise.resolve();
    if (this.attempt) return this.attempt;
    this.attempt = this.run().finally(() => (this.attempt = null));
    return this.attempt;
  }

  private async run(): Promise<void> {
    const sentAt = this.now();
    // The server counts the TTL from when it stores the entry, which is after sentAt.
    const until = sentAt + this.ttlMs - Math.max(50, Math.floor(this.ttlMs / 10));
    if (this.rev !== null) {
      try {
        this.rev = await this.kv.update(this.key, enc.encode(this.holder), this.rev);
        this.validUntil = until;
      } catch {
        this.rev = null;
        if (!this.stopped) this.events.changed(false);
      }
      return;
    }
    try {
      this.rev = await this.kv.create(this.key, enc.encode(this.holder));
    } catch {
      return; // another relay holds it (or NATS is away): stay standby
    }
    this.validUntil = until;
    if (!this.stopped) this.events.changed(true);
  }

  /** Stop competing; a leader deletes the entry so a standby takes over at its next attempt. */
  async release(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.attempt?.catch(() => undefined); // its result decides which revision to delete
    const rev = this.rev;
    this.rev = null;
    if (rev !== null) await this.kv.delete(this.key, { previousSeq: rev }).catch(() => undefined);
  }
}
