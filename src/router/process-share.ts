// The `serve --workers` processes of one router act as one: what one process accepted on a
// replicated route the others apply too, and a booking call this process cannot answer (404: another
// process made the booking) is asked of the others. Which route is which is declared where each is
// mounted (api/shared-routes.ts).
import type { Context, Hono } from 'hono';
import { readCapped } from '../api/body.js';
import type { SharedRoutes } from '../api/shared-routes.js';
import type { ProcessRole, ReplayedRequest } from './app.js';

/** What belongs to the client's connection, not to a request passed to another process. */
const CONNECTION_HEADERS = new Set([
  'host',
  'connection',
  'keep-alive',
  'content-length',
  'transfer-encoding',
  'expect',
  'upgrade',
]);

/** A booking call's body is small (a usage report at most). */
const BOOKING_CALL_MAX_BODY = 64 * 1024;

type Body = AsyncIterable<Uint8Array> | null;

function replayedRequest(c: Context, body: Uint8Array): ReplayedRequest {
  const u = new URL(c.req.url);
  const headers: Record<string, string> = {};
  for (const [k, v] of c.req.raw.headers) if (!CONNECTION_HEADERS.has(k)) headers[k] = v;
  return { method: 'POST', path: u.pathname + u.search, headers, body };
}

/** Served here; on a 404 the first 2xx answer of another process replaces it. */
async function askOthersOn404(c: Context, next: () => Promise<void>, role: ProcessRole): Promise<void> {
  const copy = c.req.raw.clone();
  await next();
  if (c.res.status !== 404) return void copy.body?.cancel().catch(() => undefined);
  const body = await readCapped(copy.body as Body, BOOKING_CALL_MAX_BODY).catch(() => null);
  const answer = body === null ? null : await role.ask(replayedRequest(c, body));
  if (answer)
    c.res = new Response(new Uint8Array(answer.body), {
      status: answer.status,
      headers: { 'content-type': 'application/json' },
    });
}

/** Served here; once accepted (2xx), passed on to the others. */
async function replayWhenAccepted(
  c: Context,
  next: () => Promise<void>,
  role: ProcessRole,
  maxBodyBytes: number,
): Promise<void> {
  const copy = c.req.raw.clone();
  await next();
  if (c.res.status >= 300) return void copy.body?.cancel().catch(() => undefined);
  const body = await readCapped(copy.body as Body, maxBodyBytes).catch(() => null);
  if (body !== null) role.replay(replayedRequest(c, body));
}

/**
 * Install before the routes (and after access control: only what this process accepted is passed
 * on, with the caller's credentials). A replay (marked in the env, which no client can set) is not
 * passed on again. `shared` is read per request, so routes mounted after this call count.
 */
export function installProcessSharing(
  app: Hono,
  shared: SharedRoutes,
  role: ProcessRole,
  maxBodyBytes: () => number,
): void {
  app.use('*', async (c, next) => {
    if (c.req.method !== 'POST' || (c.env as { replayed?: boolean } | undefined)?.replayed) return next();
    const sharing = shared.sharingOf(c.req.path);
    if (sharing === 'booking-call') return askOthersOn404(c, next, role);
    if (sharing === 'replicated') return replayWhenAccepted(c, next, role, maxBodyBytes());
    return next();
  });
}
