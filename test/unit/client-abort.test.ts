// The proxy's per-request abort: listeners run once, late listeners at once, cancellations stick,
// and the AbortSignal made for the APIs that need one follows the flag either way round.
import { describe, expect, it } from 'vitest';
import { ClientAbort } from '../../src/proxy/forward.js';

describe('ClientAbort', () => {
  it('runs each listener once, in order, and none that was cancelled', () => {
    const a = new ClientAbort();
    const calls: string[] = [];
    a.onAbort(() => calls.push('first'));
    const cancel = a.onAbort(() => calls.push('cancelled'));
    a.onAbort(() => calls.push('second'));
    cancel();
    expect(a.aborted).toBe(false);
    a.abort();
    a.abort();
    expect(a.aborted).toBe(true);
    expect(calls).toEqual(['first', 'second']);
  });

  it('calls a listener added after the abort at once', () => {
    const a = new ClientAbort();
    a.abort();
    let called = 0;
    const cancel = a.onAbort(() => called++);
    cancel();
    expect(called).toBe(1);
  });

  it('makes a signal only when asked, aborted if the client already left or when it leaves', () => {
    const before = new ClientAbort();
    const s1 = before.signal;
    expect(s1.aborted).toBe(false);
    expect(before.signal).toBe(s1);
    let heard = 0;
    s1.addEventListener('abort', () => heard++);
    before.abort();
    expect(s1.aborted).toBe(true);
    expect(heard).toBe(1);

    const after = new ClientAbort();
    after.abort();
    expect(after.signal.aborted).toBe(true);
  });
});
