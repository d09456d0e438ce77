// Routing decisions as a service (Dynamo KvPushRouter semantics over HTTP) for gateways that
// forward requests themselves. Same selection and booking code as the proxy path:
//   POST /v1/route                               decide (query only), or decide and book (request_id)
//   POST /v1/route/{request_id}/prefill_complete first token seen
//   POST /v1/route/{request_id}/free             request finished (idempotent)
//   POST /v1/route/loads                         every candidate's potential loads and cost
//   GET  /v1/route/events                        the index as a dump
import type { Context, Hono } from 'hono';
import { readOpenAIJson, readOptionalOpenAIJson } from '../api/body.js';
import { type EngineUsage, parseUsage } from '../feedback/usage-tail.js';
import { type FeedbackLoop, judgedPrediction, type Prediction } from '../feedback/loop.js';
import { errorResponse } from '../api/errors.js';
import { json } from '../api/indexer-routes.js';
import { OpenAIError, refuseRouterOwned } from '../api/openai.js';
import { dumpIndex } from '../indexer/snapshot.js';
import type { TieredIndexer } from '../indexer/namespaces.js';
import { type Decision, overlapTokens } from '../scheduler/scheduler.js';
import type { CompletionDeps } from './completions.js';
import { type PreparedRoute, prepareRoute, routeFields, speculativeTtl } from './completions.js';
import { bootstrapRoom, type PathReason } from '../disagg/protocol.js';
import { candidatesOf, type InstanceRuntime } from '../proxy/forward.js';
import {
  decodeLegRoute,
  DEFAULT_DISAGG,
  type DisaggConfig,
  hostOf,
  noPrefillLeg,
  pathFor,
  prefillLegRoute,
  splitLegs,
} from '../proxy/disagg.js';
import { SharedRoutes } from '../api/shared-routes.js';

interface PrefillAnswer {
  cfg: DisaggConfig;
  path: { remote: boolean; reason: PathReason };
  /** The prefill leg's decision when remote. */
  d: Decision | null;
  /** A prefill leg is needed and none is available, and `prefill_fallback: fail` says so: /v1/route answers this. */
  refused?: OpenAIError | null;
}

const ID_RE = /^[\w.:-]{1,128}$/;

/** Remembers recently freed ids so repeated frees stay idempotent without growing forever. */
class RecentIds {
  private readonly set = new Set<string>();
  constructor(private readonly max: number) {}
  add(id: string): void {
    this.set.add(id);
    if (this.set.size > this.max) this.set.delete(this.set.values().next().value as string);
  }
  has(id: string): boolean {
    return this.set.has(id);
  }
}

type Body = Record<string, unknown>;

/** `{"usage": {...}}` of a /free body, read like a response's usage; null when absent or not an object. */
function usageOf(body: Record<string, unknown>): EngineUsage | null {
  if (typeof body.usage !== 'object' || body.usage === null || Array.isArray(body.usage)) return null;
  return parseUsage(JSON.stringify(body.usage));
}

/** router_config_override -> the same validated override path as x-kvrouter-* headers. */
function overrideHeaders(o: unknown): Record<string, string> {
  if (o === undefined || o === null) return {};
  if (typeof o !== 'object' || Array.isArray(o))
    throw new OpenAIError(
      400,
      '`router_config_override` must be an object',
      'invalid_request_error',
      'router_config_override',
    );
  const r = o as Body;
  const h: Record<string, string> = {};
  const num = (k: string) => {
    const v = r[k];
    if (v === undefined || v === null) return undefined;
    if (typeof v !== 'number')
      throw new OpenAIError(
        400,
        `router_config_override.${k} must be a number`,
        'invalid_request_error',
        `router_config_override.${k}`,
      );
    return String(v);
  };
  const w = num('overlap_score_weight');
  if (w !== undefined) h['x-kvrouter-overlap-weight'] = w;
  const t = num('router_temperature');
  if (t !== undefined) h['x-kvrouter-temperature'] = t;
  const di = num('decode_interference');
  if (di !== undefined) h['x-kvrouter-decode-interference'] = di;
  const pa = num('prefix_affinity');
  if (pa !== undefined) h['x-kvrouter-prefix-affinity'] = pa;
  const lb = num('load_bound');
  if (lb !== undefined) h['x-kvrouter-load-bound'] = lb;
  if (r.medium_weights !== undefined && r.medium_weights !== null) {
    if (typeof r.medium_weights !== 'object' || Array.isArray(r.medium_weights))
      throw new OpenAIError(
        400,
        'router_config_override.medium_weights must be an object',
        'invalid_request_error',
        'router_config_override.medium_weights',
      );
    h['x-kvrouter-medium-weights'] = Object.entries(r.medium_weights as Body)
      .map(([k, v]) => `${k}=${String(v)}`)
      .join(',');
  }
  for (const [k, header] of [
    ['policy', 'x-kvrouter-policy'],
    ['target', 'x-kvrouter-target'],
    ['cost_model', 'x-kvrouter-cost-model'],
    ['disagg', 'x-kvrouter-disagg'],
  ] as const) {
    const v = r[k];
    if (v === undefined || v === null) continue;
    if (typeof v !== 'string')
      throw new OpenAIError(
        400,
        `router_config_override.${k} must be a string`,
        'invalid_request_error',
        `router_config_override.${k}`,
      );
    h[header] = v;
  }
  return h;
}

/** A prepared request's main leg, decided: what the decision API and the gateway picker (src/epp) book. */
export interface MainLeg {
  d: Decision;
  fields: ReturnType<typeof routeFields>;
  /** A disaggregated model's legs (null for aggregated models). */
  legs: ReturnType<typeof splitLegs> | null;
  /** The instances the decision chose among (healthy or not), after `keep`. */
  pool: readonly InstanceRuntime[];
  t: number;
}

/**
 * Decide a prepared request's main leg over its healthy instances: a disaggregated model's decode
 * side (prefill instances are the other leg's). `keep` narrows the instances (a gateway's subset).
 */
export function decideMainLeg(
  p: PreparedRoute,
  deps: Pick<CompletionDeps, 'cfg' | 'engineLoads' | 'now' | 'scheduler'>,
  keep?: (i: InstanceRuntime) => boolean,
  /** The caller can hold the request in the capacity queue (it may wait for a busy holder of its prefix). */
  hold = false,
): MainLeg {
  const fields = routeFields(p, deps.cfg, deps);
  const t = deps.now();
  const legs = p.model.disaggregated ? splitLegs(p.instances, p.model.roles) : null;
  const side = legs?.decodeSide ?? p.instances;
  const pool = keep ? side.filter(keep) : side;
  const d = deps.scheduler.decide(
    {
      ns: fields.ns,
      candidates: candidatesOf(pool, t),
      hold,
      ...(legs ? decodeLegRoute(fields.route) : fields.route),
    },
    t,
  );
  return { d, fields, legs, pool, t };
}

export interface DecisionApiDeps extends CompletionDeps {
  indexer: TieredIndexer;
  /** The closed-loop check a gateway's /free with usage feeds. */
  feedback?: FeedbackLoop;
}

type Candidate = Decision['candidates'][number];

/** One candidate as the decision API shows it. */
function candidateView(d: Decision, x: Candidate) {
  return {
    instance_id: x.instance,
    dp_rank: x.dpRank,
    overlap_tokens: overlapTokens(x, d.blockSize),
    potential_prefill_tokens: x.load.activePrefillTokens + Math.max(0, d.isl - x.creditedBlocks * d.blockSize),
    potential_decode_blocks: x.load.activeBlocks + x.newBlocks,
    predicted_ttft_ms: x.ttftMs,
    cost: x.cost,
    busy: x.busy,
  };
}

/** The disaggregation part of an answer (null for aggregated models). */
function prefillView(a: PrefillAnswer | null, p: PreparedRoute, tenant: boolean, room: number | null) {
  if (!a) return {};
  const x = a.d?.chosen;
  const inst = x ? p.instances.find((i) => i.id === x.instance) : undefined;
  const port = x ? p.model.cfg.instances.find((i) => i.id === x.instance)?.bootstrap_port : undefined;
  return {
    disaggregation: {
      protocol: a.cfg.protocol,
      path: a.path.remote ? 'remote' : 'local',
      reason: a.path.reason,
      prefill: x
        ? {
            ...candidateView(a.d!, x),
            ...(tenant ? {} : { url: inst!.upstream.url }),
            ...(a.cfg.protocol === 'sglang' && !tenant
              ? { bootstrap_host: hostOf(inst!.upstream.url), bootstrap_port: port, bootstrap_room: room }
              : {}),
          }
        : null,
    },
  };
}

const bookingKey = (id: string) => `route:${id}`;
// '#' is outside request ids' alphabet: no gateway id can name another's prefill leg.
const prefillKey = (id: string) => `route:${id}#prefill`;

const badRequestId = () =>
  new OpenAIError(
    400,
    '`request_id` must be 1-128 characters of [A-Za-z0-9_.:-]',
    'invalid_request_error',
    'request_id',
  );

interface Decided {
  d: Decision;
  p: PreparedRoute;
  body: Body;
  fields: ReturnType<typeof routeFields>;
  prefill: PrefillAnswer | null;
}

/** The decision API's handlers and the state they share: freed ids and open bookings' predictions. */
class DecisionRoutes {
  private readonly freed = new RecentIds(100_000);
  // Predictions of open bookings (a few numbers each), so that a gateway's free with the engine's
  // usage feeds the closed-loop check; dropped when the booking is freed, by /free or by the sweep.
  private readonly booked = new Map<string, Prediction>();

  // deps.cfg is read per request: a reload swaps it.
  constructor(private readonly deps: DecisionApiDeps) {
    deps.scheduler.addHooks({ freed: (key) => void (key.startsWith('route:') && this.booked.delete(key.slice(6))) });
  }

  private async decide(c: Context): Promise<Decided> {
    const { deps } = this;
    const body = (await readOpenAIJson(c, deps.cfg.server.max_body_bytes)) as Body;
    // The gateway forwards the body itself: one that would steer a KV transfer is refused here too
    // (the token_ids form reaches the parser without the rest of the body).
    refuseRouterOwned(body);
    let kind: 'chat' | 'completion' = 'chat';
    let raw: Body = body;
    if (body.token_ids !== undefined) {
      if (!Array.isArray(body.token_ids) || body.token_ids.length === 0)
        throw new OpenAIError(
          400,
          '`token_ids` must be a non-empty array of token ids',
          'invalid_request_error',
          'token_ids',
        );
      kind = 'completion';
      raw = { model: body.model, prompt: body.token_ids };
    } else if (body.prompt !== undefined) kind = 'completion';
    const headers = { ...Object.fromEntries(c.req.raw.headers), ...overrideHeaders(body.router_config_override) };
    const p = await prepareRoute(
      kind,
      raw,
      headers,
      deps,
      deps.access.identify(headers) ?? { kind: 'anonymous' },
      true,
    );
    const { d, fields, legs, t } = decideMainLeg(p, deps);
    return { d, p, body, fields, prefill: legs && d.chosen ? this.prefillLeg(d, p, legs.prefill, fields, t) : null };
  }

  /** The prefill leg of a disaggregated model's request: remote or local, and where (`prefill_fallback` as the proxy applies it). */
  private prefillLeg(
    d: Decision,
    p: PreparedRoute,
    prefillSide: readonly InstanceRuntime[],
    fields: ReturnType<typeof routeFields>,
    t: number,
  ): PrefillAnswer {
    const cfg = p.model.cfg.disaggregation ?? DEFAULT_DISAGG;
    const candidates = candidatesOf(prefillSide, t);
    const path = pathFor(cfg, p.routing.disagg, d, candidates.length > 0);
    const pd = path.remote
      ? this.deps.scheduler.decide({ ns: fields.ns, candidates, ...prefillLegRoute(fields.route) }, t)
      : null;
    if (pd?.chosen) return { cfg, path, d: pd };
    if (pd?.reason === 'all_busy') return { cfg, path: { remote: false, reason: 'prefill_busy' }, d: null };
    if (path.remote || path.reason === 'no_prefill_instance')
      return {
        cfg,
        path: { remote: false, reason: 'no_prefill_instance' },
        d: null,
        refused: noPrefillLeg(cfg, 'no prefill instance is available'),
      };
    return { cfg, path, d: null };
  }

  /** POST /v1/route/loads */
  readonly loads = async (c: Context) => {
    const { d, p } = await this.decide(c);
    return json(c, {
      model: p.model.name,
      prompt_tokens: d.isl,
      block_size: d.blockSize,
      policy: d.policy,
      loads: d.candidates.map((x) => candidateView(d, x)),
    });
  };

  /** POST /v1/route */
  readonly route = async (c: Context) => {
    const { deps } = this;
    const decided = await this.decide(c);
    const { d, p, body, prefill } = decided;
    const rid = body.request_id;
    if (rid !== undefined && rid !== null && (typeof rid !== 'string' || !ID_RE.test(rid))) throw badRequestId();
    if (!d.chosen) {
      const status = d.reason === 'unknown_target' ? 400 : 503;
      return errorResponse(
        c,
        new OpenAIError(
          status,
          `no instance available (${d.reason})`,
          status === 400 ? 'invalid_request_error' : 'server_error',
        ),
        status === 503 ? { 'retry-after': '1' } : {},
      );
    }
    if (prefill?.refused) throw prefill.refused;
    let isBooked = false;
    const tenant = deps.access.identify(Object.fromEntries(c.req.raw.headers))?.kind === 'tenant';
    if (typeof rid === 'string' && tenant) {
      // Booking holds load on an instance until freed: that is the gateway's job (admin token).
      throw new OpenAIError(
        403,
        'booking with request_id needs the admin token; tenants may only query',
        'invalid_request_error',
        'request_id',
        'forbidden',
      );
    }
    if (typeof rid === 'string') {
      this.book(rid, decided);
      isBooked = true;
    }
    const inst = p.instances.find((i) => i.id === d.chosen!.instance)!;
    return json(c, {
      ...candidateView(d, d.chosen),
      // Engine addresses are the operator's: tenants get the instance id only.
      ...(tenant ? {} : { url: inst.upstream.url }),
      model: p.model.name,
      policy: d.policy,
      prompt_tokens: d.isl,
      request_id: typeof rid === 'string' ? rid : null,
      booked: isBooked,
      ...prefillView(
        prefill,
        p,
        tenant,
        prefill?.d?.chosen && prefill.cfg.protocol === 'sglang' ? bootstrapRoom(Math.random) : null,
      ),
    });
  };

  /** Books a decided request under the gateway's id (and its remote prefill leg beside it). */
  private book(rid: string, { d, p, fields, prefill }: Decided): void {
    const { scheduler, now } = this.deps;
    if (scheduler.active.get(bookingKey(rid)))
      throw new OpenAIError(409, `request_id ${rid} is already booked`, 'invalid_request_error', 'request_id');
    const ttl = speculativeTtl(p, fields.route);
    // A remote prefill: the decode leg computes no prompt; the prefill leg is booked beside it.
    const remote = prefill?.d?.chosen ? prefill.d : null;
    scheduler.book(d, fields.ns, {
      requestId: bookingKey(rid),
      now: now(),
      speculativeTtlMs: ttl,
      prefillTokens: remote ? 0 : undefined,
    });
    if (remote) scheduler.book(remote, fields.ns, { requestId: prefillKey(rid), now: now(), speculativeTtlMs: ttl });
    const pred = this.deps.cfg.verification.enabled ? judgedPrediction(d) : null;
    if (pred) this.booked.set(rid, pred);
  }

  /** POST /v1/route/{id}/prefill_complete and /v1/route/{id}/free */
  readonly lifecycle = (action: 'prefill_complete' | 'free') => async (c: Context) => {
    const { scheduler, now } = this.deps;
    const id = c.req.param('id') ?? '';
    // Ids are what /v1/route accepts: no decoded path segment can name another booking (or a prefill leg).
    if (!ID_RE.test(id)) throw badRequestId();
    const key = bookingKey(id);
    // A free may carry the engine's response usage (as the engine sent it): it is checked against
    // the prediction like a proxied response's; and `failed: true` when the engine never computed the
    // prompt (the attempt failed): the booking's speculative insert is withdrawn, as the proxy's is.
    // A body that cannot be read never keeps a booking.
    const freeBody = action === 'free' ? await readOptionalOpenAIJson(c, 64 * 1024).catch(() => null) : null;
    const usage = freeBody ? usageOf(freeBody) : null;
    const failed = freeBody?.failed === true;
    const p = action === 'free' ? this.booked.get(id) : undefined;
    // The prefill leg (disaggregated) is over once the decode leg's first token is out.
    const outcome = { failed, now: now() };
    // The instances whose room this grows: their waiters are tried (CapacityQueue.notify).
    const prefillOn = scheduler.active.get(prefillKey(id))?.instance;
    const on = scheduler.active.get(key)?.instance;
    if (scheduler.free(prefillKey(id), outcome) && prefillOn !== undefined) this.deps.queue.notify(prefillOn);
    const ok = action === 'free' ? scheduler.free(key, outcome) : scheduler.prefillComplete(key);
    if (ok) {
      if (action === 'free') {
        this.freed.add(id);
        if (p && usage) this.deps.feedback?.check(p, usage);
      }
      this.deps.queue.notify(on);
      return json(c, { request_id: id, status: action === 'free' ? 'freed' : 'prefill_complete' });
    }
    if (this.freed.has(id)) return json(c, { request_id: id, status: 'already_freed' });
    throw new OpenAIError(404, `no booking for request_id ${id}`, 'invalid_request_error', 'request_id');
  };
}

/** `shared`: where the booking calls are declared (the router's table; a throwaway one when alone). */
export function mountDecisionRoutes(app: Hono, deps: DecisionApiDeps, shared = new SharedRoutes()): void {
  const { now } = deps;
  const routes = new DecisionRoutes(deps);
  app.post('/v1/route/loads', routes.loads);
  app.post('/v1/route', routes.route);
  app.post(shared.bookingCall('/v1/route/:id/prefill_complete'), routes.lifecycle('prefill_complete'));
  app.post(shared.bookingCall('/v1/route/:id/free'), routes.lifecycle('free'));
  app.get('/v1/route/events', (c) => json(c, dumpIndex(deps.indexer, now())));
}
