// POST /register_peer, POST /deregister_peer, GET /peers (Dynamo standalone indexer peer API).
import type { Context, Hono } from 'hono';
import { readJson } from './body.js';
import { badField } from './errors.js';
import { asObject, str } from './fields.js';
import type { PeerList } from '../cluster/peers.js';
import { SharedRoutes } from './shared-routes.js';

export interface PeerRouteDeps {
  peers: PeerList;
  maxBodyBytes?: number;
  /** Where the routes declare their sharing among `--workers` processes (the router's). */
  shared?: SharedRoutes;
}

export function mountPeerRoutes(app: Hono, deps: PeerRouteDeps): void {
  const max = deps.maxBodyBytes ?? 64 * 1024;
  const url = async (c: Context): Promise<string> => str(asObject(await readJson(c, max)), 'url', { required: true })!;
  const shared = deps.shared ?? new SharedRoutes();
  app.post(shared.replicated('/register_peer'), async (c) => {
    const raw = await url(c);
    let added: boolean;
    try {
      added = deps.peers.add(raw);
    } catch (err) {
      throw badField('url', (err as Error).message);
    }
    return c.json({ status: added ? 'registered' : 'already_registered', peers: deps.peers.list() });
  });
  app.post(shared.replicated('/deregister_peer'), async (c) => {
    const raw = await url(c);
    let removed: boolean;
    try {
      removed = deps.peers.remove(raw);
    } catch (err) {
      throw badField('url', (err as Error).message);
    }
    return c.json({ status: removed ? 'deregistered' : 'not_registered', peers: deps.peers.list() });
  });
  app.get('/peers', (c) => c.json(deps.peers.list()));
}
