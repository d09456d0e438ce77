// The small world the hand-worked picker tests share: one namespace of 4-token blocks, four
// candidates a-d, and the time cost with tracked decode blocks (tier credits cpu 0.75, disk 0.25,
// shared 0.5; no decode interference, so the worked figures stay prefill and queue alone).
import type { CostWeights } from '../../src/scheduler/cost.js';

export const PICK_NS = { model: 'm', blockSize: 4, loraName: null, salt: null, tenant: 'default' };
export const PICK_CANDIDATES = ['a', 'b', 'c', 'd'].map((instance) => ({ instance, dpRank: 0 }));
export const PICK_TIME_WEIGHTS: CostWeights = {
  model: 'time',
  overlapWeight: 1,
  medium: { cpu: 0.75, disk: 0.25, shared: 0.5 },
  trackActiveBlocks: true,
  decodeInterference: 0,
};
