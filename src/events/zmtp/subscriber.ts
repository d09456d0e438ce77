// A ZMQ SUB socket in plain Node: ZMTP 3.0 over node:net (tcp:// and ipc://), talking to any libzmq
// PUB/XPUB. Reconnects with backoff, answers and sends heartbeats, and hands whole messages to the
// caller synchronously from the socket's data callback, many per chunk. The listener picks it over
// the zeromq binding because that costs 11-21 us per received message (one native call and promise
// each) against ~2 us here: the difference between ~400k and >1M block events/s on one core.
import net from 'node:net';
import {
  FrameReader,
  GREETING_SIZE,
  greeting,
  parseCommand,
  parseGreeting,
  parseProperties,
  ping,
  pong,
  ready,
  subscription,
} from './codec.js';

export interface ZmtpSubOptions {
  /** First reconnect delay; doubles per failed attempt up to reconnectMaxMs. */
  reconnectMs: number;
  reconnectMaxMs: number;
  /** Send PING after this much silence and drop the connection after 3x without any data (0 = off). */
  heartbeatMs: number;
  /** Largest accepted message (all frames); larger is a protocol error and a reconnect. */
  maxMessageBytes: number;
  /** Handshake must complete within this (ms). */
  handshakeTimeoutMs: number;
}

export const DEFAULT_ZMTP_SUB_OPTIONS: Readonly<ZmtpSubOptions> = {
  reconnectMs: 100,
  reconnectMaxMs: 5_000,
  heartbeatMs: 5_000,
  maxMessageBytes: 64 << 20, // a 1M-token prefill batch is ~3 MB of msgpack
  handshakeTimeoutMs: 10_000,
};

export interface SubHandlers {
  /** Handshake done and subscription sent. */
  connected(): void;
  /** A connection that had completed its handshake is gone (a reconnect follows). */
  disconnected(reason: string): void;
  /** A connection attempt or handshake failed; retrying after a backoff. */
  retrying(reason: string): void;
  /** A whole message; frames are views into the received chunk (copy what you keep long). */
  message(frames: Buffer[]): void;
  /** The socket cannot go on (libzmq receive error); no retry follows. */
  failed(reason: string): void;
}

export type ConnectTarget = { host: string; port: number } | { path: string };

/** tcp://host:port, tcp://[v6]:port or ipc://path -> connect target; an error string otherwise. */
export function parseEndpoint(endpoint: string): ConnectTarget | { error: string } {
  const ipc = /^ipc:\/\/(.+)$/.exec(endpoint);
  // libzmq's ipc://@name is a Linux abstract socket; Node 20's net cannot connect to one (tried:
  // a leading NUL gives ECONNREFUSED), so it is left to libzmq.
  if (ipc)
    return ipc[1].startsWith('@')
      ? { error: `${endpoint} is an abstract socket (use zmq_client: libzmq)` }
      : { path: ipc[1] };
  // Hosts exclude ';' (libzmq's tcp://source;dest:port form is left to libzmq).
  const tcp = /^tcp:\/\/(?:\[([0-9a-fA-F:.]+)\]|([^:/\[\];]+)):(\d{1,5})$/.exec(endpoint);
  if (!tcp) return { error: `unsupported endpoint ${endpoint} (tcp://host:port or ipc://path)` };
  const host = tcp[1] ?? tcp[2];
  const port = Number(tcp[3]);
  if (host === '*') return { error: `${endpoint} is a bind address; connect to the publisher's host` };
  if (port < 1 || port > 65_535) return { error: `bad port in ${endpoint}` };
  return { host, port };
}

/** True when the built-in client can connect to this endpoint. */
export function zmtpSupports(endpoint: string): boolean {
  return !('error' in parseEndpoint(endpoint));
}

/** Why a peer's READY cannot start a SUB connection (bad properties, not a publisher), or null. */
function readyError(data: Uint8Array): string | null {
  const props = parseProperties(data);
  if ('error' in props) return `READY: ${props.error}`;
  const type = props.get('socket-type');
  if (type !== 'PUB' && type !== 'XPUB') return `peer socket type ${type ?? '(none)'} cannot feed a SUB`;
  return null;
}

export class ZmtpSubscriber {
  private sock: net.Socket | null = null;
  private closed = false;
  private backoff: number;
  private retryTimer: NodeJS.Timeout | null = null;
  private beatTimer: NodeJS.Timeout | null = null;
  private handshakeTimer: NodeJS.Timeout | null = null;
  private lastRx = 0;
  private readonly opts: ZmtpSubOptions;
  private readonly target: ConnectTarget;

  constructor(
    readonly endpoint: string,
    private readonly topics: readonly string[],
    private readonly handlers: SubHandlers,
    opts: Partial<ZmtpSubOptions> = {},
  ) {
    this.opts = { ...DEFAULT_ZMTP_SUB_OPTIONS, ...opts };
    this.backoff = this.opts.reconnectMs;
    const t = parseEndpoint(endpoint);
    if ('error' in t) throw new Error(t.error);
    this.target = t;
  }

  start(): void {
    this.connect();
  }

  close(): void {
    this.closed = true;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.retryTimer = null;
    this.teardown();
  }

  private connect(): void {
    if (this.closed) return;
    const sock =
      'path' in this.target
        ? net.connect({ path: this.target.path })
        : net.connect({ host: this.target.host, port: this.target.port });
    this.sock = sock;
    sock.setNoDelay(true);
    let handshaken = false;
    let greeted = false;
    let head: Buffer[] = [];
    let headBytes = 0;
    let ended: string | null = null;

    const drop = (reason: string) => {
      if (ended !== null) return;
      ended = reason;
      reader.stop(); // nothing after the fault is delivered, not even the rest of this chunk
      sock.destroy();
    };
    const reader = new FrameReader(
      {
        message: (frames) => {
          if (!handshaken) return drop('message before READY');
          try {
            this.handlers.message(frames);
          } catch (err) {
            // A consumer bug must not escape a socket callback (it would take the process down).
            drop(`message handler: ${(err as Error).message}`);
          }
        },
        command: (body) => {
          const c = parseCommand(body);
          if ('error' in c) return drop(c.error);
          switch (c.name) {
            case 'READY': {
              if (handshaken) return drop('second READY');
              const bad = readyError(c.data);
              if (bad !== null) return drop(bad);
              handshaken = true;
              this.handshakeDone(sock);
              return;
            }
            case 'ERROR': {
              const n = c.data[0] ?? 0;
              return drop(`peer ERROR: ${Buffer.from(c.data.subarray(1, 1 + n)).toString('latin1')}`);
            }
            case 'PING': {
              // ping = ttl(2) context(0..16): answer with the context.
              if (c.data.length >= 2) sock.write(pong(c.data.subarray(2)));
              return;
            }
            default:
              return; // PONG and unknown commands: the received bytes already count as liveness
          }
        },
        error: (reason) => drop(`protocol: ${reason}`),
      },
      this.opts.maxMessageBytes,
    );

    // Covers the TCP connect too: a host that drops SYNs would otherwise hang an attempt for minutes.
    this.handshakeTimer = setTimeout(
      () => drop(greeted ? 'handshake timed out' : 'connect timed out'),
      this.opts.handshakeTimeoutMs,
    );
    this.handshakeTimer.unref();
    sock.on('connect', () => {
      sock.write(greeting());
    });
    sock.on('data', (chunk: Buffer) => {
      this.lastRx = Date.now();
      if (greeted) {
        reader.push(chunk);
        return;
      }
      head.push(chunk);
      headBytes += chunk.length;
      if (headBytes < GREETING_SIZE) return;
      const all = Buffer.concat(head, headBytes);
      head = [];
      const g = parseGreeting(all);
      if ('error' in g) return drop(g.error);
      greeted = true;
      sock.write(ready({ 'Socket-Type': 'SUB' }));
      if (all.length > GREETING_SIZE) reader.push(all.subarray(GREETING_SIZE));
    });
    sock.on('error', (err: NodeJS.ErrnoException) => {
      ended ??= err.code ?? err.message;
    });
    sock.on('close', () => {
      reader.stop();
      this.teardown(sock);
      if (this.closed) return;
      const reason = ended ?? 'connection closed by peer';
      if (handshaken) this.handlers.disconnected(reason);
      else this.handlers.retrying(reason);
      this.scheduleReconnect(handshaken);
    });
  }

  /** The peer's READY was good: subscribe, reset the backoff, start the heartbeat. */
  private handshakeDone(sock: net.Socket): void {
    if (this.handshakeTimer) clearTimeout(this.handshakeTimer);
    this.handshakeTimer = null;
    for (const t of this.topics) sock.write(subscription(t));
    this.backoff = this.opts.reconnectMs;
    this.armHeartbeat(sock);
    this.handlers.connected();
  }

  private scheduleReconnect(wasUp: boolean): void {
    // After a working connection, retry at once (a publisher restart is the common case).
    const delay = wasUp ? this.opts.reconnectMs : this.backoff;
    if (!wasUp) this.backoff = Math.min(this.opts.reconnectMaxMs, this.backoff * 2);
    this.retryTimer = setTimeout(() => {
      this.retryTimer = null;
      this.connect();
    }, delay);
    this.retryTimer.unref();
  }

  private armHeartbeat(sock: net.Socket): void {
    const ivl = this.opts.heartbeatMs;
    if (ivl <= 0) return;
    this.beatTimer = setInterval(() => {
      if (Date.now() - this.lastRx >= ivl * 3) {
        // Timers run before pending socket reads after an event-loop stall: look again once the
        // poll phase has delivered whatever arrived meanwhile.
        setImmediate(() => {
          const silent = Date.now() - this.lastRx;
          if (silent >= ivl * 3 && this.sock === sock) sock.destroy(new Error(`no data or heartbeat for ${silent} ms`));
        });
        return;
      }
      // Every interval, busy or not: libzmq arms a TTL timer on each PING and only a later frame
      // from us cancels it, and a SUB sends nothing else. Pinging only when idle got us dropped
      // one TTL after an idle engine became busy.
      sock.write(ping(ivl * 3));
    }, ivl);
    this.beatTimer.unref();
  }

  private teardown(sock?: net.Socket): void {
    if (sock !== undefined && sock !== this.sock) return;
    if (this.beatTimer) clearInterval(this.beatTimer);
    if (this.handshakeTimer) clearTimeout(this.handshakeTimer);
    this.beatTimer = null;
    this.handshakeTimer = null;
    this.sock?.destroy();
    this.sock = null;
  }
}
