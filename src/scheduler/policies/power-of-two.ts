// power-of-two: the less loaded of two instances drawn at random.
import { powerOfTwoChoices } from './pickers.js';
import { definePolicy } from './types.js';

export const powerOfTwo = definePolicy({
  name: 'power-of-two',
  summary: 'the less loaded of two instances drawn at random',
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
  pick: powerOfTwoChoices,
});
