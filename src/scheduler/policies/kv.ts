// kv: the cache-aware default. Each candidate's cost (the time or blocks model, scheduler/cost.ts)
// credits the prefix the KV-event index and the router's own predictions say it holds; the pick is
// the cheapest, with sibling co-location and bounded load (pickers.ts).
import { byCostWithAffinity } from './pickers.js';
import { definePolicy } from './types.js';

export const kv = definePolicy({
  name: 'kv',
  summary: 'cache-aware cost on the index fed by KV events',
  needs: {
    tokens: true,
    index: true,
    predictions: true,
    sessionKey: false,
    target: false,
    text: false,
    engineMetrics: false,
  },
  fallback: 'least-loaded',
  busyFilter: true,
  adminOnly: false,
  predictionTtlKey: 'speculative_ttl_ms',
  pick: byCostWithAffinity,
});
