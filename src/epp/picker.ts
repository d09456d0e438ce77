// The pick for one gateway request, with the router's own parts: the same access rules, parsing,
// overrides and tokens (prepareRoute), the same decision and booking as the decision API
// (decideMainLeg, speculativeTtl), the same wait for capacity as the proxy. Nothing gRPC here.
import { randomUUID } from 'node:crypto';
import { parseOpenAIBody } from '../api/body.js';
import { completionKindOf, OpenAIError } from '../api/openai.js';
import type { Denial, Principal } from '../auth/access.js';
import type { NamespaceId } from '../indexer/namespace.js';
import { type CapacityTry, capacityPool, decideWithinCapacity } from '../proxy/capacity.js';
import { waitOn } from '../scheduler/hold.js';
import { explanationHeaders, type InstanceRuntime } from '../proxy/forward.js';
import { engineBody, type PreparedRoute, prepareRoute, speculativeTtl } from '../router/completions.js';
import { decideMainLeg, type MainLeg } from '../router/decision-api.js';
import type { RouterRuntime } from '../router/runtime.js';
import type { Decision } from '../scheduler/scheduler.js';
import type { RequestTrace } from '../tracing/request-trace.js';
import type { EndpointAddresses } from './endpoints.js';

/** What the picker reads of the running router (fields read per request: a reload swaps them). */
export type PickerRuntime = Pick<RouterRuntime, 'deps' | 'all' | 'queue' | 'now'>;

/** The header (and envoy.lb metadata key) that names the pick, per GIE's endpoint picker protocol. */
export const DESTINATION = 'x-gateway-destination-endpoint';

/** A request as the gateway described it in its request headers (and metadata). */
export interface GatewayRequest {
  method: string;
  /** :path without its query. */
  path: string;
  /** Lower-cased names (pseudo-headers included). */
  headers: Record<string, string>;
  requestId: string;
  /** The endpoints the gateway allows (envoy.lb.subset_hint), or null: the whole pool. */
  subset: ReadonlySet<string> | null;
  receivedAt: number;
}

/** An answer instead of a pick: the gateway replies it itself (an ImmediateResponse). */
export class Refused extends OpenAIError {
  constructor(
    status: number,
    message: string,
    type: string,
    code: string,
    readonly headers: Record<string, string> = {},
  ) {
    super(status, message, type, null, code);
  }
}

/** A booked pick: held until the response ends (`release`, exactly once, is the caller's). */
export interface Booked {
  d: Decision;
  bookingId: string;
  instance: InstanceRuntime;
  endpoint: string;
  /** The instances the decision chose among (a served endpoint elsewhere is looked up here). */
  pool: readonly InstanceRuntime[];
  ns: NamespaceId;
  /** The body the engine gets (the client's bytes, or rewritten for an alias or a tenant salt). */
  body: Buffer;
  /** Set on the upstream request. */
  upstreamHeaders: Record<string, string>;
  model: string;
  /** Gives back the tenant's concurrency slot. */
  admission: { release: () => void };
}

const RETRY = { 'retry-after': '1' };

/** A denial of the access rules, as the gateway answers it (the HTTP API's status, type and code). */
function refusal(d: Denial): Refused {
  return new Refused(
    d.status,
    d.message,
    d.status === 429 ? 'rate_limit_error' : 'invalid_request_error',
    d.code,
    d.retryAfterSec ? { 'retry-after': String(d.retryAfterSec) } : {},
  );
}

/**
 * Who is calling, by the HTTP API's rules: a kvrouter key is that tenant's (its models, limits and
 * cache salt) or the admin's; a wrong key is a 401. A request without one is a 401 too, unless
 * `epp.keyless` is 'trusted' (the gateway authenticated it): then it is anonymous.
 */
function principalOf(rt: PickerRuntime, req: GatewayRequest): Principal {
  const p = rt.deps.access.authenticate(req.headers, rt.deps.cfg.epp.keyless);
  if ('status' in p) {
    rt.deps.metrics.denied('api', p.status);
    throw refusal(p);
  }
  return p;
}

/** The instances the gateway may reach and allows. */
function keeper(addresses: EndpointAddresses, subset: ReadonlySet<string> | null): (i: InstanceRuntime) => boolean {
  return (i) => {
    const a = addresses.addressOf(i.upstream.url);
    return a !== null && (subset === null || subset.has(a));
  };
}

/**
 * Decide (and `book` the pick at once); when every eligible instance is busy or down, or a busy
 * holder of the prefix is worth waiting for, wait for capacity on the proxy's queue (same bound,
 * order and timeout), then decide again. Busy to the end: 429; down: 503; none allowed: 503.
 */
async function decideWithin(
  rt: PickerRuntime,
  p: PreparedRoute,
  keep: (i: InstanceRuntime) => boolean,
  req: GatewayRequest,
  signal: AbortSignal,
  book: (m: MainLeg) => void,
): Promise<MainLeg> {
  const { deps, queue, now } = rt;
  const deadline = req.receivedAt + deps.cfg.routing.busy.queue_timeout_ms;
  const decide = (mayHold: boolean): CapacityTry<MainLeg, MainLeg> => {
    const m = decideMainLeg(p, deps, keep, mayHold);
    if (m.d.chosen) {
      book(m);
      return { done: m };
    }
    if (m.d.reason === 'unknown_target')
      throw new Refused(
        400,
        'x-kvrouter-target names no eligible instance of this model',
        'invalid_request_error',
        'unknown_target',
      );
    if (m.pool.length === 0) {
      const why = req.subset
        ? "no instance of this model is in the gateway's candidate subset (envoy.lb.subset_hint)"
        : 'no instance of this model has an address the gateway can reach (ip:port)';
      throw new Refused(503, why, 'server_error', 'no_eligible_endpoint');
    }
    return { wait: m, ...waitOn(m.d) };
  };
  const pool = () => capacityPool(p.model.name, p.adapter, req.subset);
  const r = await decideWithinCapacity(queue, { deadline, now, signal }, decide, pool);
  if ('done' in r) return r.done;
  if ('aborted' in r) throw new Refused(499, 'the gateway cancelled the request', 'client_error', 'cancelled');
  if ('full' in r || r.gaveUp.d.reason === 'all_busy' || r.gaveUp.d.reason === 'held')
    throw new Refused(
      429,
      'every instance is over its busy threshold; retry later',
      'rate_limit_error',
      'pool_over_limit',
      RETRY,
    );
  throw new Refused(503, 'no healthy instance is available; retry later', 'server_error', 'no_healthy_endpoint', RETRY);
}

/** Pick and book for a completion body. Throws Refused / OpenAIError for the gateway to answer. */
export async function pickForBody(
  rt: PickerRuntime,
  addresses: EndpointAddresses,
  req: GatewayRequest,
  bytes: Buffer,
  signal: AbortSignal,
  trace: RequestTrace | null,
): Promise<Booked> {
  const kind = completionKindOf(req.path);
  if (kind === undefined)
    throw new Refused(
      404,
      `no route for ${req.method} ${req.path}: the picker routes POST /v1/chat/completions and /v1/completions`,
      'invalid_request_error',
      'not_found',
    );
  if (req.method !== 'POST')
    throw new Refused(
      405,
      `${req.method} is not allowed on ${req.path}; use POST`,
      'invalid_request_error',
      'method_not_allowed',
    );
  const { deps, now } = rt;
  const principal = principalOf(rt, req);
  const admitted = await deps.access.admit(principal);
  if ('status' in admitted) {
    deps.metrics.denied('api', admitted.status);
    throw refusal(admitted);
  }
  try {
    const raw = parseOpenAIBody(bytes, kind === 'completion');
    const p = await prepareRoute(kind, raw, req.headers, deps, principal, false, trace);
    trace?.root.setAttribute('gen_ai.request.model', p.model.name);
    await addresses.refresh(p.instances.map((i) => i.upstream.url));
    // Everything that can still refuse the request (the rewrite of an aliased or salted body) runs
    // before the booking (the pick's, in its turn of the capacity queue): nothing after it throws.
    const body = engineBody(p, raw, bytes);
    const bookingId = `epp:${randomUUID()}`;
    // A disaggregated model's decode instance prefills locally here: the gateway sends one request.
    const book = (m: MainLeg) =>
      deps.scheduler.book(m.d, m.fields.ns, {
        requestId: bookingId,
        now: now(),
        speculativeTtlMs: speculativeTtl(p, m.fields.route),
      });
    const m = await decideWithin(rt, p, keeper(addresses, req.subset), req, signal, book);
    const d = m.d;
    const c = d.chosen!;
    const instance = m.pool.find((i) => i.id === c.instance)!;
    const endpoint = addresses.addressOf(instance.upstream.url)!;
    const upstreamHeaders: Record<string, string> = {
      [DESTINATION]: endpoint,
      ...explanationHeaders(d, req.requestId, 0),
    };
    if (body.length > 0) upstreamHeaders['content-length'] = String(body.length);
    if (instance.dpSize > 1) upstreamHeaders['x-data-parallel-rank'] = String(c.dpRank);
    // The engine continues the picker's trace rather than the client's.
    if (trace) trace.inject(trace.root, upstreamHeaders);
    deps.observer?.routed?.(d, 0, now() - req.receivedAt);
    return {
      d,
      bookingId,
      instance,
      endpoint,
      pool: m.pool,
      ns: m.fields.ns,
      body,
      upstreamHeaders,
      model: p.model.name,
      admission: admitted,
    };
  } catch (err) {
    admitted.release();
    throw err;
  }
}

/**
 * A request without a body (GET /v1/models, a health check through the gateway): the least-loaded
 * healthy instance the gateway allows, of any model; nothing is booked. The caller is authenticated
 * as for a completion (its limits are not spent: it holds nothing).
 */
export async function pickByLoad(
  rt: PickerRuntime,
  addresses: EndpointAddresses,
  req: GatewayRequest,
): Promise<string> {
  principalOf(rt, req);
  const all = rt.all.flatMap((m) => m.instances);
  await addresses.refresh(all.map((i) => i.upstream.url));
  const keep = keeper(addresses, req.subset);
  const t = rt.now();
  let best: { endpoint: string; load: number } | null = null;
  for (const i of all) {
    if (!keep(i) || !i.health.available(t)) continue;
    let load = 0;
    for (let r = 0; r < i.dpSize; r++) load += rt.deps.scheduler.active.load(i.id, r).activeRequests;
    if (best === null || load < best.load) best = { endpoint: addresses.addressOf(i.upstream.url)!, load };
  }
  if (best === null)
    throw new Refused(
      503,
      req.subset
        ? "no healthy instance is in the gateway's candidate subset (envoy.lb.subset_hint)"
        : 'no healthy instance is available',
      'server_error',
      'no_eligible_endpoint',
      RETRY,
    );
  return best.endpoint;
}
