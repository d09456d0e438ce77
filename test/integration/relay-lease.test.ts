// The relay HA lease against a real nats-server (JetStream KV): one holder at a time, a holder
// whose renewals stop is fenced (no longer valid) before anyone else can take the lease, and a
// release hands it over at once, even with an attempt in flight.
import { connect, type KV, type NatsConnection } from 'nats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LocalNats, startLocalNats } from '../../src/cluster/nats-server.js';
import { RelayLease } from '../../src/cluster/relay-lease.js';

let nats: LocalNats;
let nc: NatsConnection;
const TTL = 600;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

beforeAll(async () => {
  nats = await startLocalNats({ jetstream: true });
  nc = await connect({ servers: nats.url });
});

afterAll(async () => {
  await nc?.close();
  await nats?.stop();
});

/**
 * The bucket, created with the client's default timeout (creating a JetStream stream on a loaded machine
 * may take longer than a lease request), then the handle the lease uses: its requests time out within a
 * third of the TTL, as the relay's do.
 */
async function bucket(name: string): Promise<KV> {
  await nc.jetstream().views.kv(name, { ttl: TTL, history: 1 });
  return nc.jetstream({ timeout: 200 }).views.kv(name, { ttl: TTL, history: 1 });
}

function lease(kv: KV, holder: string) {
  const changes: boolean[] = [];
  const l = new RelayLease(kv, 'STREAM', holder, TTL, { changed: (v) => changes.push(v) });
  return { l, changes };
}

describe('relay lease', () => {
  it('the bucket keeps the TTL of its creator', async () => {
    await bucket('lease-ttl');
    const again = await nc.jetstream().views.kv('lease-ttl', { ttl: 5_000, history: 1 });
    expect((await again.status()).ttl).toBe(TTL);
  });

  it('has one holder; a holder whose renewals stop is fenced before the other can take over', async () => {
    const kv = await bucket('lease-fence');
    const a = lease(kv, 'a');
    const b = lease(kv, 'b');
    await a.l.tick();
    await b.l.tick();
    expect([a.l.valid, b.l.held, a.changes, b.changes]).toEqual([true, false, [true], []]);
    // a stops renewing (a stalled process): b keeps trying; when b gets it, a is no longer valid.
    let aValidWhenBTook: boolean | null = null;
    for (let i = 0; i < 100 && !b.l.held; i++) {
      await sleep(20);
      const aValid = a.l.valid;
      await b.l.tick();
      if (b.l.held) aValidWhenBTook = aValid;
    }
    expect(b.changes).toEqual([true]);
    expect(aValidWhenBTook).toBe(false);
    expect(a.l.held).toBe(true); // it still thinks it holds a revision...
    await a.l.tick(); // ...until its next renewal fails: it steps down
    expect([a.l.held, a.changes]).toEqual([false, [true, false]]);
    await b.l.release();
  });

  it('a release deletes the entry at once, even with an attempt in flight', async () => {
    const kv = await bucket('lease-release');
    const a = lease(kv, 'a');
    const b = lease(kv, 'b');
    await a.l.tick();
    void a.l.tick(); // a renewal in flight while releasing
    await a.l.release();
    expect(a.l.held).toBe(false);
    await b.l.tick(); // well inside the TTL: only a deleted entry lets it in
    expect([b.l.valid, b.changes]).toEqual([true, [true]]);
    await b.l.release();
  });
});
