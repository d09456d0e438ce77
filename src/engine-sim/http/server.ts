// node:http adapter: routes the OpenAI endpoints, health, metrics and debug endpoints onto an
// EngineBackend. Every failure becomes a JSON error; nothing a client sends can crash the engine.
import type { IncomingMessage, RequestListener, ServerResponse } from 'node:http';
import type { EngineBackend } from './backend.js';
import { readJsonObject } from './body.js';
import { handleChat } from './chat.js';
import { handleCompletions } from './completions.js';
import { serveHandoff } from './disagg.js';
import { HttpError, sendError } from './errors.js';

type Handler = (req: IncomingMessage, res: ServerResponse, url: URL) => Promise<void> | void;

function json(res: ServerResponse, status: number, body: unknown, headers: Record<string, string>): void {
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(JSON.stringify(body));
}

/** `X-data-parallel-rank` pins a request to a rank (as vLLM's external DP load balancing does). */
function rankHeader(req: IncomingMessage, dpSize: number): number | null {
  const raw = req.headers['x-data-parallel-rank'];
  if (raw === undefined) return null;
  const n = Number(Array.isArray(raw) ? raw[0] : raw);
  if (!Number.isInteger(n) || n < 0 || n >= dpSize)
    throw new HttpError(400, `X-data-parallel-rank must be 0..${dpSize - 1}`);
  return n;
}

/** The engine's HTTP request listener. */
export function engineRequestListener(backend: EngineBackend): RequestListener {
  const headers = { 'x-engine-id': backend.engineId };
  const routes: Record<string, Partial<Record<string, Handler>>> = {
    '/health': { GET: (_q, res) => void res.writeHead(200, headers).end() },
    '/ping': { GET: (_q, res) => void res.writeHead(200, headers).end() },
    '/v1/models': {
      GET: (_q, res) => {
        const card = (id: string, parent: string | null) => ({
          id,
          object: 'model',
          created: backend.createdAt,
          owned_by: 'vllm',
          root: parent ? id : backend.model,
          parent,
          max_model_len: backend.maxModelLen,
          permission: [],
        });
        json(
          res,
          200,
          {
            object: 'list',
            data: [card(backend.model, null), ...backend.loraNames.map((l) => card(l, backend.model))],
          },
          headers,
        );
      },
    },
    '/v1/completions': {
      POST: async (req, res) =>
        handleCompletions(backend, await readJsonObject(req), res, headers, rankHeader(req, backend.dpSize)),
    },
    '/v1/chat/completions': {
      POST: async (req, res) =>
        handleChat(backend, await readJsonObject(req), res, headers, rankHeader(req, backend.dpSize)),
    },
    '/metrics': {
      GET: async (_q, res) => {
        const m = await backend.metrics();
        res.writeHead(200, { 'content-type': m.contentType, ...headers });
        res.end(m.body);
      },
    },
    '/reset_prefix_cache': {
      POST: (_q, res) => {
        backend.resetPrefixCache();
        res.writeHead(200, headers).end();
      },
    },
    '/debug/cache': {
      GET: (_q, res, url) => json(res, 200, backend.debugCache(url.searchParams.get('detail') === '1'), headers),
    },
  };

  return (req, res) => {
    // The trace context the engine continues (a real vLLM with --otlp-traces-endpoint does): echoed
    // back so that callers can check it arrived.
    const tp = req.headers.traceparent;
    if (typeof tp === 'string') res.setHeader('x-engine-traceparent', tp);
    const url = new URL(req.url ?? '/', 'http://engine');
    // The simulated KV side channel / bootstrap server: GET /kvsim/kv/<key> (disagg.ts).
    if (url.pathname.startsWith('/kvsim/kv/') && req.method === 'GET') {
      let key: string;
      try {
        key = decodeURIComponent(url.pathname.slice('/kvsim/kv/'.length));
      } catch {
        return sendError(res, new HttpError(400, 'bad handoff key'));
      }
      void serveHandoff(backend, key, Number(url.searchParams.get('timeout_ms') ?? 0) || 0).then(
        (r) => json(res, r.status, r.body, headers),
        () => sendError(res, new HttpError(500, 'handoff failed')),
      );
      return;
    }
    const route = routes[url.pathname];
    const handler = route?.[req.method ?? 'GET'];
    const fail = (err: unknown): void => {
      const e =
        err instanceof HttpError
          ? err
          : new HttpError(500, `internal error: ${(err as Error)?.message ?? String(err)}`);
      sendError(res, e);
    };
    if (!route) return fail(new HttpError(404, `Not Found: ${url.pathname}`));
    if (!handler) return fail(new HttpError(405, `Method ${req.method} not allowed on ${url.pathname}`));
    try {
      const r = handler(req, res, url);
      if (r instanceof Promise) r.catch(fail);
    } catch (err) {
      fail(err);
    }
  };
}
