// random: uniform over the eligible instances.
import { uniform } from './pickers.js';
import { definePolicy } from './types.js';

export const random = definePolicy({
  name: 'random',
  summary: 'uniform over the eligible instances',
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
  pick: uniform,
});
