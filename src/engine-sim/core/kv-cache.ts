// Paged GPU KV cache with prefix caching, plus the optional host tier.
// Invariants:
//   - `used` physical blocks = active (refs > 0, committed or partial) + free-but-cached (in `free`);
//     capacity - used blocks are blank.
//   - every committed GPU block is cached under its engine hash, exactly once (no duplicates): in
//     `cached` under its key (blockKey), or in `clashes` under its hash when a block of another
//     hash held that key at its commit (it stays there when that block leaves: a lookup reads
//     `clashes` whenever the key's entry is missing or of another hash);
//   - a cached block with refs 0 sits in `free`, ordered for eviction (head first);
//   - every change of the cached set on either tier emits exactly one event, in order, and a block
//     moving to the host tier is stored there before it is removed from GPU;
//   - a physical block owns one slot of `blockSize` tokens in the token pages for its life; a
//     committed block's content reads its tokens from its slot, and leaves with a copy (evict, reset) before the
//     slot can be reused. A cached block thus allocates no buffer (a fleet of a thousand engines
//     caches millions of blocks; every ArrayBuffer counts toward V8's external memory, whose
//     growth starts major GCs).
import { type BlockContent, blockKey, ChainContent, GpuBlock, keepTokens } from './block.js';
import { BlockLru } from './block-lru.js';
import { HostTier } from './host-tier.js';
import type { CoreKvEvent } from './kv-events.js';

/** Token slots per page (a page is allocated when the pool first reaches it). */
export const PAGE_SLOTS = 256;

const NO_EVENTS: readonly CoreKvEvent[] = [];

export class KvCache {
  /** Committed blocks by key (blockKey: a small integer, where a bigint key costs a runtime call per lookup). */
  private readonly cached = new Map<number, GpuBlock>();
  /** Committed blocks whose key a block of another hash holds in `cached` (rare), by hash. */
  private readonly clashes = new Map<bigint, GpuBlock>();
  private readonly free = new BlockLru();
  private used = 0;
  private events: CoreKvEvent[] = [];
  readonly host: HostTier | null;
  /** Token slots of the physical blocks, PAGE_SLOTS per page. */
  private readonly pages: Uint32Array[] = [];
  /** Slots of blocks dropped blank (released uncommitted), reused first. */
  private readonly freeSlots: number[] = [];
  private slots = 0;

  constructor(
    readonly capacity: number,
    hostCapacity: number,
    readonly blockSize: number,
    /** A zeroed token page of `length` tokens (a fleet cuts its engines' from one PageReserve). */
    private readonly newPage: (length: number) => Uint32Array = (n) => new Uint32Array(n),
  ) {
    this.host = hostCapacity > 0 ? new HostTier(hostCapacity) : null;
  }

  /** Blocks obtainable right now (blank + evictable). */
  get available(): number {
    return this.capacity - this.used + this.free.size;
  }

  /** Blocks held by requests (vLLM's KV usage numerator). */
  get activeBlocks(): number {
    return this.used - this.free.size;
  }

  get cachedBlocks(): number {
    return this.cached.size + this.clashes.size;
  }

  /** The committed GPU block of `content`'s hash, if any. */
  private find(content: { readonly hash: bigint }): GpuBlock | undefined {
    const block = this.cached.get(blockKey(content));
    if (block !== undefined && (block.content as BlockContent).hash === content.hash) return block;
    return this.clashes.size === 0 ? undefined : this.clashes.get(content.hash);
  }

  /**
   * The last lookup's hits, read before the next lookup (a fleet's admissions hit hundreds of
   * blocks each: no object per hit). Hit i is the GPU block `hitBlocks[i]`, or (null there) the
   * host-tier content `hitContents[i]`.
   */
  readonly hitBlocks: (GpuBlock | null)[] = [];
  readonly hitContents: (BlockContent | null)[] = [];

  /** Longest prefix of `chain` (blocks by engine hash) present on GPU or host, at most `maxBlocks` long: its length (the hits: hitBlocks, hitContents). */
  lookup(chain: readonly { readonly hash: bigint }[], maxBlocks: number): number {
    const blocks = this.hitBlocks;
    const contents = this.hitContents;
    const n = Math.min(chain.length, maxBlocks);
    let hits = 0;
    for (; hits < n; hits++) {
      const hash = chain[hits].hash;
      const block = this.find(chain[hits]);
      if (block) {
        blocks[hits] = block;
        contents[hits] = null;
        continue;
      }
      const content = this.host?.get(hash);
      if (!content) break;
      blocks[hits] = null;
      contents[hits] = content;
    }
    // (No reference kept past the hits.)
    blocks.length = hits;
    contents.length = hits;
    return hits;
  }

  /** Take a reference on a cached block (a prefix hit). */
  acquire(block: GpuBlock): void {
    if (block.refs === 0) this.free.delete(block);
    block.refs++;
  }

  /** A blank block with refs 1, evicting the LRU cached block if needed; null when full. */
  allocate(): GpuBlock | null {
    if (this.used < this.capacity) {
      this.used++;
      return new GpuBlock(null, this.freeSlots.pop() ?? this.slots++);
    }
    const victim = this.free.shift();
    if (!victim) return null;
    this.evict(victim);
    victim.refs = 1;
    return victim;
  }

  /**
   * Drop references. Callers pass a sequence's blocks in order; they are released tail-first so
   * deeper blocks become older in the LRU and are evicted before the shared prefix.
   */
  release(blocks: readonly GpuBlock[]): void {
    for (let i = blocks.length - 1; i >= 0; i--) {
      const b = blocks[i];
      if (--b.refs > 0) continue;
      if (b.content) this.free.push(b);
      else {
        this.used--;
        this.freeSlots.push(b.slot);
      }
    }
  }

  /**
   * Make a filled block cached. Returns the block the sequence should hold: `block` itself, or an
   * already-cached block with the same hash (the fresh copy is then freed, no event).
   */
  commit(block: GpuBlock, content: BlockContent): GpuBlock {
    if (block.content) return block;
    const key = blockKey(content);
    const holder = this.cached.get(key);
    const existing =
      holder !== undefined && (holder.content as BlockContent).hash === content.hash
        ? holder
        : this.clashes.size === 0
          ? undefined
          : this.clashes.get(content.hash);
    if (existing && existing !== block) {
      this.acquire(existing);
      this.release([block]);
      return existing;
    }
    // A content the engine computed moves to the block's slot (others own their tokens).
    if (content instanceof ChainContent) this.moveToSlot(content, block.slot);
    block.content = content;
    if (holder === undefined) this.cached.set(key, block);
    else this.clashes.set(content.hash, block);
    this.emitStored('GPU', content);
    return block;
  }

  /** Load a host-tier block back into a fresh GPU block (refs 1); null when GPU is full. */
  loadFromHost(content: BlockContent): GpuBlock | null {
    const block = this.allocate();
    if (!block) return null;
    this.host?.touch(content);
    return this.commit(block, content);
  }

  /** Forget every cached block on both tiers; blocks in use stay allocated but anonymous. */
  reset(): void {
    for (const b of this.gpuBlocks()) {
      keepTokens(b.content as BlockContent);
      b.content = null;
    }
    this.used -= this.free.size;
    for (let b = this.free.shift(); b; b = this.free.shift()) this.freeSlots.push(b.slot);
    this.cached.clear();
    this.clashes.clear();
    this.host?.clear();
    this.events.push({ type: 'cleared' });
  }

  /** The events since the last drain (an empty array is shared: do not push into it). */
  drainEvents(): readonly CoreKvEvent[] {
    const out = this.events;
    if (out.length === 0) return NO_EVENTS;
    this.events = [];
    return out;
  }

  gpuContents(): BlockContent[] {
    return [...this.gpuBlocks()].map((b) => b.content as BlockContent);
  }

  /** The committed GPU blocks (in commit order but for the rare clashing keys', which come last). */
  *gpuBlocks(): IterableIterator<GpuBlock> {
    yield* this.cached.values();
    yield* this.clashes.values();
  }

  hostContents(): BlockContent[] {
    return this.host ? [...this.host.values()] : [];
  }

  /** Copy a content's tokens to a block's slot, where it reads them from now on (the page allocated on first use). */
  private moveToSlot(content: ChainContent, slot: number): void {
    const page = Math.floor(slot / PAGE_SLOTS);
    while (this.pages.length <= page) this.pages.push(this.newPage(PAGE_SLOTS * this.blockSize));
    content.moveTo(this.pages[page], (slot % PAGE_SLOTS) * this.blockSize);
  }

  private evict(victim: GpuBlock): void {
    const content = victim.content as BlockContent;
    keepTokens(content);
    const key = blockKey(content);
    if (this.cached.get(key) === victim) this.cached.delete(key);
    else this.clashes.delete(content.hash);
    victim.content = null;
    if (this.host) {
      if (this.host.has(content.hash)) this.host.touch(content);
      else {
        for (const gone of this.host.store(content))
          this.events.push({ type: 'removed', medium: 'CPU', blocks: [gone] });
        this.emitStored('CPU', content);
      }
    }
    this.events.push({ type: 'removed', medium: 'GPU', blocks: [content] });
  }

  /** Append to the previous stored event when it continues the same chain on the same tier. */
  private emitStored(medium: 'GPU' | 'CPU', content: BlockContent): void {
    const last = this.events[this.events.length - 1];
    if (last && last.type === 'stored' && last.medium === medium) {
      const tail = last.blocks[last.blocks.length - 1];
      if (content.parent === tail.hash && content.loraName === tail.loraName && content.cacheSalt === tail.cacheSalt) {
        last.blocks.push(content);
        return;
      }
    }
    this.events.push({ type: 'stored', medium, blocks: [content] });
  }
}
