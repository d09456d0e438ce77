// One undici Pool per instance (http(s):// or unix:///path.sock), shared by requests and probes.
import { Pool } from 'undici';

export interface UpstreamOptions {
  connectTimeoutMs: number;
  headersTimeoutMs: number;
  bodyTimeoutMs: number;
  connections: number;
}

export interface Upstream {
  readonly id: string;
  readonly url: string;
  readonly pool: Pool;
  /** Path prefix of the base URL ('' for http://host:port). */
  readonly basePath: string;
}

export function createUpstream(id: string, url: string, o: UpstreamOptions): Upstream {
  const common = {
    connections: o.connections,
    headersTimeout: o.headersTimeoutMs,
    bodyTimeout: o.bodyTimeoutMs,
    keepAliveTimeout: 30_000,
    pipelining: 1,
  };
  if (url.startsWith('unix://')) {
    const socketPath = url.slice('unix://'.length);
    return { id, url, basePath: '', pool: new Pool('http://localhost', { ...common, connect: { socketPath, timeout: o.connectTimeoutMs } }) };
  }
  const u = new URL(url);
  return {
    id,
    url,
    basePath: u.pathname.replace(/\/+$/, ''),
    pool: new Pool(u.origin, { ...common, connect: { timeout: o.connectTimeoutMs } }),
  };
}
