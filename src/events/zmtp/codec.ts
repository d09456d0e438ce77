// ZMTP 3.0 (RFC 23) wire codec for a subscriber: greeting, NULL-mechanism commands and the frame
// reader. Pure: bytes in, frames/commands out; no sockets. We advertise 3.0 so a libzmq 4.x peer
// speaks 3.0 to us (subscriptions as 0x01-prefixed messages); PING/PONG commands (3.1) are still
// understood by libzmq and handled here.

export const GREETING_SIZE = 64;
const FLAG_MORE = 0x01;
const FLAG_LONG = 0x02;
const FLAG_COMMAND = 0x04;

/** Our greeting: signature, version 3.0, mechanism NULL, as-server 0, filler. */
export function greeting(): Buffer {
  const g = Buffer.alloc(GREETING_SIZE);
  g[0] = 0xff;
  g[9] = 0x7f;
  g[10] = 3;
  g[11] = 0;
  g.write('NULL', 12, 'latin1');
  return g;
}

export interface PeerGreeting {
  major: number;
  minor: number;
  mechanism: string;
}

/** Parse the peer's 64-byte greeting; an error string when it is not ZMTP 3.x with NULL security. */
export function parseGreeting(g: Uint8Array): PeerGreeting | { error: string } {
  if (g.length < GREETING_SIZE) return { error: 'short greeting' };
  if (g[0] !== 0xff || (g[9] & 0x01) !== 0x01) return { error: 'peer is not a ZMTP endpoint (bad signature)' };
  const major = g[10];
  const minor = g[11];
  let end = 12;
  while (end < 32 && g[end] !== 0) end++;
  const mechanism = Buffer.from(g.subarray(12, end)).toString('latin1');
  if (major < 3) return { error: `peer speaks ZMTP ${major}.x (libzmq < 4); use zmq_client: libzmq` };
  if (mechanism !== 'NULL')
    return { error: `peer requires the ${mechanism} security mechanism; use zmq_client: libzmq` };
  return { major, minor, mechanism };
}

function frameHeader(flags: number, size: number): Buffer {
  if (size <= 255) return Buffer.from([flags, size]);
  const h = Buffer.alloc(9);
  h[0] = flags | FLAG_LONG;
  h.writeBigUInt64BE(BigInt(size), 1);
  return h;
}

/** A command frame: name plus body (already encoded). */
export function command(name: string, data: Uint8Array = new Uint8Array(0)): Buffer {
  const nameBytes = Buffer.from(name, 'latin1');
  const body = Buffer.concat([Buffer.from([nameBytes.length]), nameBytes, data]);
  return Buffer.concat([frameHeader(FLAG_COMMAND, body.length), body]);
}

/** READY with the given metadata properties (Socket-Type, ...). */
export function ready(props: Readonly<Record<string, string>>): Buffer {
  const parts: Buffer[] = [];
  for (const [k, v] of Object.entries(props)) {
    const name = Buffer.from(k, 'latin1');
    const value = Buffer.from(v, 'utf8');
    const len = Buffer.alloc(4);
    len.writeUInt32BE(value.length);
    parts.push(Buffer.from([name.length]), name, len, value);
  }
  return command('READY', Buffer.concat(parts));
}

/** libzmq multiplies the TTL by 100 in a uint16 (ms): above 655 deciseconds it wraps. */
export const MAX_PING_TTL_DS = 655;

/** PING with a TTL in tenths of a second (how long the peer may wait before giving up on us). */
export function ping(ttlMs: number, context: Uint8Array = new Uint8Array(0)): Buffer {
  const ttl = Buffer.alloc(2);
  ttl.writeUInt16BE(Math.min(MAX_PING_TTL_DS, Math.round(ttlMs / 100)));
  return command('PING', Buffer.concat([ttl, context.subarray(0, 16)]));
}

export function pong(context: Uint8Array): Buffer {
  return command('PONG', context.subarray(0, 16));
}

/** A single-frame message (subscriptions: 0x01 + topic; cancel: 0x00 + topic). */
export function messageFrame(body: Uint8Array): Buffer {
  return Buffer.concat([frameHeader(0, body.length), body]);
}

/**
 * One message of several frames (MORE on all but the last) in one buffer. The subscriber never
 * sends these; `serve --workers` processes speak this framing to each other (src/processes/mesh.ts).
 */
export function multipartMessage(parts: readonly Uint8Array[]): Buffer {
  if (parts.length === 0) throw new Error('a ZMTP message has at least one frame');
  let size = 0;
  for (const p of parts) size += (p.length <= 255 ? 2 : 9) + p.length;
  const out = Buffer.allocUnsafe(size);
  let at = 0;
  for (let i = 0; i < parts.length; i++) {
    const p = parts[i];
    const more = i < parts.length - 1 ? FLAG_MORE : 0;
    if (p.length <= 255) {
      out[at] = more;
      out[at + 1] = p.length;
      at += 2;
    } else {
      out[at] = more | FLAG_LONG;
      out.writeUInt32BE(Math.floor(p.length / 0x1_0000_0000), at + 1);
      out.writeUInt32BE(p.length >>> 0, at + 5);
      at += 9;
    }
    out.set(p, at);
    at += p.length;
  }
  return out;
}

export function subscription(topic: string, subscribe = true): Buffer {
  return messageFrame(Buffer.concat([Buffer.from([subscribe ? 1 : 0]), Buffer.from(topic, 'utf8')]));
}

export interface Command {
  name: string;
  data: Uint8Array;
}

/** Split a command body into name and data. */
export function parseCommand(body: Uint8Array): Command | { error: string } {
  if (body.length < 1 || body[0] === 0 || body.length < 1 + body[0]) return { error: 'malformed command frame' };
  const name = Buffer.from(body.buffer, body.byteOffset + 1, body[0]).toString('latin1');
  return { name, data: body.subarray(1 + body[0]) };
}

/** READY/metadata properties (names lowercased: ZMTP property names are case-insensitive). */
export function parseProperties(data: Uint8Array): Map<string, string> | { error: string } {
  const out = new Map<string, string>();
  let off = 0;
  while (off < data.length) {
    const n = data[off];
    if (n === 0 || off + 1 + n + 4 > data.length) return { error: 'malformed metadata' };
    const name = Buffer.from(data.buffer, data.byteOffset + off + 1, n)
      .toString('latin1')
      .toLowerCase();
    off += 1 + n;
    const len = ((data[off] << 24) >>> 0) + (data[off + 1] << 16) + (data[off + 2] << 8) + data[off + 3];
    off += 4;
    if (off + len > data.length) return { error: 'malformed metadata' };
    out.set(name, Buffer.from(data.buffer, data.byteOffset + off, len).toString('utf8'));
    off += len;
  }
  return out;
}

export interface FrameSink {
  /** A complete multipart message; frames are views into the received chunks (each read is its
   * own allocation, never reused, so keeping a view is safe; it pins that chunk). */
  message(frames: Buffer[]): void;
  command(body: Buffer): void;
  /** Protocol violation: the connection must be dropped. */
  error(reason: string): void;
}

/**
 * Incremental frame reader: feed it TCP chunks, it emits whole messages. Parsing a chunk of dozens
 * of messages in one pass (no per-message native call, no copy unless a frame spans chunks) is what
 * makes this path several times cheaper than a libzmq binding's one-receive-per-message.
 */
export class FrameReader {
  // Bytes of an incomplete frame, kept as a list so a large frame arriving in many chunks is
  // joined once (not re-copied on every chunk), and how many bytes it needs before parsing resumes.
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  private need = 0;
  private parts: Buffer[] = [];
  private partsBytes = 0;
  private failed = false;

  constructor(
    private readonly sink: FrameSink,
    /** Largest message (all frames) accepted; a larger one is a protocol error. */
    private readonly maxMessageBytes: number,
  ) {}

  push(chunk: Buffer): void {
    if (this.failed) return;
    let buf = chunk;
    if (this.pendingBytes > 0) {
      this.pending.push(chunk);
      this.pendingBytes += chunk.length;
      if (this.pendingBytes < this.need) return;
      buf = Buffer.concat(this.pending, this.pendingBytes);
      this.pending = [];
      this.pendingBytes = 0;
    }
    const len = buf.length;
    let need = 0;
    let off = 0;
    while (off < len) {
      if (len - off < 2) {
        need = 2;
        break;
      }
      const flags = buf[off];
      if ((flags & 0xf8) !== 0) return this.fail(`reserved frame flag bits set (0x${flags.toString(16)})`);
      let size: number;
      let hdr: number;
      if (flags & FLAG_LONG) {
        if (len - off < 9) {
          need = 9;
          break;
        }
        const hi = buf.readUInt32BE(off + 1);
        const lo = buf.readUInt32BE(off + 5);
        if (hi > 0x1fffff) return this.fail('frame size exceeds 2^53');
        size = hi * 0x1_0000_0000 + lo;
        hdr = 9;
      } else {
        size = buf[off + 1];
        hdr = 2;
      }
      if (size > this.maxMessageBytes - this.partsBytes)
        return this.fail(`message larger than ${this.maxMessageBytes} bytes`);
      if (len - off < hdr + size) {
        need = hdr + size;
        break;
      }
      const body = buf.subarray(off + hdr, off + hdr + size);
      off += hdr + size;
      if (flags & FLAG_COMMAND) {
        if (this.parts.length > 0) return this.fail('command frame inside a multipart message');
        this.sink.command(body);
        if (this.failed) return;
        continue;
      }
      this.parts.push(body);
      this.partsBytes += size;
      if ((flags & FLAG_MORE) === 0) {
        const frames = this.parts;
        this.parts = [];
        this.partsBytes = 0;
        this.sink.message(frames);
        if (this.failed) return;
      }
    }
    if (off < len) {
      this.pending = [buf.subarray(off)];
      this.pendingBytes = len - off;
      this.need = need;
    }
  }

  /** Stop parsing (after an error, or when the connection is being torn down). */
  stop(): void {
    this.failed = true;
    this.pending = [];
    this.pendingBytes = 0;
    this.parts = [];
  }

  private fail(reason: string): void {
    this.stop();
    this.sink.error(reason);
  }
}
