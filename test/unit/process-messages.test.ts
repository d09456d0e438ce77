// The `serve --workers` channel's sync batches (src/processes/messages.ts): a turn's replica-sync
// messages travel as one framed byte array and come back as the same messages, in order.
import { describe, expect, it } from 'vitest';
import { frameBatch, stallWatch, unframeBatch } from '../../src/processes/messages.js';
import { ProcessLink } from '../../src/processes/worker.js';
import { mulberry32 } from '../../src/common/prng.js';

describe('sync batch framing', () => {
  it('gives back every message, byte for byte and in order', () => {
    const rand = mulberry32(6);
    for (const count of [0, 1, 2, 5, 40]) {
      const messages = Array.from({ length: count }, (_, i) =>
        Uint8Array.from({ length: i % 3 === 0 ? 0 : Math.floor(rand() * 2000) }, () => Math.floor(rand() * 256)),
      );
      const back = unframeBatch(frameBatch(messages));
      expect(back.map((m) => Buffer.from(m).toString('hex'))).toEqual(
        messages.map((m) => Buffer.from(m).toString('hex')),
      );
    }
  });

  it('reads a batch that sits inside a larger buffer (as the channel may hand it over)', () => {
    const framed = frameBatch([Uint8Array.of(1, 2, 3), Uint8Array.of(), Uint8Array.of(9)]);
    const host = new Uint8Array(framed.byteLength + 7);
    host.set(framed, 5);
    expect(unframeBatch(host.subarray(5, 5 + framed.byteLength)).map((m) => [...m])).toEqual([[1, 2, 3], [], [9]]);
  });

  it('refuses a cut frame', () => {
    const framed = frameBatch([Uint8Array.of(1, 2, 3, 4), Uint8Array.of(5, 6)]);
    expect(() => unframeBatch(framed.subarray(0, framed.byteLength - 1))).toThrow(/passes the end/);
    expect(() => unframeBatch(framed.subarray(0, 10))).toThrow(/header is cut/);
  });

  it('a process link delivers a framed batch, the array an older process sends, and drops a cut one whole', () => {
    const link = new ProcessLink();
    const got: string[] = [];
    link.subscribe('s', (data) => got.push(Buffer.from(data).toString()));
    const msgs = ['a', 'bc', ''].map((t) => new TextEncoder().encode(t));
    link.deliver('s', frameBatch(msgs));
    link.deliver('s', msgs);
    link.deliver('s', frameBatch(msgs).subarray(0, 7));
    link.deliver('other', frameBatch(msgs));
    expect(got).toEqual(['a', 'bc', '', 'a', 'bc', '']);
  });
});

describe('stallWatch', () => {
  it('counts ticks: a quarter of the timeout (at most a second), and the timeout in ticks', () => {
    expect(stallWatch(0)).toBeNull();
    expect(stallWatch(30_000)).toEqual({ everyMs: 1000, missedTicks: 30 });
    expect(stallWatch(3000)).toEqual({ everyMs: 750, missedTicks: 4 });
    // Under a second, a second: jitter alone would kill healthy processes.
    expect(stallWatch(100)).toEqual({ everyMs: 250, missedTicks: 4 });
  });
});
