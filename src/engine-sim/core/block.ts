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
  /** The block's tokens (a view: do not keep it beyond the pass). */
  readonly tokens: Uint32Array;
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

/**
 * A block's content as the engine computes it (chain.ts). Its tokens are a range of an array it
 * shares, not a view of their own (one object fewer per cached block; a fleet of a thousand
 * engines caches millions): the request's tokens until the block is committed, then its slot in
 * the GPU pool's token pages (KvCache), and a copy of its own once it leaves the GPU or is kept
 * elsewhere (`keepTokens`), before that range can be reused.
 */
export class ChainContent implements BlockContent {
  constructor(
    readonly hash: bigint,
    readonly parent: bigint | null,
    readonly depth: number,
    private src: Uint32Array,
    private at: number,
    private readonly len: number,
    readonly routerHash: bigint,
    readonly loraName: string | null,
    readonly cacheSalt: string | null,
    readonly extraKeys: string[] | null,
    /** blockKey(this), from the hasher's digest (EngineHasher.key). */
    readonly key: number,
  ) {}

  get tokens(): Uint32Array {
    return this.src.subarray(this.at, this.at + this.len);
  }

  /** The array its tokens are a range of, from `tokenOffset`, `tokenCount` long (read in place: no view per block). */
  get tokenArray(): Uint32Array {
    return this.src;
  }

  get tokenOffset(): number {
    return this.at;
  }

  get tokenCount(): number {
    return this.len;
  }

  /** Copy the tokens to `to[at..]` and read them there from now on. */
  moveTo(to: Uint32Array, at: number): void {
    // Element by element: a block is a few tokens, and a subarray to copy from is an object per block.
    const src = this.src;
    const from = this.at;
    for (let k = 0; k < this.len; k++) to[at + k] = src[from + k];
    this.src = to;
    this.at = at;
  }

  /** Read the tokens from a copy of their own. */
  keep(): void {
    this.src = this.src.slice(this.at, this.at + this.len);
    this.at = 0;
  }
}

/** Give a content a copy of its tokens of its own: it is kept where its current array may be reused (other contents own theirs). */
export function keepTokens(content: BlockContent): void {
  if (content instanceof ChainContent) content.keep();
}

const KEY_MASK = 0x3fffffffn;

/**
 * A small integer standing for a content's engine hash: its low 30 bits (a small integer on every
 * platform). A map keyed by it hashes and compares keys inline; keyed by the bigint, each lookup
 * calls into the runtime to hash and reads every probed key's object to compare (a fleet's engines
 * look up and commit blocks by the tens of millions). Not unique: holders check the hash (KvCache).
 */
export function blockKey(c: { readonly hash: bigint }): number {
  return c instanceof ChainContent ? c.key : Number(c.hash & KEY_MASK);
}
