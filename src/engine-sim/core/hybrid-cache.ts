// The second KV-cache group of a hybrid model (--hybrid swa:W | mamba), beside the full-attention
// cache (kv-cache.ts, group 0), modelled on vLLM's hybrid KV-cache manager
// (vllm/v1/core/single_type_kv_cache_manager.py, vllm/v1/core/kv_cache_coordinator.py):
//   - sliding window of W tokens (SlidingWindowManager): every full block is cached in the group
//     too; a running request keeps only the blocks its next token can attend to and frees the rest
//     as the window moves (remove_skipped_blocks), so they become evictable long before the
//     full-attention blocks of the same prefix. A hit ending at c needs the last
//     ceil((W - 1) / block_size) blocks before c (or a shorter run from block 0).
//   - Mamba state (MambaManager, align mode): the recurrent state is cached only at block ends the
//     request computed up to: one checkpoint per pass (the end of its prefill chunk, or the block a
//     decode step filled). A hit must end at a cached checkpoint.
// The engine's hit is the largest c <= the full-attention hit every group accepts.
// Simplifications: the group has a pool of its own (`blocks`), and its block size is the engine's.
// The rule is implemented here independently of the router's (src/indexer/groups.ts): the
// simulated engine is the oracle the router's predictions are checked against.
// Invariants: every change of the group's cached set emits exactly one CoreKvEvent tagged with the
// group; a block held by a running request (refs > 0) is never evicted.
import { type BlockContent, keepTokens } from './block.js';
import type { CoreGroupTag, CoreKvEvent } from './kv-events.js';

export type HybridSpec = { kind: 'sliding_window'; window: number } | { kind: 'mamba' };

/** `swa:W` or `mamba` (the --hybrid flag); null for anything else. */
export function parseHybrid(s: string): HybridSpec | null {
  if (s === 'mamba') return { kind: 'mamba' };
  const m = /^swa:(\d+)$/.exec(s);
  if (m && Number(m[1]) >= 1) return { kind: 'sliding_window', window: Number(m[1]) };
  return null;
}

interface GroupBlock {
  readonly content: BlockContent;
  refs: number;
}

/** Per-request group state: the blocks it holds, by depth (null: released or never held). */
interface Held {
  blocks: Array<GroupBlock | null>;
}

export class HybridCache {
  readonly tag: CoreGroupTag;
  /** Blocks before a hit's end a sliding window needs (0 for Mamba). */
  readonly need: number;
  private readonly cached = new Map<bigint, GroupBlock>();
  /** refs 0 cached blocks, oldest first (Map insertion order). */
  private readonly free = new Map<bigint, GroupBlock>();
  private readonly held = new Map<string, Held>();
  private events: CoreKvEvent[] = [];

  constructor(
    readonly spec: HybridSpec,
    readonly capacity: number,
    private readonly blockSize: number,
  ) {
    const window = spec.kind === 'sliding_window' ? spec.window : 0;
    this.tag = { idx: 1, kind: spec.kind, window, blockSize };
    this.need = spec.kind === 'sliding_window' ? Math.ceil((window - 1) / blockSize) : 0;
  }

  get cachedBlocks(): number {
    return this.cached.size;
  }

  /** The largest end c <= `hit` (blocks of `chain`) the group accepts. */
  clampHit(chain: readonly BlockContent[], hit: number): number {
    const has = (i: number) => this.cached.has(chain[i].hash);
    if (this.spec.kind === 'mamba') {
      for (let c = hit; c > 0; c--) if (has(c - 1)) return c;
      return 0;
    }
    if (this.need === 0) return hit;
    let run = 0;
    for (let i = hit - 1; i >= 0; i--) {
      if (!has(i)) {
        run = 0;
        continue;
      }
      if (++run >= this.need) return i + this.need;
    }
    return run;
  }

  /** A request reuses the group's blocks of a hit ending at c: the window before c, or the state at c. */
  admit(reqId: string, chain: readonly BlockContent[], c: number): void {
    const h = this.state(reqId);
    if (c === 0) return;
    const from = this.spec.kind === 'mamba' ? c - 1 : Math.max(0, c - this.need);
    for (let i = from; i < c; i++) {
      const b = this.cached.get(chain[i].hash);
      if (!b) continue;
      if (this.spec.kind === 'mamba') this.touch(b);
      else {
        this.acquire(b);
        h.blocks[i] = b;
      }
    }
  }

  /**
   * Blocks [from, to) of the request became full (computed to `computed` tokens): cache them in
   * the group (a sliding window: each; Mamba: the state at `to`, once per pass), then free what the
   * window has left behind.
   */
  commit(reqId: string, chain: readonly BlockContent[], from: number, to: number, computed: number): void {
    if (to <= from) return;
    const h = this.state(reqId);
    if (this.spec.kind === 'mamba') {
      const b = this.store(chain[to - 1]);
      if (b) this.release(b); // a checkpoint is reusable, not held (the running state is not modelled)
      return;
    }
    for (let i = from; i < to; i++) {
      if (h.blocks[i]) continue;
      const b = this.store(chain[i]);
      if (b) h.blocks[i] = b;
    }
    // vLLM's remove_skipped_blocks: tokens before computed - W + 1 are out of every next window.
    const firstUseful = Math.floor(Math.max(0, computed - this.spec.window + 1) / this.blockSize);
    for (let i = 0; i < firstUseful && i < h.blocks.length; i++) {
      const b = h.blocks[i];
      if (!b) continue;
      h.blocks[i] = null;
      this.release(b);
    }
  }

  /** The request finished or was preempted: its blocks are freed, deepest first (vLLM's order). */
  releaseRequest(reqId: string): void {
    const h = this.held.get(reqId);
    if (!h) return;
    this.held.delete(reqId);
    for (let i = h.blocks.length - 1; i >= 0; i--) {
      const b = h.blocks[i];
      if (b) this.release(b);
    }
  }

  reset(): void {
    this.cached.clear();
    this.free.clear();
    for (const h of this.held.values()) h.blocks.length = 0;
  }

  drainEvents(): CoreKvEvent[] {
    const out = this.events;
    this.events = [];
    return out;
  }

  private state(reqId: string): Held {
    let h = this.held.get(reqId);
    if (!h) {
      h = { blocks: [] };
      this.held.set(reqId, h);
    }
    return h;
  }

  /** Cache a block in the group with refs 1 (evicting the oldest free one when full); null if none is free. */
  private store(content: BlockContent): GroupBlock | null {
    const old = this.cached.get(content.hash);
    if (old) {
      this.acquire(old);
      return old;
    }
    if (this.cached.size >= this.capacity) {
      const victim = this.free.values().next().value as GroupBlock | undefined;
      if (!victim) return null;
      this.free.delete(victim.content.hash);
      this.cached.delete(victim.content.hash);
      this.events.push({ type: 'removed', medium: 'GPU', blocks: [victim.content], group: this.tag });
    }
    // The content may view its request's tokens, reused once the request ends.
    keepTokens(content);
    const b: GroupBlock = { content, refs: 1 };
    this.cached.set(content.hash, b);
    this.emitStored(content);
    return b;
  }

  private acquire(b: GroupBlock): void {
    if (b.refs === 0) this.free.delete(b.content.hash);
    b.refs++;
  }

  private release(b: GroupBlock): void {
    if (--b.refs > 0) return;
    // Still cached? (a reset may have dropped it while held)
    if (this.cached.get(b.content.hash) === b) this.free.set(b.content.hash, b);
  }

  private touch(b: GroupBlock): void {
    if (b.refs > 0) return;
    this.free.delete(b.content.hash);
    this.free.set(b.content.hash, b);
  }

  /** Append to the previous stored event when it continues the same chain (as kv-cache.ts does). */
  private emitStored(content: BlockContent): void {
    const last = this.events[this.events.length - 1];
    if (last && last.type === 'stored') {
      const tail = last.blocks[last.blocks.length - 1];
      if (content.parent === tail.hash && content.loraName === tail.loraName && content.cacheSalt === tail.cacheSalt) {
        last.blocks.push(content);
        return;
      }
    }
    this.events.push({ type: 'stored', medium: 'GPU', blocks: [content], group: this.tag });
  }
}
