// direct: the instance the admin names in x-kvrouter-target.
import { namedTarget } from './pickers.js';
import { definePolicy } from './types.js';

export const direct = definePolicy({
  name: 'direct',
  summary: 'the instance the admin names in x-kvrouter-target',
  needs: {
    tokens: false,
    index: false,
    predictions: false,
    sessionKey: false,
    target: true,
    text: false,
    engineMetrics: false,
  },
  fallback: null,
  busyFilter: false,
  adminOnly: true,
  predictionTtlKey: 'speculative_ttl_ms',
  pick: namedTarget,
});
