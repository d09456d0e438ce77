// Leadership among `kvrouter relay --ha` processes of one stream: a NATS KV entry with a TTL. The
// holder renews it (compare-and-set on its revision) every third of the lease; a standby tries to
// create it, which succeeds once the entry expired or was deleted (a leader that stops cleanly
// deletes it, so the handover is immediate). A renewal that fails for any reason steps down: two
// leaders never publish by design, and a lost lease is retaken at the next free moment.
import type { KV } from 'nats';

export interface LeaseEvents {
  /** Leadership changed (true: we hold the lease now). */
  changed(leader: boolean): void;
}

const enc = new TextEncoder();

export class RelayLease {
  private rev: number | null = null;
  private timer: NodeJS.Timeout | null = null;
  private busy = false;
  private stopped = false;

  constructor(
    private readonly kv: KV,
    readonly key: string,
    private readonly holder: string,
    readonly leaseMs: number,
    private readonly events: LeaseEvents,
  ) {}

  get leader(): boolean {
    return this.rev !== null;
  }

  start(): void {
    this.timer = setInterval(() => void this.tick(), Math.max(20, Math.floor(this.leaseMs / 3)));
    this.timer.unref();
  }

  /** One renewal or acquisition attempt (also run once at start, before the timer). */
  async tick(): Promise<void> {
    if (this.busy || this.stopped) return;
    this.busy = true;
    try {
      if (this.rev !== null) {
        try {
          this.rev = await this.kv.update(this.key, enc.encode(this.holder), this.rev);
        } catch {
          this.rev = null;
          if (!this.stopped) this.events.changed(false);
        }
      } else {
        try {
          this.rev = await this.kv.create(this.key, enc.encode(this.holder));
        } catch {
          return; // another relay holds it (or NATS is away): stay standby
        }
        if (this.stopped) return;
        this.events.changed(true);
      }
    } finally {
      this.busy = false;
    }
  }

  /** Stop competing; a leader deletes the entry so a standby takes over at its next attempt. */
  async release(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    const rev = this.rev;
    this.rev = null;
    if (rev !== null) await this.kv.delete(this.key, { previousSeq: rev }).catch(() => undefined);
  }
}
