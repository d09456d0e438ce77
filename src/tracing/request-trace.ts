// The spans of one request, on the OpenTelemetry API alone (no SDK): what the hot path touches
// when tracing is on. Children hang off the request's root span; every span ends exactly once.
import {
  type Attributes,
  type Context,
  defaultTextMapSetter,
  type Span,
  SpanKind,
  SpanStatusCode,
  type TextMapPropagator,
  trace,
  type Tracer,
} from '@opentelemetry/api';

/** service.version of the spans (package.json's version). */
export const KVROUTER_VERSION = '0.1.0';

/** The spans of one request. Children hang off the root; every span ends exactly once. */
export class RequestTrace {
  /** The status the client got (the proxy sets it; `res.statusCode` says 200 for an abort or a cut stream). */
  status: number | null = null;

  constructor(
    private readonly tracer: Tracer,
    private readonly propagator: TextMapPropagator,
    readonly root: Span,
    private readonly ctx: Context,
  ) {}

  child(name: string, attributes: Attributes = {}, kind: SpanKind = SpanKind.INTERNAL): Span {
    return this.tracer.startSpan(name, { kind, attributes }, this.ctx);
  }

  /** Write `span`'s context as traceparent (and tracestate) into upstream request headers. */
  inject(span: Span, headers: Record<string, string | string[] | undefined>): void {
    this.propagator.inject(trace.setSpan(this.ctx, span), headers, defaultTextMapSetter);
  }

  /** End a span with the HTTP status it led to (>= 500 or an exception: error). */
  static finish(span: Span, status: number, error?: string): void {
    span.setAttribute('http.response.status_code', status);
    if (status >= 500 || error) span.setStatus({ code: SpanStatusCode.ERROR, ...(error ? { message: error } : {}) });
    span.end();
  }
}
