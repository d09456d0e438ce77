// Route classes for access control: admin routes (the dashboard among them) need the admin token,
// API routes any valid key, operational routes (/health, /live, /ready, /metrics) are open. Off
// entirely when auth is not configured (loopback demo).
import type { Hono } from 'hono';
import { errorResponse } from './errors.js';
import type { Access, Denial } from '../auth/access.js';

const ADMIN = [
  /^\/(register|unregister|events|dump|workers|register_peer|deregister_peer|peers)$/,
  /^\/debug\//,
  /^\/admin\//,
  /^\/v1\/route\/events$/,
  /^\/v1\/route\/[^/]+\/(free|prefill_complete)$/,
  /^\/dashboard(\/|$)/,
];
const API = [/^\/v1\//, /^\/query(_by_hash)?$/];

export type RouteClass = 'admin' | 'api' | 'open';

export function routeClass(path: string): RouteClass {
  if (ADMIN.some((r) => r.test(path))) return 'admin';
  if (API.some((r) => r.test(path))) return 'api';
  return 'open';
}

/** `access` is read per request, so a reloaded configuration applies at once. */
export function installAccess(
  app: Hono,
  getAccess: Access | (() => Access),
  onDenied: (cls: RouteClass, d: Denial) => void,
): void {
  app.use('*', async (c, next) => {
    const access = typeof getAccess === 'function' ? getAccess() : getAccess;
    if (!access.enabled) return next();
    const path = c.req.path;
    const cls = routeClass(path);
    if (cls === 'open') return next();
    const headers = Object.fromEntries(c.req.raw.headers);
    // The dashboard is opened in a browser (EventSource cannot send headers): ?token= stands in.
    const token = path.startsWith('/dashboard') ? c.req.query('token') : undefined;
    if (token && !headers.authorization) headers.authorization = `Bearer ${token}`;
    let denial: Denial | null = null;
    if (cls === 'admin') denial = access.requireAdmin(headers);
    else {
      const principal = access.authenticate(headers);
      if ('status' in principal) denial = principal;
      else {
        // Every API route spends the tenant's rate and concurrency, as the completion routes do.
        const admitted = await access.admit(principal);
        if ('status' in admitted) denial = admitted;
        else {
          try {
            return await next();
          } finally {
            admitted.release();
          }
        }
      }
    }
    if (!denial) return next();
    onDenied(cls, denial);
    return errorResponse(c, denial, denial.retryAfterSec ? { 'retry-after': String(denial.retryAfterSec) } : {});
  });
}
