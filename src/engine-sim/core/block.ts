// One KV block. Physical GPU blocks and host-tier copies share this record; a block is "cached"
// once it is full and hashed (committed), and only cached blocks ever appear in KV events.

export type Medium = 'GPU' | 'CPU';

/** Content identity of a full block: what events and /debug/cache report. */
export interface BlockContent {
  /** Engine-native u64 id (see engine-hash.ts). */
  readonly hash: bigint;
  /** Engine id of the previous block; null at depth 0. */
  readonly parent: bigint | null;
  /** Zero-based position in the sequence. */
  readonly depth: number;
  /**
   * The block's tokens. While the block is cached on GPU they view its slot in the pool's token
   * pages (KvCache); before that, the request's own tokens; a content leaving the GPU (eviction,
   * reset) or kept elsewhere (a hybrid group) gets a copy first (`keepTokens`).
   */
  tokens: Uint32Array;
  /** Router-standard seq hash of the token prefix ending here (XXH3, --hash-seed). */
  readonly routerHash: bigint;
  readonly loraName: string | null;
  readonly cacheSalt: string | null;
  /** vLLM extra keys of this block (LoRA, salt on block 0), null when none. */
  readonly extraKeys: string[] | null;
}

/**
 * A physical GPU block. `content` is null while it fills (a partial or uncommitted block). Its
 * links are the eviction queue's (`BlockLru`): a free-but-cached block is queued without a map
 * entry or a list node of its own (a fleet of a thousand engines holds millions of blocks).
 */
export class GpuBlock {
  /** Requests holding it; 0 means free-but-cached (in the eviction LRU). */
  refs = 1;
  prev: GpuBlock | null = null;
  next: GpuBlock | null = null;
  /** In the eviction queue. */
  queued = false;

  constructor(
    public content: BlockContent | null,
    /** Its slot in the pool's token pages (-1: none). */
    readonly slot = -1,
  ) {}
}

/** Give a content a copy of its tokens of its own: it is kept where its current view may be reused. */
export function keepTokens(content: BlockContent): void {
  content.tokens = content.tokens.slice();
}
