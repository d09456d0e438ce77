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

/**
 * `role` names the server in a ListenError ("router HTTP server") when its port cannot be had, and
 * `hint` says how to move it ("--port").
 */
export async function startHttpServer(handler: NodeHandler, opts: { host: string; port: number; role: string; hint?: string }): Promise<RunningServer> {
  const server = createServer({ keepAliveTimeout: 65_000, requestTimeout: 0 }, handler);
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
