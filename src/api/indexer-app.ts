// The standalone indexer service (`kvrouter indexer`): Conductor API + /health + /metrics.
import { Hono } from 'hono';
import { Registry as PromRegistry, collectDefaultMetrics } from 'prom-client';
import { Access } from '../auth/access.js';
import { installAccess } from './access.js';
import { mountPeerRoutes } from './peer-routes.js';
import type { PeerList } from '../cluster/peers.js';
import { registerIndexMetrics } from '../indexer/metrics.js';
import { installErrorHandling } from './errors.js';
import { type IndexerApiDeps, json, mountIndexerRoutes } from './indexer-routes.js';

export interface IndexerAppOptions extends IndexerApiDeps {
  metrics?: PromRegistry;
  /** Peer indexers for recovery: GET /peers, POST /register_peer, /deregister_peer (none: no peer routes). */
  peers?: PeerList;
  /** GET /ready answers 200 once this holds (peer recovery done, enough workers); default: always. */
  ready?: () => boolean;
  /** Admin token guarding /register, /unregister, /events, /dump, /workers (none: open). */
  adminToken?: string;
}

export function createIndexerApp(opts: IndexerAppOptions): { app: Hono; metrics: PromRegistry } {
  const app = new Hono();
  const metrics = opts.metrics ?? new PromRegistry();
  if (!opts.metrics) collectDefaultMetrics({ register: metrics });
  const im = registerIndexMetrics(metrics, opts.writer.indexer);
  installAccess(app, new Access({ admin_token: opts.adminToken, tenants: [] }), () => {});
  mountIndexerRoutes(app, { ...opts, onQuery: (route, r) => (im.observeQuery(route, r), opts.onQuery?.(route, r)) });
  app.get('/health', (c) => {
    const regs = opts.registry.all();
    const byStatus: Record<string, number> = {};
    for (const r of regs) byStatus[r.status] = (byStatus[r.status] ?? 0) + 1;
    return json(c, {
      status: 'ok',
      registrations: regs.length,
      listeners: byStatus,
      index: opts.writer.indexer.stats(),
    });
  });
  app.get('/ready', (c) => {
    const ready = opts.ready?.() ?? true;
    return json(c, { ready, registrations: opts.registry.size }, ready ? 200 : 503);
  });
  if (opts.peers) mountPeerRoutes(app, { peers: opts.peers });
  app.get('/metrics', async (c) => c.body(await metrics.metrics(), 200, { 'content-type': metrics.contentType }));
  installErrorHandling(app);
  return { app, metrics };
}
