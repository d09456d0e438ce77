// OpenTelemetry traces of proxied requests, exported over OTLP/HTTP: one span per request with
// children for tokenize, route and the upstream call (first token as an event). An incoming W3C
// `traceparent` is continued and the upstream span's context is passed on to the engine. Off by
// default, and then nothing here runs: call sites hold `Tracing | null` and skip it.
// The provider is private to the router (no global registration): embedding applications keep theirs.
// This module loads the SDK and the exporter: the runtime imports it only when tracing is on.
import type { IncomingHttpHeaders } from 'node:http';
import { type Attributes, defaultTextMapGetter, ROOT_CONTEXT, SpanKind, trace, type Tracer } from '@opentelemetry/api';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
import {
  BasicTracerProvider,
  BatchSpanProcessor,
  ParentBasedSampler,
  TraceIdRatioBasedSampler,
} from '@opentelemetry/sdk-trace-base';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { RequestTrace } from './request-trace.js';

const propagator = new W3CTraceContextPropagator();

export interface TracingOptions {
  /** OTLP/HTTP traces endpoint, e.g. http://collector:4318/v1/traces. */
  endpoint: string;
  /** Share of new traces recorded (a sampled incoming traceparent is always followed). */
  sampleRatio: number;
  serviceName: string;
  /** Extra HTTP headers for the collector (auth). */
  headers: Record<string, string>;
  /** Longest a finished span waits before it is exported (ms). */
  batchDelayMs: number;
}

export class Tracing {
  private constructor(
    private readonly provider: BasicTracerProvider,
    private readonly tracer: Tracer,
  ) {}

  static start(o: TracingOptions, version: string): Tracing {
    const provider = new BasicTracerProvider({
      resource: resourceFromAttributes({ 'service.name': o.serviceName, 'service.version': version }),
      sampler: new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(o.sampleRatio) }),
      spanProcessors: [
        new BatchSpanProcessor(new OTLPTraceExporter({ url: o.endpoint, headers: o.headers }), {
          scheduledDelayMillis: o.batchDelayMs,
        }),
      ],
    });
    return new Tracing(provider, provider.getTracer('kvrouter', version));
  }

  /** A request's root span, continuing the caller's trace when it sent a traceparent. */
  request(headers: IncomingHttpHeaders, name: string, attributes: Attributes): RequestTrace {
    const parent =
      headers.traceparent !== undefined
        ? propagator.extract(ROOT_CONTEXT, headers, defaultTextMapGetter)
        : ROOT_CONTEXT;
    const root = this.tracer.startSpan(name, { kind: SpanKind.SERVER, attributes }, parent);
    return new RequestTrace(this.tracer, propagator, root, trace.setSpan(parent, root));
  }

  /** Export what is buffered and stop. */
  async shutdown(): Promise<void> {
    await this.provider.shutdown().catch(() => undefined);
  }

  /** Export what is buffered now (tests, reload). */
  async flush(): Promise<void> {
    await this.provider.forceFlush().catch(() => undefined);
  }
}
