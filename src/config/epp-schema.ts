// The `epp:` section of the router YAML: the gateway endpoint picker's bounds on its ext_proc
// streams and who a request without a kvrouter key is. Read per stream (a reload applies to the
// streams opened after it); without --epp nothing reads it.
import { KEYLESS_POLICIES } from '../auth/access.js';
import { type Infer, int, obj, type ObjectSpec, str } from '../common/schema-dsl.js';

export const EPP_SCHEMA = obj(
  "The gateway endpoint picker (`kvrouter epp`, `serve --epp`; docs/gateway.md): its ext_proc streams' bounds, per router process, and access.",
  {
    keyless: str(
      "With auth on (an admin token or tenants): a request the gateway forwards without a kvrouter key (no `authorization: Bearer`, no `x-api-key`) is refused with 401 (refuse), or served as anonymous (trusted: the gateway authenticated it; no tenant's models, limits or salt apply, it may not name a tenant's cache_salt nor use x-kvrouter-target). A key that is not a kvrouter key is refused either way. With auth off every request is anonymous, as on the HTTP API.",
      { enum: KEYLESS_POLICIES, default: 'refuse' },
    ),
    idle_timeout_ms: int(
      "Longest silence of the gateway on an open stream: its next message (a body chunk; after the pick, the response's headers, which a non-streaming response sends when it is complete, or its next chunk). Then a request not yet picked gets 408; a picked one is released and the stream ended with OK (the gateway carries on without the picker).",
      { min: 100, max: 86_400_000, default: 60_000 },
    ),
    stream_timeout_ms: int('Longest life of a stream, whatever it sends; then as for idle_timeout_ms.', {
      min: 100,
      max: 86_400_000,
      default: 3_600_000,
    }),
    max_streams: int(
      'Open ext_proc streams at most (one per gateway request in flight); a stream beyond it ends at once with gRPC RESOURCE_EXHAUSTED.',
      { min: 1, max: 1_000_000, default: 10_000 },
    ),
    max_buffered_bytes: int(
      'Request-body bytes all streams may hold at once while their bodies arrive (each is also capped by server.max_body_bytes); a chunk beyond it is refused with 503 and retry-after. Never less than server.max_body_bytes: one body of the largest size always fits.',
      { min: 1024, max: 2 ** 40, default: 256 * 1024 * 1024 },
    ),
  },
) satisfies ObjectSpec;

/** RouterConfig['epp']: derived from the schema (defaults applied). */
export type EppConfig = Infer<typeof EPP_SCHEMA>;
