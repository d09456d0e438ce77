// The OpenAI completion routes served straight from node:http (hono alone halves proxy RPS);
// everything else goes to the hono app. Their route table feeds the hono app's 405 answers.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { type RouteSpec, sendError } from '../api/errors.js';
import type { NodeHandler } from '../api/http-server.js';
import { COMPLETION_PATH, completionKindOf, OpenAIError } from '../api/openai.js';
import { handleCompletion } from './completions.js';
import type { RouterRuntime } from './runtime.js';

export const HOT_ROUTES: readonly RouteSpec[] = [
  ['POST', COMPLETION_PATH.chat],
  ['POST', COMPLETION_PATH.completion],
];

export function hotPathHandler(rt: RouterRuntime, rest: NodeHandler): NodeHandler {
  return (req: IncomingMessage, res: ServerResponse) => {
    const path = req.url?.split('?')[0] ?? '/';
    const kind = req.method === 'POST' ? completionKindOf(path) : undefined;
    if (kind === undefined) return rest(req, res);
    if (rt.shuttingDown) {
      sendError(res, path, new OpenAIError(503, 'the router is shutting down', 'server_error'), { 'retry-after': '1' });
      req.resume();
      return;
    }
    const principal = rt.deps.access.authenticate(req.headers);
    if ('status' in principal) {
      rt.metrics.denied('api', principal.status);
      sendError(res, path, principal);
      req.resume();
      return;
    }
    rt.inflight.add(res);
    res.on('close', () => rt.inflight.delete(res));
    void handleCompletion(kind, req, res, rt.deps, principal);
  };
}
