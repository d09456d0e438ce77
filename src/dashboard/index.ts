// The live dashboard, mounted by the router:
//   GET /dashboard           the page (self-contained HTML, no external assets)
//   GET /dashboard/stream    SSE: `snapshot` every second, `decision` as each happens, `decisions` backfill
//   GET /dashboard/snapshot  JSON: the current snapshot and the 50 most recent decisions
import type { Hono } from 'hono';
import { DashboardHub, DEFAULT_HUB_OPTIONS, type HubOptions } from './hub.js';
import { dashboardHtml } from './page.js';
import type { DashboardSource, SnapshotResponse } from './source.js';
import { SSE_HEADERS } from './sse.js';

export type { DashboardSource } from './source.js';
export { DashboardHub, type HubOptions } from './hub.js';
export { type DashboardPart, wholeRouterSource } from './whole-router.js';

export function mountDashboard(app: Hono, source: DashboardSource, opts: Partial<HubOptions> = {}): DashboardHub {
  const hub = new DashboardHub(source, { ...DEFAULT_HUB_OPTIONS, ...opts });
  const html = dashboardHtml();
  for (const path of ['/dashboard', '/dashboard/'])
    app.get(path, (c) => c.html(html, 200, { 'cache-control': 'no-cache' }));
  app.get('/dashboard/snapshot', async (c) => {
    await source.refresh?.().catch(() => undefined);
    return c.json({ snapshot: source.snapshot(), decisions: source.recentDecisions(50) } satisfies SnapshotResponse);
  });
  app.get('/dashboard/stream', (c) => {
    const body = hub.open(c.req.raw.signal);
    if (!body)
      return c.json(
        { error: { code: 503, message: `too many dashboard streams (${hub.size}); poll /dashboard/snapshot instead` } },
        503,
        { 'retry-after': '5' },
      );
    return new Response(body, { status: 200, headers: SSE_HEADERS });
  });
  return hub;
}
