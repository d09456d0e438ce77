// approx: kv's cost on the router's own predictions alone (engines without KV events): what it
// routed is assumed cached there for `approx_ttl_ms`.
import { byCostWithAffinity, byCostWithAffinityOf } from './pickers.js';
import { definePolicy } from './types.js';

export const approx = definePolicy({
  name: 'approx',
  summary: 'cost on router-predicted blocks, for engines without KV events',
  needs: {
    tokens: true,
    index: false,
    predictions: true,
    sessionKey: false,
    target: false,
    text: false,
    engineMetrics: false,
  },
  fallback: 'least-loaded',
  busyFilter: true,
  adminOnly: false,
  predictionTtlKey: 'approx_ttl_ms',
  pick: byCostWithAffinity,
  pickScores: byCostWithAffinityOf,
});
