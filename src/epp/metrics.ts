// The picker's own metrics, on the router's registry (one /metrics). Requests it routes also count
// in the router's metrics (kvrouter_requests_total, kvrouter_bookings, ...) through the observer.
import { Counter, Gauge, type Registry } from 'prom-client';

/** How an ext_proc stream's request ended, from the picker's side. */
export const EPP_RESULTS = [
  'routed',
  'headers_only',
  'invalid',
  'denied',
  'too_large',
  'over_limit',
  'unavailable',
  'timeout',
  'cancelled',
  'error',
] as const;
export type EppResult = (typeof EPP_RESULTS)[number];

/** The bounds a stream can run into (the epp.* settings of the same names). */
export const EPP_LIMITS = ['idle_timeout', 'stream_timeout', 'max_streams', 'max_buffered_bytes'] as const;
export type EppLimit = (typeof EPP_LIMITS)[number];

/** The result an ImmediateResponse status stands for. */
export function resultOf(status: number): EppResult {
  if (status === 413) return 'too_large';
  if (status === 408) return 'timeout';
  if (status === 429) return 'over_limit';
  if (status === 503) return 'unavailable';
  if (status === 401 || status === 403) return 'denied';
  if (status === 499) return 'cancelled';
  return status < 500 ? 'invalid' : 'error';
}

export interface EppMetrics {
  result(r: EppResult): void;
  /** The gateway served a request on another endpoint than the one picked. */
  mismatch(): void;
  /** A stream ran into one of its bounds. */
  limited(l: EppLimit): void;
}

export function createEppMetrics(
  reg: Registry,
  pool: string,
  sources: { streams: () => number; buffered: () => number; ready: () => boolean },
): EppMetrics {
  const results = new Counter({
    name: 'kvrouter_epp_requests_total',
    help: 'Gateway requests (ext_proc streams) by how the picker ended them: routed, headers_only (no body: picked by load), invalid, denied, too_large, over_limit (429), unavailable (503), timeout (408: the request did not arrive in time), cancelled, error',
    labelNames: ['pool', 'result'],
    registers: [reg],
  });
  const limits = new Counter({
    name: 'kvrouter_epp_stream_limits_total',
    help: 'ext_proc streams that ran into a bound: idle_timeout and stream_timeout (ended, their bookings released), max_streams (refused with RESOURCE_EXHAUSTED), max_buffered_bytes (503)',
    labelNames: ['pool', 'limit'],
    registers: [reg],
  });
  const mismatches = new Counter({
    name: 'kvrouter_epp_served_mismatch_total',
    help: 'Responses the gateway reported served (x-gateway-destination-endpoint-served) by another endpoint than the one picked',
    labelNames: ['pool'],
    registers: [reg],
  });
  new Gauge({
    name: 'kvrouter_epp_streams',
    help: 'Open ext_proc streams (one per gateway request in flight)',
    labelNames: ['pool'],
    registers: [reg],
    collect() {
      this.set({ pool }, sources.streams());
    },
  });
  new Gauge({
    name: 'kvrouter_epp_buffered_bytes',
    help: 'Request-body bytes the open ext_proc streams hold while their bodies arrive (capped by epp.max_buffered_bytes)',
    labelNames: ['pool'],
    registers: [reg],
    collect() {
      this.set({ pool }, sources.buffered());
    },
  });
  new Gauge({
    name: 'kvrouter_epp_ready',
    help: '1 while the picker reports readiness SERVING (not draining, at least one healthy instance)',
    labelNames: ['pool'],
    registers: [reg],
    collect() {
      this.set({ pool }, sources.ready() ? 1 : 0);
    },
  });
  for (const r of EPP_RESULTS) results.inc({ pool, result: r }, 0);
  for (const l of EPP_LIMITS) limits.inc({ pool, limit: l }, 0);
  return {
    result: (r) => results.inc({ pool, result: r }),
    mismatch: () => mismatches.inc({ pool }),
    limited: (l) => limits.inc({ pool, limit: l }),
  };
}
