// The engine's internal KV event model; wire encoders (events/) render it per --event-format.
import type { BlockContent, Medium } from './block.js';

/** A non-full-attention KV-cache group (hybrid-cache.ts), as vLLM's events name it. */
export interface CoreGroupTag {
  idx: number;
  kind: 'sliding_window' | 'mamba';
  /** Sliding window in tokens (0 for mamba). */
  window: number;
  blockSize: number;
}

export type CoreKvEvent =
  /** Consecutive blocks of one sequence; blocks[0].parent is the parent hash. `group`: absent = full attention (group 0). */
  | { type: 'stored'; medium: Medium; blocks: BlockContent[]; group?: CoreGroupTag }
  | { type: 'removed'; medium: Medium; blocks: BlockContent[]; group?: CoreGroupTag }
  | { type: 'cleared' };
