// The engine's internal KV event model; wire encoders (events/) render it per --event-format.
import type { BlockContent, Medium } from './block.js';

export type CoreKvEvent =
  /** Consecutive blocks of one sequence; blocks[0].parent is the parent hash. */
  | { type: 'stored'; medium: Medium; blocks: BlockContent[] }
  | { type: 'removed'; medium: Medium; blocks: BlockContent[] }
  | { type: 'cleared' };
