// The `--workers` sharing table: filled by the mounts that declare it, matched per request path.
import { Hono } from 'hono';
import { describe, expect, it } from 'vitest';
import { mountIndexerRoutes } from '../../src/api/indexer-routes.js';
import { mountPeerRoutes } from '../../src/api/peer-routes.js';
import { SharedRoutes } from '../../src/api/shared-routes.js';
import { PeerList } from '../../src/cluster/peers.js';
import { Registry } from '../../src/events/registry.js';
import { TieredIndexer } from '../../src/indexer/namespaces.js';
import { KvIndexWriter } from '../../src/indexer/writer.js';

describe('SharedRoutes', () => {
  it('matches exact paths and :param segments, nothing else', () => {
    const t = new SharedRoutes();
    expect(t.replicated('/register')).toBe('/register');
    t.bookingCall('/v1/route/:id/free');
    expect(t.sharingOf('/register')).toBe('replicated');
    expect(t.sharingOf('/v1/route/req-1/free')).toBe('booking-call');
    expect(t.sharingOf('/v1/route/a/b/free')).toBeNull();
    expect(t.sharingOf('/v1/route/loads')).toBeNull();
    expect(t.sharingOf('/register/x')).toBeNull();
    expect(t.sharingOf('/query')).toBeNull();
  });

  it('holds what the indexer and peer mounts declare (the read-only routes are not shared)', () => {
    const t = new SharedRoutes();
    const app = new Hono();
    mountIndexerRoutes(app, { writer: new KvIndexWriter(new TieredIndexer()), registry: new Registry(), shared: t });
    mountPeerRoutes(app, { peers: new PeerList([]), shared: t });
    expect(t.list()).toEqual([
      { path: '/register', sharing: 'replicated' },
      { path: '/unregister', sharing: 'replicated' },
      { path: '/events', sharing: 'replicated' },
      { path: '/register_peer', sharing: 'replicated' },
      { path: '/deregister_peer', sharing: 'replicated' },
    ]);
    expect(t.sharingOf('/query')).toBeNull();
    expect(t.sharingOf('/workers')).toBeNull();
  });
});
