// One ext_proc stream = one gateway request, as GIE's reference picker runs it: remember the request
// headers, buffer the body (capped per stream and, with every other stream's, by the BodyBudget),
// pick at its end, answer the request headers (endpoint header, envoy.lb metadata) and hand the body
// back; then pass the response through, watching its first token and usage. The booking is released
// exactly once: at the response's end, its trailers, or whenever the stream ends, fails or runs out
// of time (`close`, `expire`). Transport-free: it maps messages to messages; the clocks are the server's.
import { randomUUID } from 'node:crypto';
import { errorBody } from '../api/errors.js';
import { OpenAIError } from '../api/openai.js';
import { UsageTail } from '../feedback/usage-tail.js';
import { explanationHeaders, type ForwardObserver } from '../proxy/forward.js';
import { RequestTrace } from '../tracing/request-trace.js';
import type { BodyBudget } from './body-budget.js';
import type { EndpointAddresses } from './endpoints.js';
import { type EppMetrics, type EppResult, resultOf } from './metrics.js';
import {
  type Booked,
  DESTINATION,
  type GatewayRequest,
  pickByLoad,
  pickForBody,
  type PickerRuntime,
  Refused,
} from './picker.js';
import {
  type BodySendMode,
  headerRecord,
  type HttpBody,
  type HttpHeaders,
  immediate,
  type ProcessingRequest,
  type ProcessingResponse,
  type ProtoStruct,
  setHeaders,
  streamedBody,
  stringsOf,
  toStruct,
} from './wire.js';

/** Where the gateway names the candidates (GIE protocol) and the endpoint that served. */
const SUBSET_NS = 'envoy.lb.subset_hint';
const SUBSET_KEY = 'x-gateway-destination-endpoint-subset';
const LB_NS = 'envoy.lb';
const SERVED_KEY = 'x-gateway-destination-endpoint-served';

const REQUEST_ID = /^[\w.:-]{1,128}$/;

export interface ExchangeContext {
  rt: PickerRuntime;
  addresses: EndpointAddresses;
  metrics: EppMetrics;
  /** The request-body bytes every stream may hold at once (epp.max_buffered_bytes). */
  bodies: BodyBudget;
  /** Shutting down: new requests get 503. */
  draining: () => boolean;
  /** A served endpoint other than the pick (logged at most once a minute by the caller). */
  mismatch: (picked: string, served: string) => void;
}

type Mode = 'duplex' | 'buffered' | 'none' | 'unsupported';

function modeOf(m: BodySendMode | number | undefined): Mode {
  // Undefined: no protocol_config (older Envoy); GIE's required mode is assumed.
  if (m === undefined || m === 'FULL_DUPLEX_STREAMED') return 'duplex';
  if (m === 'BUFFERED' || m === 'BUFFERED_PARTIAL') return 'buffered';
  if (m === 'NONE') return 'none';
  return 'unsupported';
}

export class ExtProcExchange {
  private requestMode: Mode = 'duplex';
  /** BUFFERED_PARTIAL: a body over the gateway's buffer arrives cut, without end_of_stream. */
  private partial = false;
  private responseDuplex = true;
  private first = true;
  private observe = false;
  private req: GatewayRequest | null = null;
  private chunks: Buffer[] = [];
  private size = 0;
  /** Bytes of `chunks` taken from the shared BodyBudget. */
  private held = 0;
  private subset: ReadonlySet<string> | null = null;
  /** The picker has answered the request (a pick or an ImmediateResponse): later request messages are ignored. */
  private answered = false;
  /** The pick, without the body it handed back (not held for the response's life). */
  private booked: Omit<Booked, 'body'> | null = null;
  private finished = false;
  /** The booking and the tenant's slot were given back. */
  private released = false;
  private trace: RequestTrace | null = null;
  private sentAt = 0;
  private response: { status: number; stream: boolean; firstSeen: boolean; tail: UsageTail | null } | null = null;
  private readonly abort = new AbortController();

  constructor(private readonly ctx: ExchangeContext) {}

  /** The responses to send for one message from the gateway (none in observability mode). */
  async onMessage(msg: ProcessingRequest): Promise<ProcessingResponse[]> {
    if (this.first) {
      this.first = false;
      this.observe = msg.observability_mode === true;
      // Inside a protocol_config an absent mode is proto3's zero: NONE.
      const pc = msg.protocol_config;
      this.requestMode = modeOf(pc ? (pc.request_body_mode ?? 'NONE') : undefined);
      this.partial = pc?.request_body_mode === 'BUFFERED_PARTIAL';
      this.responseDuplex = modeOf(pc ? (pc.response_body_mode ?? 'NONE') : undefined) === 'duplex';
    }
    // Observability mode: the gateway ignores answers, so there is nothing to pick or book.
    if (this.observe) return [];
    this.readMetadata(msg.metadata_context?.filter_metadata);
    switch (msg.request) {
      case 'request_headers':
        return this.onRequestHeaders(msg.request_headers ?? {});
      case 'request_body':
        return this.onRequestBody(msg.request_body ?? {});
      case 'request_trailers':
        if (this.requestMode === 'duplex' && !this.answered && this.req) {
          const out = await this.pick(true);
          // After an ImmediateResponse (or a cancelled pick) the gateway expects nothing more.
          return out.length === 0 || out.some((m) => 'immediate_response' in m)
            ? out
            : [...out, { request_trailers: {} }];
        }
        return this.answered && this.requestMode === 'duplex' ? [] : [{ request_trailers: {} }];
      // A response before the picker answered the request is out of order: pass it on untouched and
      // hold on to nothing (the request's pick, if it comes, is released when the stream ends).
      case 'response_headers':
        return this.answered
          ? this.onResponseHeaders(msg.response_headers ?? {})
          : [{ response_headers: { response: {} } }];
      case 'response_body': {
        if (this.answered) return this.onResponseBody(msg.response_body ?? {});
        const rb = msg.response_body ?? {};
        return this.responseDuplex
          ? streamedBody('response_body', rb.body ?? Buffer.alloc(0), rb.end_of_stream === true)
          : [{ response_body: { response: {} } }];
      }
      case 'response_trailers':
        if (this.answered) this.complete();
        return [{ response_trailers: {} }];
      default:
        return [];
    }
  }

  /** Nothing is held any more: the booking is released, or there never was one (an answer without a pick). */
  get done(): boolean {
    return this.finished || (this.answered && this.booked === null);
  }

  /** No message has arrived yet. */
  get silent(): boolean {
    return this.first;
  }

  /** The gateway cancelled the stream: stop waiting for capacity. */
  cancel(): void {
    this.abort.abort();
  }

  /**
   * The stream outlived one of its bounds (`why` says which): a request not yet answered gets a 408;
   * what the stream holds is released as when the gateway closes it (a picked request may still be
   * running: it counts with the status its response showed, 0 for none).
   */
  expire(why: string): ProcessingResponse[] {
    const out =
      !this.observe && !this.answered && this.req
        ? this.refuse(new Refused(408, why, 'invalid_request_error', 'request_timeout'))
        : [];
    this.close(true);
    return out;
  }

  /**
   * The stream is over, however it ended: release what is still held (idempotent). `graceful`: the
   * gateway closed its side (the request is over, whether or not it showed us the response);
   * otherwise it cancelled or failed the stream (an abort).
   */
  close(graceful: boolean): void {
    this.abort.abort();
    this.dropBody();
    if (!this.answered && !this.observe && this.req) {
      this.answered = true;
      this.ctx.metrics.result('cancelled');
    }
    // Status 0: the gateway sent no response phase (its processing mode skips them).
    this.finish(graceful ? (this.response?.status ?? 0) : 499);
  }

  private readMetadata(fm: Record<string, ProtoStruct> | undefined): void {
    if (!fm) return;
    const subset = stringsOf(fm[SUBSET_NS]?.fields?.[SUBSET_KEY]);
    // A string value may list several endpoints (comma-separated), like the destination header.
    if (subset)
      this.subset = new Set(
        subset
          .flatMap((s) => s.split(','))
          .map((s) => s.trim())
          .filter(Boolean),
      );
    const served = stringsOf(fm[LB_NS]?.fields?.[SERVED_KEY])?.[0];
    if (served && this.booked && served !== this.booked.endpoint) this.moveTo(served);
  }

  private onRequestHeaders(h: HttpHeaders): Promise<ProcessingResponse[]> | ProcessingResponse[] {
    const headers = headerRecord(h.headers);
    const rid = headers['x-request-id'];
    this.req = {
      method: (headers[':method'] ?? 'POST').toUpperCase(),
      path: (headers[':path'] ?? '/').split('?')[0],
      headers,
      requestId: rid && REQUEST_ID.test(rid) ? rid : randomUUID(),
      subset: this.subset,
      receivedAt: this.ctx.rt.now(),
    };
    if (this.ctx.draining())
      return this.refuse(
        new Refused(503, 'the router is shutting down', 'server_error', 'shutting_down', { 'retry-after': '1' }),
      );
    const limit = this.ctx.rt.deps.cfg.server.max_body_bytes;
    const declared = Number(headers['content-length'] ?? NaN);
    if (Number.isFinite(declared) && declared > limit) return this.refuse(tooLarge(limit));
    if (h.end_of_stream) {
      if (this.req.method === 'POST')
        return this.refuse(
          new OpenAIError(400, 'request body is empty; expected JSON', 'invalid_request_error', 'body'),
        );
      return this.pickHeadersOnly();
    }
    // No body will come (request_body_mode NONE): route on the headers alone.
    if (this.requestMode === 'none') return this.pickHeadersOnly();
    if (this.requestMode === 'unsupported')
      return this.refuse(
        new OpenAIError(
          500,
          'the gateway sends the request body in a mode the picker does not serve: use request_body_mode FULL_DUPLEX_STREAMED (or BUFFERED)',
          'server_error',
          null,
          'unsupported_body_mode',
        ),
      );
    // BUFFERED: the gateway waits for this answer before it sends the body.
    if (this.requestMode === 'buffered') return [{ request_headers: { response: { clear_route_cache: true } } }];
    return [];
  }

  private async onRequestBody(b: HttpBody): Promise<ProcessingResponse[]> {
    if (this.answered || !this.req) return [];
    const chunk = b.body ?? Buffer.alloc(0);
    this.size += chunk.length;
    const limit = this.ctx.rt.deps.cfg.server.max_body_bytes;
    // Refused from its size alone, before any of it is parsed or tokenized.
    if (this.size > limit) return this.refuse(tooLarge(limit));
    // A cut body cannot be routed (its JSON is incomplete): say it is too large for the gateway's buffer.
    if (this.partial && !b.end_of_stream)
      return this.refuse(
        new OpenAIError(
          413,
          "request body exceeds the gateway's ext_proc buffer (BUFFERED_PARTIAL sent only part of it)",
          'invalid_request_error',
          null,
          'body_too_large',
        ),
      );
    const { bodies } = this.ctx;
    if (!bodies.take(chunk.length)) {
      this.ctx.metrics.limited('max_buffered_bytes');
      return this.refuse(
        new Refused(
          503,
          `the picker holds ${bodies.bytes} bytes of request bodies, the most epp.max_buffered_bytes allows; retry later`,
          'server_error',
          'buffer_full',
          { 'retry-after': '1' },
        ),
      );
    }
    this.held += chunk.length;
    this.chunks.push(chunk);
    // BUFFERED sends the body in one message; FULL_DUPLEX_STREAMED flags its last chunk.
    if (this.requestMode === 'duplex' && !b.end_of_stream) return [];
    return this.pick(false);
  }

  /** The request is complete: pick, book, and answer (headers, then the body handed back). */
  private async pick(trailersFollow: boolean): Promise<ProcessingResponse[]> {
    const req = this.req!;
    const bytes = Buffer.concat(this.chunks, this.size);
    this.chunks = [];
    const { rt } = this.ctx;
    this.trace =
      rt.deps.tracing?.request(req.headers, `POST ${req.path}`, {
        'http.request.method': 'POST',
        'url.path': req.path,
        'kvrouter.request_id': req.requestId,
        'kvrouter.front_end': 'epp',
      }) ?? null;
    let b: Booked;
    try {
      b = await pickForBody(
        rt,
        this.ctx.addresses,
        { ...req, subset: this.subset },
        bytes,
        this.abort.signal,
        this.trace,
      );
    } catch (err) {
      return this.refuse(err);
    } finally {
      // The body is parsed and tokenized; the answer below carries it off.
      this.dropBody();
    }
    const { body, ...held } = b;
    this.booked = held;
    this.answered = true;
    this.sentAt = rt.now();
    this.ctx.metrics.result('routed');
    // The stream ended (or the picker shut down) while the pick was made: release it at once.
    if (this.finished) {
      this.release(499);
      return [];
    }
    // The stream ended while the pick was made: nobody will send the response.
    if (this.abort.signal.aborted) return [];
    const metadata = toStruct({ [LB_NS]: { [DESTINATION]: b.endpoint } });
    if (this.requestMode === 'buffered') {
      return [
        {
          request_body: {
            response: {
              header_mutation: setHeaders(b.upstreamHeaders),
              body_mutation: { body },
              clear_route_cache: true,
            },
          },
          dynamic_metadata: metadata,
        },
      ];
    }
    // Full duplex: the request headers' answer carries the pick; the body follows in chunks.
    return [
      {
        request_headers: { response: { clear_route_cache: true, header_mutation: setHeaders(b.upstreamHeaders) } },
        dynamic_metadata: metadata,
      },
      ...streamedBody('request_body', body, !trailersFollow),
    ];
  }

  private async pickHeadersOnly(): Promise<ProcessingResponse[]> {
    let endpoint: string;
    try {
      endpoint = await pickByLoad(this.ctx.rt, this.ctx.addresses, { ...this.req!, subset: this.subset });
    } catch (err) {
      return this.refuse(err);
    }
    this.answered = true;
    this.ctx.metrics.result('headers_only');
    return [
      {
        request_headers: {
          response: { clear_route_cache: true, header_mutation: setHeaders({ [DESTINATION]: endpoint }) },
        },
        dynamic_metadata: toStruct({ [LB_NS]: { [DESTINATION]: endpoint } }),
      },
    ];
  }

  /** Let go of the body's chunks and give their bytes back to the budget (idempotent). */
  private dropBody(): void {
    this.chunks = [];
    this.ctx.bodies.give(this.held);
    this.held = 0;
  }

  private refuse(err: unknown): ProcessingResponse[] {
    const e = err instanceof OpenAIError ? err : new OpenAIError(500, 'internal error', 'server_error');
    if (!(err instanceof OpenAIError)) process.stderr.write(`kvrouter epp: ${(err as Error).stack ?? String(err)}\n`);
    this.answered = true;
    this.dropBody();
    const result: EppResult = resultOf(e.status);
    this.ctx.metrics.result(result);
    if (e.status !== 499) this.ctx.rt.deps.metrics.rejected('unknown', e.status);
    if (this.trace) RequestTrace.finish(this.trace.root, e.status);
    this.trace = null;
    if (e.status === 499) return [];
    return [
      immediate(
        e.status,
        errorBody(this.req?.path ?? '/v1/', e),
        e instanceof Refused ? e.headers : {},
        `kvrouter_epp_${result}`,
      ),
    ];
  }

  private onResponseHeaders(h: HttpHeaders): ProcessingResponse[] {
    const headers = headerRecord(h.headers);
    const status = Number(headers[':status'] ?? 200);
    this.response = {
      status,
      stream: (headers['content-type'] ?? '').includes('text/event-stream'),
      firstSeen: false,
      tail: this.booked && status < 400 ? new UsageTail() : null,
    };
    // GIE marks the responses it saw; the client also gets the proxy's explanation headers.
    const set: Record<string, string> = { 'x-went-into-resp-headers': 'true' };
    if (this.booked && this.req) Object.assign(set, explanationHeaders(this.booked.d, this.req.requestId, 0));
    if (h.end_of_stream) this.complete();
    return [{ response_headers: { response: { header_mutation: setHeaders(set) } } }];
  }

  private onResponseBody(b: HttpBody): ProcessingResponse[] {
    const chunk = b.body ?? Buffer.alloc(0);
    // Without a response-headers phase (SKIP) the status is unknown (0) but the body still tells.
    const r = (this.response ??= {
      status: 0,
      stream: false,
      firstSeen: false,
      tail: this.booked ? new UsageTail() : null,
    });
    if (this.booked && !r.firstSeen && !this.finished) {
      r.firstSeen = true;
      const { deps, queue, now } = this.ctx.rt;
      // The prompt is computed: its tokens leave the instance's queued prefill. The time is not a
      // rate sample: it includes the gateway's hops (only the proxy path teaches prefill rates).
      deps.scheduler.prefillComplete(this.booked.bookingId);
      queue.notify(this.booked.instance.id);
      deps.observer?.firstByte?.(this.booked.instance.id, now() - this.sentAt, r.stream);
    }
    r.tail?.push(chunk);
    const out: ProcessingResponse[] = this.responseDuplex
      ? streamedBody('response_body', chunk, b.end_of_stream === true)
      : [{ response_body: { response: {} } }];
    if (b.end_of_stream) this.complete();
    return out;
  }

  /** The response ended normally (its last body chunk, trailers, or headers without a body). */
  private complete(): void {
    this.finish(this.response?.status ?? 0);
  }

  /** The exchange is over: release what it holds and report the outcome, exactly once. */
  private finish(status: number): void {
    if (this.finished) return;
    this.finished = true;
    this.abort.abort();
    this.release(status);
    if (this.trace) RequestTrace.finish(this.trace.root, status);
    this.trace = null;
  }

  /** Free the booking and the tenant's slot, exactly once, whatever reporting the usage does. */
  private release(status: number): void {
    const b = this.booked;
    if (!b || this.released) return;
    this.released = true;
    const { deps, queue, now } = this.ctx.rt;
    const observer: ForwardObserver | undefined = deps.observer;
    try {
      const tail = this.response?.tail;
      if (tail && status < 400) {
        const usage = tail.read();
        if (usage !== null && usage.cachedTokens !== null)
          deps.scheduler.reportUncached(b.bookingId, usage.promptTokens - usage.cachedTokens);
        observer?.reported?.(b.d, usage);
      }
    } finally {
      // An engine's error answer computed no prompt: its speculative insert goes (an unknown status,
      // 0, when the gateway skips the response phases, says nothing either way: it stays).
      deps.scheduler.free(b.bookingId, { failed: (this.response?.status ?? 0) >= 400, now: now() });
      queue.notify(b.instance.id);
      b.admission.release();
    }
    const outcome =
      status === 499 ? 'client_abort' : status >= 500 ? 'upstream_error' : status >= 400 ? 'failed' : 'ok';
    observer?.finished?.(b.instance.id, status, outcome, now() - (this.req?.receivedAt ?? now()), b.d.policy);
  }

  /** The gateway served another endpoint (a retry, a fallback): move the booking where the load went. */
  private moveTo(served: string): void {
    const b = this.booked!;
    this.ctx.metrics.mismatch();
    this.ctx.mismatch(b.endpoint, served);
    if (this.finished) return;
    const inst = b.pool.find((i) => this.ctx.addresses.addressOf(i.upstream.url) === served);
    const c =
      inst &&
      (b.d.candidates.find((x) => x.instance === inst.id && x.dpRank === b.d.chosen!.dpRank) ??
        b.d.candidates.find((x) => x.instance === inst.id));
    if (!inst || !c) {
      b.endpoint = served; // not ours to book: count it once
      return;
    }
    const { scheduler } = this.ctx.rt.deps;
    const prefillDone = scheduler.active.get(b.bookingId)?.prefillDone === true;
    // The endpoint first chosen did not serve it: nothing is computed there.
    scheduler.free(b.bookingId, { failed: true, now: this.ctx.rt.now() });
    const left = b.instance.id;
    b.d = { ...b.d, chosen: c };
    b.bookingId = `epp:${randomUUID()}`;
    b.instance = inst;
    b.endpoint = served;
    scheduler.book(b.d, b.ns, { requestId: b.bookingId, now: this.ctx.rt.now(), speculativeTtlMs: 0 });
    if (prefillDone) scheduler.prefillComplete(b.bookingId);
    this.ctx.rt.queue.notify(left);
  }
}

function tooLarge(limit: number): OpenAIError {
  return new OpenAIError(413, `request body exceeds ${limit} bytes`, 'invalid_request_error', null, 'body_too_large');
}
