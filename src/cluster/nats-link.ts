// One NATS connection with its state: connects in the background (retrying forever, so a router
// starts and routes without NATS), reconnects on loss, and reports connected / last error for
// /ready details and metrics. Publishing while disconnected drops (and says so) instead of
// buffering: receivers detect the hole from sequence numbers and recover on their side.
import { connect, type NatsConnection, type Status, type Subscription } from 'nats';

export interface LinkOptions {
  /** nats://host:port (comma-separated for several servers). */
  url: string;
  /** Client name shown by the server's monitoring. */
  name: string;
  /** Delay between connection attempts (ms). */
  reconnectWaitMs?: number;
  log?: (line: string) => void;
}

export interface LinkStatus {
  url: string;
  connected: boolean;
  /** Unix ms of the last connect or disconnect. */
  since: number | null;
  lastError: string | null;
  connects: number;
  disconnects: number;
  /** The form of add, prefill and free on this link (absent: json). */
  wire?: 'json' | 'binary';
}

type Handler = (data: Uint8Array, subject: string) => void;

/**
 * What replica sync needs of a transport: NATS core between machines, or the primary process
 * relaying between `serve --workers` processes on one machine. Publish drops (false) while down.
 */
export interface SyncLink {
  readonly connected: boolean;
  /** Every reader on this link takes the binary form of add, prefill and free (absent: JSON for all). */
  readonly binaryWire?: boolean;
  publish(subject: string, data: Uint8Array): boolean;
  subscribe(subject: string, handler: Handler): void;
  status(): LinkStatus;
}

export class NatsLink implements SyncLink {
  private nc: NatsConnection | null = null;
  private closed = false;
  private isUp = false;
  private readonly subs: Array<{ subject: string; handler: Handler; sub: Subscription | null }> = [];
  private readonly listeners: Array<(connected: boolean) => void> = [];
  private readonly st: LinkStatus;
  private firstResolve!: (nc: NatsConnection) => void;
  /** Resolves at the first successful connection (never rejects; pending forever if closed first). */
  readonly firstConnect: Promise<NatsConnection>;
  private readonly loop: Promise<void>;
  private statusIter: { stop(): void } | null = null;

  constructor(private readonly opts: LinkOptions) {
    this.st = { url: opts.url, connected: false, since: null, lastError: null, connects: 0, disconnects: 0 };
    this.firstConnect = new Promise((r) => (this.firstResolve = r));
    this.loop = this.run();
  }

  get connection(): NatsConnection | null {
    return this.isUp ? this.nc : null;
  }

  get connected(): boolean {
    return this.isUp;
  }

  status(): LinkStatus {
    return { ...this.st };
  }

  /** Called with true on every (re)connection and false on every loss. */
  onState(cb: (connected: boolean) => void): void {
    this.listeners.push(cb);
  }

  /** Fire-and-forget publish; false (dropped) while disconnected. */
  publish(subject: string, data: Uint8Array): boolean {
    if (!this.isUp || !this.nc) return false;
    try {
      this.nc.publish(subject, data);
      return true;
    } catch (err) {
      this.st.lastError = `publish: ${(err as Error).message}`;
      return false;
    }
  }

  /** Subscribe now or at the first connection; nats.js re-subscribes after reconnects. */
  subscribe(subject: string, handler: Handler): void {
    const s = { subject, handler, sub: null as Subscription | null };
    this.subs.push(s);
    if (this.nc) this.attach(s, this.nc);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const nc = this.nc;
    if (nc && !nc.isClosed()) await nc.close().catch(() => undefined);
    this.statusIter?.stop(); // the status iterator does not end by itself when the connection closes
    await this.loop;
  }

  private attach(s: { subject: string; handler: Handler; sub: Subscription | null }, nc: NatsConnection): void {
    s.sub = nc.subscribe(s.subject, {
      callback: (err, msg) => {
        if (err) this.st.lastError = `subscription ${s.subject}: ${err.message}`;
        else s.handler(msg.data, msg.subject);
      },
    });
  }

  private setUp(up: boolean, err?: string): void {
    if (err) this.st.lastError = err;
    if (up === this.isUp) return;
    this.isUp = up;
    this.st.connected = up;
    this.st.since = Date.now();
    if (up) this.st.connects++;
    else this.st.disconnects++;
    this.opts.log?.(
      `cluster: NATS ${this.opts.url} ${up ? 'connected' : `disconnected${this.st.lastError ? ` (${this.st.lastError})` : ''}`}`,
    );
    for (const l of this.listeners) l(up);
  }

  private async run(): Promise<void> {
    const wait = this.opts.reconnectWaitMs ?? 500;
    // Our own loop until the first connection, so close() can stop it (nats.js cannot abort a
    // pending first connect); nats.js reconnects by itself afterwards.
    while (!this.closed && !this.nc) {
      try {
        const nc = await connect({
          servers: this.opts.url.split(','),
          name: this.opts.name,
          maxReconnectAttempts: -1,
          reconnectTimeWait: wait,
          reconnectJitter: 50,
          pingInterval: 2000,
          maxPingOut: 2,
        });
        if (this.closed) {
          await nc.close();
          return;
        }
        this.nc = nc;
      } catch (err) {
        this.st.lastError = `connect ${this.opts.url}: ${(err as Error).message}`;
        await new Promise((r) => setTimeout(r, wait));
      }
    }
    const nc = this.nc;
    if (!nc) return;
    for (const s of this.subs) this.attach(s, nc);
    this.setUp(true);
    this.firstResolve(nc);
    const it = nc.status() as AsyncIterable<Status> & { stop(): void };
    this.statusIter = it;
    if (this.closed) it.stop();
    for await (const s of it) {
      if (s.type === 'disconnect') this.setUp(false, `disconnected from ${String(s.data)}`);
      else if (s.type === 'reconnect') this.setUp(true);
      else if (s.type === 'error') this.st.lastError = String(s.data);
    }
    this.setUp(false);
  }
}
