// node:http listener adapter. The router serves its hot OpenAI proxy path straight from node:http
// and hands everything else to hono through getRequestListener (hono alone halves proxy RPS).
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { getRequestListener } from '@hono/node-server';
import type { Hono } from 'hono';
import { listenOn } from '../common/listen.js';

export type NodeHandler = (req: IncomingMessage, res: ServerResponse) => void;

export interface RunningServer {
  server: Server;
  url: string;
  port: number;
  close(): Promise<void>;
}

export function honoListener(app: Hono): NodeHandler {
  return getRequestListener(app.fetch, { overrideGlobalObjects: false });
}

/** Connection limits every server of ours runs with: nobody holds a socket open for free. */
export interface ConnectionLimits {
  /** Complete headers within this (408 and closed otherwise), counted from the connection's start. */
  headersTimeoutMs: number;
  /** The whole request (headers and body) within this; the response is not limited. */
  requestTimeoutMs: number;
  keepAliveTimeoutMs: number;
  maxConnections: number;
}

export const DEFAULT_CONNECTION_LIMITS: ConnectionLimits = {
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 60_000,
  keepAliveTimeoutMs: 65_000,
  maxConnections: 10_000,
};

/**
 * `role` names the server in a ListenError ("router HTTP server") when its port cannot be had, and
 * `hint` says how to move it ("--port"). `onDrop` hears of connections refused over the limit.
 */
export async function startHttpServer(
  handler: NodeHandler,
  opts: {
    host: string;
    port: number;
    role: string;
    hint?: string;
    limits?: Partial<ConnectionLimits>;
    onDrop?: () => void;
  },
): Promise<RunningServer> {
  const l = { ...DEFAULT_CONNECTION_LIMITS, ...opts.limits };
  const server = createServer(
    {
      keepAliveTimeout: l.keepAliveTimeoutMs,
      // Node checks both on a timer; keep its period well below the smallest timeout.
      headersTimeout: Math.min(l.headersTimeoutMs, l.requestTimeoutMs),
      requestTimeout: l.requestTimeoutMs,
      connectionsCheckingInterval: Math.max(50, Math.min(1000, Math.floor(l.headersTimeoutMs / 4))),
    },
    handler,
  );
  server.maxConnections = l.maxConnections;
  if (opts.onDrop) server.on('drop', opts.onDrop);
  await listenOn(server, opts.port, opts.host, opts.role, opts.hint);
  const port = (server.address() as AddressInfo).port;
  const host = opts.host.includes(':') ? `[${opts.host}]` : opts.host;
  return {
    server,
    port,
    url: `http://${host === '0.0.0.0' ? '127.0.0.1' : host}:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeIdleConnections();
      }),
  };
}
