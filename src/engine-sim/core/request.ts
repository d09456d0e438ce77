// One sequence inside the engine: its tokens (prompt + generated), KV progress and block table.
import type { ArenaChunk, ArenaSlice } from '../../common/chunk-arena.js';
import type { BlockContent, GpuBlock } from './block.js';
import { Rng } from './rng.js';

export interface SimRequestSpec {
  id: string;
  prompt: Uint32Array;
  /** Exact number of tokens to generate unless a stop token ends it earlier. */
  maxTokens: number;
  /** Stop tokens are ignored until this many tokens were generated. */
  minTokens?: number;
  stopTokenIds?: readonly number[];
  loraName?: string | null;
  cacheSalt?: string | null;
  /** Per-request sampling seed; default derives from the engine seed and arrival order. */
  seed?: number | null;
  /** The prompt's KV was computed elsewhere and transferred here (disaggregated decode): its full blocks are cached on arrival. */
  imported?: boolean;
}

const NO_TOKENS = new Uint32Array(0);
/** Most requests have no stop tokens: one shared empty set (a fleet makes requests by the hundred thousand). */
const NO_STOP: ReadonlySet<number> = new Set();

export type FinishReason = 'length' | 'stop' | 'abort';

export class SimRequest {
  readonly id: string;
  readonly promptLen: number;
  readonly maxTokens: number;
  readonly minTokens: number;
  readonly stop: ReadonlySet<number>;
  readonly loraName: string | null;
  readonly cacheSalt: string | null;
  readonly rng: Rng;
  /**
   * Prompt followed by generated tokens; `length` is the valid prefix. Cut from the engine's token
   * arena and given back when the request ends (`releaseTokens`): empty after.
   */
  tokens: Uint32Array;
  private tokensChunk: ArenaChunk<Uint32Array> | null;
  length: number;
  /** Tokens whose KV is computed (or reused). */
  computed = 0;
  readonly blocks: GpuBlock[] = [];
  /**
   * blocks.length, kept here by the scheduler (the one place that grows or empties the table): a
   * decode pass within its last block reads no block table (a fleet's passes are memory-bound).
   */
  blockCount = 0;
  /** blocks[0..committed) are cached (hashed) blocks. */
  committed = 0;
  /** Content of full blocks, computed lazily (see chain.ts). */
  readonly chain: BlockContent[] = [];
  /** The engine hasher's digest of the chain's last block: the parent input of the next (null: none yet). */
  chainDigest: Uint8Array | null = null;
  state: 'waiting' | 'running' | 'finished' = 'waiting';
  arrivalMs: number;
  firstTokenMs: number | null = null;
  /** Prompt tokens reused from cache at first admission (GPU + host). */
  cachedTokens: number | null = null;
  preemptions = 0;

  /** `storage`: room for the prompt + maxTokens tokens. */
  constructor(spec: SimRequestSpec, arrivalMs: number, rng: Rng, storage: ArenaSlice<Uint32Array>) {
    this.id = spec.id;
    this.promptLen = spec.prompt.length;
    this.maxTokens = spec.maxTokens;
    this.minTokens = spec.minTokens ?? 0;
    this.stop = spec.stopTokenIds?.length ? new Set(spec.stopTokenIds) : NO_STOP;
    this.loraName = spec.loraName || null;
    this.cacheSalt = spec.cacheSalt || null;
    this.tokens = storage.array;
    this.tokensChunk = storage.chunk;
    this.tokens.set(spec.prompt);
    this.length = spec.prompt.length;
    this.arrivalMs = arrivalMs;
    this.rng = rng;
  }

  get outputLen(): number {
    return this.length - this.promptLen;
  }

  /** Tokens still to compute before the next token can be sampled. */
  get remaining(): number {
    return this.length - this.computed;
  }

  /** True when only the last sampled token lacks KV: the next pass is a decode step. */
  get decoding(): boolean {
    return this.outputLen > 0 && this.remaining === 1;
  }

  append(token: number): void {
    this.tokens[this.length++] = token;
  }

  /** The request ended: its tokens go back to the arena (its chain's views are not read again). */
  releaseTokens(arena: { release(chunk: ArenaChunk<Uint32Array> | null): void }): void {
    if (this.tokens === NO_TOKENS) return;
    arena.release(this.tokensChunk);
    this.tokens = NO_TOKENS;
    this.tokensChunk = null;
  }
}
