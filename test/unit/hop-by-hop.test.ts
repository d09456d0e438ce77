// Which headers cross the router (RFC 9110 §7.6.1): never a connection's own, in either direction.
import { describe, expect, it } from 'vitest';
import { engineResponseHeaders, hopByHop, passesOn } from '../../src/proxy/hop-by-hop.js';

describe('hop-by-hop headers', () => {
  it('adds the fields a Connection header names (any case, several lines) to the fixed ones, and reuses the fixed set when it names none', () => {
    const fixed = hopByHop({});
    expect([...fixed].sort()).toEqual([
      'connection',
      'keep-alive',
      'proxy-authenticate',
      'proxy-authorization',
      'proxy-connection',
      'te',
      'trailer',
      'transfer-encoding',
      'upgrade',
    ]);
    expect(hopByHop({ connection: 'keep-alive' })).toBe(fixed);
    const named = hopByHop({ connection: ['Keep-Alive, X-Foo', ' x-bar ,,'] as unknown as string });
    expect(named.has('x-foo') && named.has('x-bar') && named.has('upgrade')).toBe(true);
    expect(fixed.has('x-foo')).toBe(false);
  });

  it("gives the client an engine's headers without its connection's fields or set-cookie", () => {
    const out = engineResponseHeaders({
      'content-type': 'text/event-stream',
      connection: 'close, x-foo',
      'x-foo': '1',
      'keep-alive': 'timeout=5',
      'transfer-encoding': 'chunked',
      'set-cookie': ['a=1', 'b=2'],
      'x-bar': '2',
    });
    expect(out).toEqual({ 'content-type': 'text/event-stream', 'x-bar': '2' });
  });

  it("passes a client's header on unless its Connection header names it", () => {
    expect(passesOn({ traceparent: 'x' }, 'traceparent')).toBe(true);
    expect(passesOn({ traceparent: 'x', connection: 'TraceParent' }, 'traceparent')).toBe(false);
    expect(passesOn({}, 'te')).toBe(false);
  });
});
