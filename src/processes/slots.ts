// A router process's end of the tenants' concurrency count that the `serve --workers` primary
// keeps for every process (src/auth/tenant-slots.ts): a claim is one round trip over the IPC
// channel, a free one message. Only tenants with a concurrency cap pay it.
import type { SlotOwner } from '../auth/tenant-slots.js';
import type { ToPrimary, ToWorker } from './messages.js';

type Answer = { grant: number } | { held: number } | null;

/** How long a claim waits for the primary (it answers within a turn of its own loop). */
export const CLAIM_TIMEOUT_MS = 2000;

export class PrimarySlots implements SlotOwner {
  private next = 0;
  private readonly waiting = new Map<number, (answer: Answer) => void>();

  /** `send` returns false when the channel to the primary is closed. */
  constructor(
    private readonly send: (m: ToPrimary) => boolean,
    private readonly timeoutMs = CLAIM_TIMEOUT_MS,
  ) {}

  claim(tenant: string, limit: number): Promise<Answer> {
    const id = this.next++;
    return new Promise<Answer>((resolve) => {
      const timer = setTimeout(() => {
        this.settle(id, null);
        // Granted after all, it must not stay held: the channel is ordered, so this free follows the claim.
        this.send({ t: 'slot-free', id });
      }, this.timeoutMs);
      timer.unref();
      this.waiting.set(id, (answer) => {
        clearTimeout(timer);
        resolve(answer);
      });
      if (!this.send({ t: 'slot-claim', id, tenant, limit })) this.settle(id, null);
    });
  }

  free(grant: number): void {
    this.send({ t: 'slot-free', id: grant });
  }

  /** The primary's answer to a claim. */
  answer(m: Extract<ToWorker, { t: 'slot' }>): void {
    this.settle(m.id, m.granted ? { grant: m.id } : { held: m.held });
  }

  /** The primary is gone: no claim will be answered. */
  abandon(): void {
    for (const id of [...this.waiting.keys()]) this.settle(id, null);
  }

  private settle(id: number, answer: Answer): void {
    const done = this.waiting.get(id);
    if (!done) return;
    this.waiting.delete(id);
    done(answer);
  }
}
