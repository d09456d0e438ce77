// One undici Pool per instance (http(s):// or unix:///path.sock), shared by requests and probes,
// with the health interceptor composed on it: every exchange updates the instance's health.
import { type Dispatcher, Pool } from 'undici';
import type { InstanceHealth } from './health.js';
import { type HealthEvent, healthInterceptor } from './health-interceptor.js';

export interface UpstreamOptions {
  connectTimeoutMs: number;
  headersTimeoutMs: number;
  bodyTimeoutMs: number;
  connections: number;
}

export interface Upstream {
  readonly id: string;
  readonly url: string;
  readonly pool: Dispatcher;
  /** What the pool was made with (a reload that changes them renews the pool). */
  readonly options: UpstreamOptions;
  /** Path prefix of the base URL ('' for http://host:port). */
  readonly basePath: string;
}

/** Where an upstream's passive health goes: its InstanceHealth, a clock, and who hears of changes. */
export interface UpstreamHealth {
  health: InstanceHealth;
  now: () => number;
  onChange: (event: HealthEvent) => void;
}

export const sameUpstreamOptions = (a: UpstreamOptions, b: UpstreamOptions): boolean =>
  a.connectTimeoutMs === b.connectTimeoutMs &&
  a.headersTimeoutMs === b.headersTimeoutMs &&
  a.bodyTimeoutMs === b.bodyTimeoutMs &&
  a.connections === b.connections;

export function createUpstream(id: string, url: string, o: UpstreamOptions, h: UpstreamHealth): Upstream {
  const watched = (pool: Pool): Dispatcher => pool.compose(healthInterceptor(h.health, h.now, h.onChange));
  const common = {
    connections: o.connections,
    headersTimeout: o.headersTimeoutMs,
    bodyTimeout: o.bodyTimeoutMs,
    keepAliveTimeout: 30_000,
    pipelining: 1,
  };
  if (url.startsWith('unix://')) {
    const socketPath = url.slice('unix://'.length);
    return {
      id,
      url,
      basePath: '',
      options: o,
      pool: watched(new Pool('http://localhost', { connect: { socketPath, timeout: o.connectTimeoutMs }, ...common })),
    };
  }
  const u = new URL(url);
  return {
    id,
    url,
    options: o,
    basePath: u.pathname.replace(/\/+$/, ''),
    pool: watched(new Pool(u.origin, { connect: { timeout: o.connectTimeoutMs }, ...common })),
  };
}
