// least-loaded: fewest in-flight requests, then prefill tokens, then blocks; no cache credit.
import { leastLoad } from './pickers.js';
import { definePolicy } from './types.js';

export const leastLoaded = definePolicy({
  name: 'least-loaded',
  summary: 'fewest in-flight requests, then prefill tokens, then blocks; no cache credit',
  needs: {
    tokens: false,
    index: false,
    predictions: false,
    sessionKey: false,
    target: false,
    text: false,
    engineMetrics: false,
  },
  fallback: null,
  busyFilter: true,
  adminOnly: false,
  predictionTtlKey: 'speculative_ttl_ms',
  pick: leastLoad,
});
