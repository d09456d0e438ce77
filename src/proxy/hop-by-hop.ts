// What the router passes between a client and an engine, header by header. RFC 9110 §7.6.1: the
// fields of one connection (the fixed ones below, and every field the message's own Connection
// header names) are never forwarded, in either direction. From an engine's answer the router also
// drops `set-cookie`: the client sees the router's origin, and an engine has no cookie to set on it.
import type { IncomingHttpHeaders } from 'node:http';

/** Connection-specific fields, whatever the Connection header says (`proxy-connection`: the old non-standard one). */
const CONNECTION_FIELDS: ReadonlySet<string> = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'transfer-encoding',
  'te',
  'trailer',
  'upgrade',
  'proxy-authenticate',
  'proxy-authorization',
]);

/** The field of an engine's answer the client never gets, besides the connection's. */
const ENGINE_ONLY = 'set-cookie';

/** The fields of one message (lower-case names, as Node and undici give them) that belong to its connection. */
export function hopByHop(headers: IncomingHttpHeaders): ReadonlySet<string> {
  const c = headers.connection;
  // `connection: keep-alive` (every Node engine's answer) names nothing new: the fixed set, unparsed.
  if (c === undefined || c === 'keep-alive') return CONNECTION_FIELDS;
  // A set is made only when the header names a field beyond the fixed ones.
  let out: Set<string> | null = null;
  for (const line of Array.isArray(c) ? c : [c]) {
    for (const name of line.split(',')) {
      const n = name.trim().toLowerCase();
      if (n !== '' && !CONNECTION_FIELDS.has(n)) (out ??= new Set(CONNECTION_FIELDS)).add(n);
    }
  }
  return out ?? CONNECTION_FIELDS;
}

/** An engine's response headers as the client gets them: without the connection's fields or `set-cookie`. */
export function engineResponseHeaders(headers: IncomingHttpHeaders): Record<string, string | string[]> {
  const drop = hopByHop(headers);
  const out: Record<string, string | string[]> = {};
  for (const k in headers) {
    const v = headers[k];
    if (v !== undefined && !drop.has(k) && k !== ENGINE_ONLY) out[k] = v;
  }
  return out;
}

/** Whether a client's header may be passed on to an engine (the router forwards only a few it names). */
export function passesOn(headers: IncomingHttpHeaders, name: string): boolean {
  return !hopByHop(headers).has(name);
}
