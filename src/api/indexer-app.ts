// The standalone indexer service (`kvrouter indexer`): Conductor API + /health + /metrics.
import { Hono } from 'hono';
import { Registry as PromRegistry, collectDefaultMetrics } from 'prom-client';
import { Access } from '../auth/access.js';
import { installAccess } from '../auth/http.js';
import { registerIndexMetrics } from '../indexer/metrics.js';
import { installErrorHandling } from './errors.js';
import { type IndexerApiDeps, json, mountIndexerRoutes } from './indexer-routes.js';

export interface IndexerAppOptions extends IndexerApiDeps {
  metrics?: PromRegistry;
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
    return json(c, { status: 'ok', registrations: regs.length, listeners: byStatus, index: opts.writer.indexer.stats() });
  });
  app.get('/metrics', async (c) => c.body(await metrics.metrics(), 200, { 'content-type': metrics.contentType }));
  installErrorHandling(app);
  return { app, metrics };
}
