// session: rendezvous hash of the session header or `user` (the cheapest without one).
import { rendezvousBySession } from './pickers.js';
import { definePolicy } from './types.js';

export const session = definePolicy({
  name: 'session',
  summary: 'rendezvous hash of the session header or `user`; the cheapest without one',
  needs: {
    tokens: false,
    index: false,
    predictions: false,
    sessionKey: true,
    target: false,
    text: false,
    engineMetrics: false,
  },
  fallback: null,
  busyFilter: true,
  adminOnly: false,
  predictionTtlKey: 'speculative_ttl_ms',
  pick: rendezvousBySession,
});
