// The SUB side of a listener behind one small interface, with two implementations: the built-in
// ZMTP client (node:net; tcp:// and ipc://, the fast path) and the zeromq binding (libzmq: every
// transport and security mechanism it supports). `auto` takes the built-in one where it can.
import { Subscriber } from 'zeromq';
import { type SubHandlers, ZmtpSubscriber, zmtpSupports } from './zmtp/subscriber.js';

export type ZmqClient = 'auto' | 'builtin' | 'libzmq';
export const ZMQ_CLIENTS: readonly ZmqClient[] = ['auto', 'builtin', 'libzmq'];

export interface SubTransportOptions {
  reconnectMs: number;
  reconnectMaxMs: number;
  heartbeatMs: number;
  /** libzmq only: messages queued before it drops (the built-in client relies on TCP flow control). */
  receiveHwm: number;
  maxMessageBytes: number;
}

export interface SubTransport {
  readonly client: 'builtin' | 'libzmq';
  close(): Promise<void>;
}

export type { SubHandlers };

/** Open a subscriber; throws on an endpoint the chosen client cannot use. */
export function openSubscriber(
  client: ZmqClient,
  endpoint: string,
  topic: string,
  opts: SubTransportOptions,
  h: SubHandlers,
): SubTransport {
  if (client === 'builtin' || (client === 'auto' && zmtpSupports(endpoint))) {
    const sub = new ZmtpSubscriber(endpoint, [topic], h, {
      reconnectMs: opts.reconnectMs,
      reconnectMaxMs: opts.reconnectMaxMs,
      heartbeatMs: opts.heartbeatMs,
      maxMessageBytes: opts.maxMessageBytes,
    });
    sub.start();
    return {
      client: 'builtin',
      close: async () => sub.close(),
    };
  }
  return openLibzmq(endpoint, topic, opts, h);
}

function openLibzmq(endpoint: string, topic: string, opts: SubTransportOptions, h: SubHandlers): SubTransport {
  const sub = new Subscriber({
    linger: 0,
    receiveHighWaterMark: opts.receiveHwm,
    reconnectInterval: opts.reconnectMs,
    reconnectMaxInterval: opts.reconnectMaxMs,
    heartbeatInterval: opts.heartbeatMs,
    heartbeatTimeout: opts.heartbeatMs * 3,
    maxMessageSize: opts.maxMessageBytes,
  });
  try {
    sub.events.on('connect', () => h.connected());
    sub.events.on('disconnect', () => h.disconnected(`disconnected from ${endpoint}`));
    sub.events.on('connect:retry', () => h.retrying('not reachable yet'));
    sub.subscribe(topic);
    sub.connect(endpoint);
  } catch (err) {
    sub.close();
    throw err;
  }
  let closed = false;
  const loop = (async () => {
    while (!closed) {
      let frames: Buffer[];
      try {
        frames = await sub.receive();
      } catch (err) {
        if (!closed) h.failed(`receive: ${(err as Error).message}`);
        return;
      }
      try {
        h.message(frames);
      } catch (err) {
        closed = true;
        sub.close(); // or libzmq would keep queueing for a socket nobody reads
        h.failed(`message handler: ${(err as Error).message}`);
        return;
      }
    }
  })();
  return {
    client: 'libzmq',
    async close() {
      closed = true;
      if (!sub.closed) sub.close();
      await loop;
    },
  };
}
