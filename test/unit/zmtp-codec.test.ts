// ZMTP frame reader: messages come out identical however the byte stream is chunked, limits are
// enforced before buffering, and arbitrary bytes never throw.
import { describe, expect, it } from 'vitest';
import {
  command,
  FrameReader,
  greeting,
  messageFrame,
  multipartMessage,
  parseCommand,
  parseGreeting,
  parseProperties,
  ping,
  ready,
  subscription,
} from '../../src/events/zmtp/codec.js';
import { mulberry32 } from '../../src/common/prng.js';

function multipart(frames: Uint8Array[]): Buffer {
  const out: Buffer[] = [];
  frames.forEach((f, i) => {
    const more = i < frames.length - 1 ? 1 : 0;
    if (f.length <= 255) out.push(Buffer.from([more, f.length]));
    else {
      const h = Buffer.alloc(9);
      h[0] = more | 2;
      h.writeBigUInt64BE(BigInt(f.length), 1);
      out.push(h);
    }
    out.push(Buffer.from(f));
  });
  return Buffer.concat(out);
}

interface Seen {
  messages: string[][];
  commands: string[];
  errors: string[];
}

function reader(max = 1 << 20): { r: FrameReader; seen: Seen } {
  const seen: Seen = { messages: [], commands: [], errors: [] };
  const r = new FrameReader(
    {
      message: (frames) => seen.messages.push(frames.map((f) => f.toString('hex'))),
      command: (body) => {
        const c = parseCommand(body);
        seen.commands.push('error' in c ? `!${c.error}` : c.name);
      },
      error: (reason) => seen.errors.push(reason),
    },
    max,
  );
  return { r, seen };
}

describe('ZMTP codec', () => {
  const rand = mulberry32(7);
  const bytes = (n: number) => Buffer.from(Array.from({ length: n }, () => Math.floor(rand() * 256)));
  const messages = [
    [bytes(0)],
    [Buffer.from('kv'), bytes(8), bytes(300)],
    [bytes(255)],
    [bytes(256), bytes(70_000)],
    [bytes(1), bytes(1), bytes(1), bytes(1)],
  ];
  const stream = Buffer.concat([
    ...messages.slice(0, 2).map(multipart),
    ping(1500, Buffer.from('ctx')),
    ...messages.slice(2).map(multipart),
  ]);
  const expected = messages.map((m) => m.map((f) => f.toString('hex')));

  it("multipartMessage writes the bytes of this file's reference encoder, and the reader gives its frames back", () => {
    for (const m of messages) {
      expect(multipartMessage(m).equals(multipart(m))).toBe(true);
      const { r, seen } = reader();
      r.push(multipartMessage(m));
      expect(seen.messages).toEqual([m.map((f) => f.toString('hex'))]);
    }
    expect(() => multipartMessage([])).toThrow(/at least one frame/);
  });

  it('reassembles the same messages and commands for every chunking of the stream', () => {
    const cuts = [1, 2, 3, 7, 9, 64, 1000, 65_536, stream.length];
    for (const size of cuts) {
      const { r, seen } = reader();
      for (let off = 0; off < stream.length; off += size) r.push(stream.subarray(off, off + size));
      expect(seen.errors).toEqual([]);
      expect(seen.messages).toEqual(expected);
      expect(seen.commands).toEqual(['PING']);
    }
    // Random chunk boundaries.
    for (let t = 0; t < 50; t++) {
      const { r, seen } = reader();
      let off = 0;
      while (off < stream.length) {
        const n = 1 + Math.floor(rand() * 4000);
        r.push(stream.subarray(off, off + n));
        off += n;
      }
      expect(seen.messages).toEqual(expected);
    }
  });

  it('rejects an oversized message from its header, before its body arrives', () => {
    const { r, seen } = reader(1000);
    r.push(multipart([bytes(600), bytes(600)]).subarray(0, 620));
    expect(seen.errors).toEqual(['message larger than 1000 bytes']);
    r.push(multipart([bytes(1)])); // stopped: nothing more is parsed
    expect(seen.messages).toEqual([]);
  });

  it('rejects reserved flag bits and commands inside a multipart message', () => {
    const a = reader();
    a.r.push(Buffer.from([0x08, 0]));
    expect(a.seen.errors).toEqual(['reserved frame flag bits set (0x8)']);
    const b = reader();
    b.r.push(Buffer.concat([Buffer.from([1, 1, 0xaa]), command('PING', Buffer.from([0, 1]))]));
    expect(b.seen.errors).toEqual(['command frame inside a multipart message']);
  });

  it('never throws on random bytes', () => {
    for (let t = 0; t < 3000; t++) {
      const { r } = reader(1 << 16);
      const junk = bytes(Math.floor(rand() * 600));
      expect(() => {
        r.push(junk);
        r.push(bytes(3));
      }).not.toThrow();
      expect(() => parseCommand(junk)).not.toThrow();
      expect(() => parseProperties(junk)).not.toThrow();
      expect(() => parseGreeting(junk)).not.toThrow();
    }
  });

  it('encodes the greeting, READY and subscriptions as RFC 23 spells them', () => {
    const g = greeting();
    expect(g.length).toBe(64);
    expect(g.subarray(0, 12).toString('hex')).toBe('ff00000000000000007f0300');
    expect(g.subarray(12, 16).toString('latin1')).toBe('NULL');
    expect(parseGreeting(g)).toEqual({ major: 3, minor: 0, mechanism: 'NULL' });
    const curve = Buffer.from(g);
    curve.write('CURVE', 12, 'latin1');
    expect(parseGreeting(curve)).toEqual({
      error: 'peer requires the CURVE security mechanism; use zmq_client: libzmq',
    });
    const v2 = Buffer.from(g);
    v2[10] = 1;
    expect('error' in parseGreeting(v2)).toBe(true);

    const r = ready({ 'Socket-Type': 'SUB' });
    expect(r.toString('hex')).toBe('0419055245414459' + '0b536f636b65742d54797065' + '00000003' + '535542');
    const c = parseCommand(r.subarray(2));
    expect('name' in c && c.name).toBe('READY');
    if ('name' in c) expect(parseProperties(c.data)).toEqual(new Map([['socket-type', 'SUB']]));
    expect(subscription('kv').toString('hex')).toBe('0003016b76');
    expect(subscription('kv', false).toString('hex')).toBe('0003006b76');
    expect(messageFrame(Buffer.alloc(300)).subarray(0, 9).toString('hex')).toBe('02000000000000012c');
    // PING TTL in deciseconds, clamped where libzmq's uint16 ms would wrap.
    expect(ping(15_000).toString('hex')).toBe('04070450494e470096');
    expect(ping(3_600_000).subarray(7, 9).readUInt16BE(0)).toBe(655);
  });
});
