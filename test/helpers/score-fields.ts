// What a decision's chosen score says: its fields and the breakdown it computes when read (the
// score tests compare scores key by key over this list).
import type { CandidateScore } from '../../src/scheduler/scheduler.js';

export const SCORE_FIELDS = [
  'instance',
  'dpRank',
  'device',
  'host',
  'disk',
  'shared',
  'newBlocks',
  'creditedBlocks',
  'prefillBlocks',
  'decodeBlocks',
  'queueMs',
  'prefillMs',
  'ttftMs',
  'interferenceMs',
  'headDone',
  'tokensPerS',
  'indexedBlocks',
  'hybridPrefix',
  'distrusted',
  'adapterLoadMs',
  'unbookedRequests',
  'engine',
  'cost',
  'load',
  'busy',
] as const satisfies ReadonlyArray<keyof CandidateScore>;
