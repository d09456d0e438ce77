// Placeholder: the live dashboard lands here (GET /dashboard, SSE at /dashboard/stream).
import type { Hono } from 'hono';
import type { DashboardSource } from './source.js';

export type { DashboardSource } from './source.js';

export function mountDashboard(app: Hono, source: DashboardSource): void {
  app.get('/dashboard/snapshot', (c) => c.json({ snapshot: source.snapshot(), decisions: source.recentDecisions(50) }));
}
