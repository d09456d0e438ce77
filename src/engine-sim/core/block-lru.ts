// The GPU eviction queue: free-but-cached blocks, head evicted first; push appends at the tail
// (re-pushing moves a block to the tail). Intrusive: the links live in the GpuBlock itself, so a
// queued block costs no map entry and no node (Lru, for the host tier, keys by hash). O(1) each.
import type { GpuBlock } from './block.js';

export class BlockLru {
  private head: GpuBlock | null = null;
  private tail: GpuBlock | null = null;
  private count = 0;

  get size(): number {
    return this.count;
  }

  /** Append at the tail (evicted last). */
  push(b: GpuBlock): void {
    if (b.queued) this.unlink(b);
    else {
      b.queued = true;
      this.count++;
    }
    b.prev = this.tail;
    b.next = null;
    if (this.tail) this.tail.next = b;
    else this.head = b;
    this.tail = b;
  }

  delete(b: GpuBlock): boolean {
    if (!b.queued) return false;
    this.unlink(b);
    b.queued = false;
    this.count--;
    return true;
  }

  /** Remove and return the head (the eviction victim). */
  shift(): GpuBlock | undefined {
    const b = this.head;
    if (!b) return undefined;
    this.delete(b);
    return b;
  }

  /** Blocks from head (next victim) to tail. */
  *values(): IterableIterator<GpuBlock> {
    for (let b = this.head; b; b = b.next) yield b;
  }

  clear(): void {
    for (let b = this.head; b; ) {
      const next = b.next;
      b.prev = b.next = null;
      b.queued = false;
      b = next;
    }
    this.head = this.tail = null;
    this.count = 0;
  }

  private unlink(b: GpuBlock): void {
    if (b.prev) b.prev.next = b.next;
    else this.head = b.next;
    if (b.next) b.next.prev = b.prev;
    else this.tail = b.prev;
    b.prev = b.next = null;
  }
}
