// vLLM's prefill leg (its KV connectors' protocol, as vLLM's own proxy runs it): the prefill runs
// before the decode request, which carries the kv_transfer_params the prefill engine answered. A
// prefill that succeeded serves the request's later attempts until a decode leg fails.
import { OpenAIError } from '../api/openai.js';
import { type OpenAIBody, transferParamsOf, vllmDecodeBody, vllmPrefillBody } from '../disagg/protocol.js';
import { type DisaggProtocol, json, type PrefillLegs, PrefillRefused, type Prepared } from './prefill-leg.js';

/** A prefill that succeeded: what the decode leg carries, and where it came from. */
interface Transfer {
  params: OpenAIBody | null;
  instance: string;
  attempts: number;
}

export function vllmProtocol(legs: PrefillLegs): DisaggProtocol {
  const { job } = legs;
  let transfer: Transfer | null = null;

  /** Prefill on the next-best prefill instance until one succeeds: its transfer, 'busy', or why none did. */
  const prefill = async (signal: AbortSignal): Promise<Transfer | 'busy' | { lastError: string }> => {
    let lastError = 'no prefill instance is available';
    for (let a = 0; a <= job.maxRetries; a++) {
      const p = legs.pick();
      if (p === 'busy') return 'busy';
      if (!p) break;
      let served = false;
      try {
        const response = await legs.send(p, vllmPrefillBody(job.body), signal);
        served = true;
        return { params: transferParamsOf(response), instance: p.inst.id, attempts: a + 1 };
      } catch (err) {
        if (signal.aborted) throw err;
        // The engine refused the request itself: the client gets that answer, no instance is blamed.
        if (err instanceof PrefillRefused)
          throw new OpenAIError(
            err.status,
            `the prefill instance refused the request: ${err.text.slice(0, 500)}`,
            'invalid_request_error',
          );
        lastError = `${p.inst.id}: ${(err as Error).message}`;
        legs.failedOn(p.inst.id, lastError);
      } finally {
        legs.release(p.bookingId, !served);
      }
    }
    return { lastError };
  };

  const prepare = async (signal: AbortSignal): Promise<Prepared> => {
    if (!transfer) {
      const r = await prefill(signal);
      if (r === 'busy') return legs.local('prefill_busy');
      if ('lastError' in r)
        return legs.fallback(
          legs.failed.size > 0 ? `every prefill attempt failed; last error: ${r.lastError}` : r.lastError,
        );
      transfer = r;
    }
    const t = transfer;
    return {
      // Without params (the prefill engine sent none) the decode engine prefills itself, as vLLM's proxy does.
      body: json(vllmDecodeBody(job.body, t.params)),
      headers: {
        'x-kvrouter-disagg': 'remote',
        'x-kvrouter-disagg-reason': t.params ? 'remote' : 'no_transfer_params',
        'x-kvrouter-prefill-instance': t.instance,
        'x-kvrouter-prefill-attempts': String(t.attempts),
      },
    };
  };

  /**
   * A vLLM decode leg failed: its KV may be what is gone (pulled already, or the prefill instance
   * died), so the retry prefills again. The decode instance is blamed all the same.
   */
  const decodeFailed = async (): Promise<boolean> => {
    transfer = null;
    return false;
  };

  return {
    // The decode instance computes no prompt: its first token waits on a remote prefill, so it teaches no prefill rate.
    remote: () => ({ prefillTokens: 0, teachesRate: false, prepare, otherLegFailed: decodeFailed }),
    prefilled: () => transfer !== null,
  };
}
