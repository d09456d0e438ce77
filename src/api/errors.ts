// Every JSON error the router and the indexer answer is written here, in one of two shapes:
// OpenAI's `{"error": {"message", "type", "param", "code"}}` (its SDKs parse it) for OpenAIError and
// for any error on a /v1/ path, and `{"error": {"code", "message", "field"?}}` (the Conductor
// indexer's) everywhere else. Callers say what went wrong; the shape is chosen only here. A stream
// already under way ends with OpenAI's shape as its last SSE event (endStreamWithError).
import type { ServerResponse } from 'node:http';
import type { Context, Hono } from 'hono';
import { OpenAIError } from './openai.js';

/** 499: the client closed the request (nginx's convention); written nowhere, counted as a client error. */
export type ErrorStatus = 400 | 401 | 403 | 404 | 405 | 409 | 413 | 415 | 422 | 429 | 431 | 499 | 500 | 502 | 503 | 504;

export class ApiError extends Error {
  constructor(
    readonly status: ErrorStatus,
    readonly code: string,
    message: string,
    readonly field?: string,
  ) {
    super(message);
  }

  body(): { error: { code: string; message: string; field?: string } } {
    return { error: { code: this.code, message: this.message, ...(this.field ? { field: this.field } : {}) } };
  }
}

export const badField = (field: string, message: string): ApiError =>
  new ApiError(400, 'invalid_field', `${field}: ${message}`, field);

/** What went wrong, independent of the shape it is written in. */
export interface ErrorSpec {
  status: number;
  code: string;
  message: string;
}

function openAIType(status: number): string {
  if (status === 429) return 'rate_limit_error';
  return status >= 500 ? 'server_error' : 'invalid_request_error';
}

/** The body for an error on `path`. */
export function errorBody(path: string, err: ApiError | OpenAIError | ErrorSpec): object {
  if (err instanceof OpenAIError) return err.body();
  if (err instanceof ApiError && !path.startsWith('/v1/')) return err.body();
  if (path.startsWith('/v1/')) {
    const param = err instanceof ApiError ? (err.field ?? null) : null;
    return { error: { message: err.message, type: openAIType(err.status), param, code: err.code } };
  }
  return { error: { code: err.code, message: err.message } };
}

// After a 413 the rest of the body is still on its way: close rather than read it to reuse the connection.
const closeAfter = (status: number): Record<string, string> => (status === 413 ? { connection: 'close' } : {});

/** node:http: write the error unless a response is already under way. */
export function sendError(
  res: ServerResponse,
  path: string,
  err: ApiError | OpenAIError | ErrorSpec,
  headers: Record<string, string> = {},
): void {
  if (res.headersSent || res.destroyed) return;
  const body = JSON.stringify(errorBody(path, err));
  res.writeHead(err.status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(body),
    ...closeAfter(err.status),
    ...headers,
  });
  res.end(body);
}

/**
 * node:http: end an SSE stream whose status is already sent with the error as its last event
 * (OpenAI's clients read it there), unless the response is over.
 */
export function endStreamWithError(res: ServerResponse, err: OpenAIError): void {
  if (res.writableEnded || res.destroyed) return;
  res.end(`data: ${JSON.stringify(err.body())}\n\n`);
}

/** hono: the error as a Response. */
export function errorResponse(
  c: Context,
  err: ApiError | OpenAIError | ErrorSpec,
  headers: Record<string, string> = {},
): Response {
  return c.json(errorBody(c.req.path, err), err.status as 400, { ...closeAfter(err.status), ...headers });
}

/** A route the hono app does not serve itself (the node:http hot path), for the 405 table. */
export type RouteSpec = readonly [method: string, path: string];

/**
 * 405 with `Allow` for a known path and a wrong method, 404 elsewhere, and every thrown error as a
 * JSON body. Call after mounting every route: the 405 table is derived from the app's routes (plus
 * `extra`), so no route list is kept by hand.
 */
export function installErrorHandling(app: Hono, extra: readonly RouteSpec[] = []): void {
  const byPath = new Map<string, string[]>();
  const routes: RouteSpec[] = [
    ...app.routes.filter((r) => r.method !== 'ALL' && !r.path.includes('*')).map((r) => [r.method, r.path] as const),
    ...extra,
  ];
  for (const [m, p] of routes) {
    const methods = byPath.get(p) ?? [];
    if (!methods.includes(m)) methods.push(m);
    byPath.set(p, methods);
  }
  for (const [p, methods] of byPath) {
    app.all(p, (c) => {
      const allow = methods.includes('GET') ? [...methods, 'HEAD'] : methods;
      return errorResponse(
        c,
        {
          status: 405,
          code: 'method_not_allowed',
          message: `${c.req.method} is not allowed on ${p}; use ${methods.join(' or ')}`,
        },
        { Allow: allow.join(', ') },
      );
    });
  }
  app.notFound((c) =>
    errorResponse(c, { status: 404, code: 'not_found', message: `no route for ${c.req.method} ${c.req.path}` }),
  );
  app.onError((err, c) => {
    if (err instanceof ApiError || err instanceof OpenAIError) return errorResponse(c, err);
    process.stderr.write(
      `kvrouter: internal error on ${c.req.method} ${c.req.path}: ${(err as Error).stack ?? String(err)}\n`,
    );
    return errorResponse(c, { status: 500, code: 'internal_error', message: 'internal error' });
  });
}
