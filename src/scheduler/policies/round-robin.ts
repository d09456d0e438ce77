// round-robin: rotation over the eligible instances.
import { rotation } from './pickers.js';
import { definePolicy } from './types.js';

export const roundRobin = definePolicy({
  name: 'round-robin',
  summary: 'rotation over the eligible instances',
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
  pick: rotation,
});
