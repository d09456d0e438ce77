// SGLang's prefill leg (its bootstrap protocol, as SGLang's mini load balancer runs it): the prefill
// and decode requests go at the same time, both carrying one bootstrap room; the decode engine waits
// for the KV the prefill engine sends to it. Each attempt's prefill is its own, aborted when the
// attempt is over; one that fails cuts its attempt (retried elsewhere).
import { bootstrapRoom, sglangBody } from '../disagg/protocol.js';
import { type DisaggProtocol, json, type PrefillLegs, PrefillRefused, type Prepared } from './prefill-leg.js';

/** Host of an instance's URL as SGLang's bootstrap_host wants it (IPv6 without brackets). */
export function hostOf(url: string): string {
  try {
    return new URL(url).hostname.replace(/^\[|\]$/g, '');
  } catch {
    return '127.0.0.1';
  }
}

/** One attempt's prefill leg. */
interface Leg {
  ctl: AbortController;
  settled: Promise<void>;
  failed: boolean;
}

export function sglangProtocol(legs: PrefillLegs): DisaggProtocol {
  const { job } = legs;
  const rand = legs.deps.rand ?? Math.random;
  const batch =
    Array.isArray(job.body.prompt) &&
    job.body.prompt.length > 0 &&
    (typeof job.body.prompt[0] === 'string' || Array.isArray(job.body.prompt[0]))
      ? job.body.prompt.length
      : 0;
  let leg: Leg | null = null;

  /** After the decode leg failed: whether this attempt's prefill leg failed too (then the failure was the prefill's). */
  const legFailed = async (): Promise<boolean> => {
    const l = leg;
    if (!l) return false;
    // Bounded: a slow prefill that is still alive did not fail.
    await Promise.race([l.settled, new Promise((r) => setTimeout(r, 2000).unref())]);
    return l.failed;
  };

  const prepare = async (signal: AbortSignal, fail: (reason: string) => void): Promise<Prepared> => {
    // The previous attempt is over: its prefill waits for a decode that will not come.
    leg?.ctl.abort();
    const p = legs.pick();
    if (p === 'busy') return legs.local('prefill_busy');
    if (!p) return legs.fallback(legs.noneLeft());
    const bootstrap = {
      host: hostOf(p.inst.upstream.url),
      port: job.bootstrapPort(p.inst.id),
      room: bootstrapRoom(rand),
    };
    const body = sglangBody(job.body, bootstrap, batch, rand);
    // Both legs at once: the decode engine waits for the KV the prefill engine sends to the room.
    // The prefill's response is drained; if it fails, this attempt is cut (and retried elsewhere).
    const ctl = new AbortController();
    const mine: Leg = { ctl, failed: false, settled: Promise.resolve() };
    let served = false;
    mine.settled = legs
      .send(p, body, AbortSignal.any([signal, ctl.signal]))
      .then(() => {
        served = true;
      })
      .catch((err: unknown) => {
        // Aborted on purpose (client gone, attempt over), or refused like the decode leg will be: no blame.
        if (signal.aborted || ctl.signal.aborted || err instanceof PrefillRefused) return;
        mine.failed = true;
        const why = `prefill ${p.inst.id}: ${(err as Error).message}`;
        legs.failedOn(p.inst.id, why);
        fail(why);
      })
      .finally(() => legs.release(p.bookingId, !served));
    leg = mine;
    return {
      body: json(body),
      headers: {
        'x-kvrouter-disagg': 'remote',
        'x-kvrouter-disagg-reason': 'remote',
        'x-kvrouter-prefill-instance': p.inst.id,
        'x-kvrouter-bootstrap-room': String(bootstrap.room),
      },
    };
  };

  return {
    // The decode instance computes no prompt: its first token waits on a remote prefill, so it teaches no prefill rate.
    remote: () => ({ prefillTokens: 0, teachesRate: false, prepare, otherLegFailed: legFailed }),
    prefilled: () => false,
  };
}
