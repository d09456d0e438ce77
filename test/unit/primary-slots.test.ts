// A router process's end of the primary's tenant slot count (src/processes/slots.ts): claims are
// answered by id; one the primary does not answer is refused and its late grant given back; a
// closed channel refuses at once.
import { describe, expect, it } from 'vitest';
import { PrimarySlots } from '../../src/processes/slots.js';
import type { ToPrimary } from '../../src/processes/messages.js';

describe('PrimarySlots', () => {
  it("resolves each claim with the primary's answer to its id", async () => {
    const sent: ToPrimary[] = [];
    const slots = new PrimarySlots((m) => (sent.push(m), true));
    const first = slots.claim('acme', 2);
    const second = slots.claim('acme', 2);
    expect(sent).toEqual([
      { t: 'slot-claim', id: 0, tenant: 'acme', limit: 2 },
      { t: 'slot-claim', id: 1, tenant: 'acme', limit: 2 },
    ]);
    slots.answer({ t: 'slot', id: 1, granted: false, held: 2 });
    slots.answer({ t: 'slot', id: 0, granted: true, held: 0 });
    expect(await first).toEqual({ grant: 0 });
    expect(await second).toEqual({ held: 2 });
    slots.free(0);
    expect(sent.at(-1)).toEqual({ t: 'slot-free', id: 0 });
  });

  it('refuses a claim the primary does not answer in time, and frees it should the grant come late', async () => {
    const sent: ToPrimary[] = [];
    const slots = new PrimarySlots((m) => (sent.push(m), true), 5);
    expect(await slots.claim('acme', 1)).toBeNull();
    expect(sent).toEqual([
      { t: 'slot-claim', id: 0, tenant: 'acme', limit: 1 },
      { t: 'slot-free', id: 0 },
    ]);
    slots.answer({ t: 'slot', id: 0, granted: true, held: 0 }); // late: nobody waits for it
  });

  it('refuses at once when the channel is closed, and every waiting claim when the primary goes', async () => {
    expect(await new PrimarySlots(() => false).claim('acme', 1)).toBeNull();
    const slots = new PrimarySlots(() => true);
    const waiting = [slots.claim('acme', 1), slots.claim('beta', 1)];
    slots.abandon();
    expect(await Promise.all(waiting)).toEqual([null, null]);
  });
});
