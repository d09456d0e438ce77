// Short-lived typed arrays cut from recycled chunks. Every ArrayBuffer counts toward V8's external
// memory, and V8 starts a major GC for every 64 MiB of it allocated ("external memory pressure"):
// a 1,024-engine fleet simulation that allocated a buffer per KV-event payload or per request's
// tokens spent most of its GC time on those collections. A chunk is reused once every array cut
// from it was released (and it is no longer the one being filled): the owner must release each
// array exactly once, after its last read. PageReserve (below): long-lived arrays of one length
// cut from one buffer allocated up front, for the same reason.

type TypedArray = Uint8Array | Uint32Array;

export class ArenaChunk<A extends TypedArray> {
  used = 0;
  /** Arrays cut from it and not yet released. */
  live = 0;

  constructor(readonly array: A) {}
}

export interface ArenaSlice<A extends TypedArray> {
  array: A;
  /** The chunk to release it to (null: an array of its own, too large for a chunk). */
  chunk: ArenaChunk<A> | null;
}

export class ChunkArena<A extends TypedArray> {
  private current: ArenaChunk<A> | null = null;
  private readonly free: Array<ArenaChunk<A>> = [];

  constructor(
    private readonly make: (length: number) => A,
    /** Elements per chunk; a larger request gets an array of its own. */
    readonly chunkLength: number,
  ) {}

  /** Room for n elements (contents unspecified: the caller writes before it reads). */
  alloc(n: number): ArenaSlice<A> {
    if (n > this.chunkLength) return { array: this.make(n), chunk: null };
    let c = this.current;
    if (c === null || c.used + n > this.chunkLength) {
      // The filled chunk returns to the free list at its last release.
      if (c !== null && c.live === 0) this.free.push(c);
      c = this.free.pop() ?? new ArenaChunk(this.make(this.chunkLength));
      c.used = 0;
      this.current = c;
    }
    const array = c.array.subarray(c.used, c.used + n) as A;
    c.used += n;
    c.live++;
    return { array, chunk: c };
  }

  /** An array's owner is done with it: its chunk may be reused once none is left. */
  release(chunk: ArenaChunk<A> | null): void {
    if (chunk === null) return;
    if (--chunk.live === 0 && chunk !== this.current) this.free.push(chunk);
  }
}

/**
 * Long-lived arrays of one length, cut in order from one buffer allocated up front: it counts toward
 * V8's external memory once, at the start while the heap is small, not as a 64 MiB step of the
 * owners' growth each (a major GC of a large heap apiece). A large zero-filled buffer is mapped on
 * demand, so pages never handed out cost no memory. Pages are never given back; past the
 * reservation each gets a buffer of its own.
 */
export class PageReserve<A extends TypedArray> {
  private readonly all: A;
  private next = 0;

  constructor(
    private readonly make: (length: number) => A,
    readonly pageLength: number,
    pages: number,
  ) {
    let all: A;
    try {
      all = make(pageLength * pages);
    } catch (e) {
      // A reservation the runtime refuses (too large): every page gets a buffer of its own.
      if (!(e instanceof RangeError)) throw e;
      all = make(0);
    }
    this.all = all;
  }

  /** A zeroed array of `length` elements: a page of the reservation when it is a page's length. */
  take(length: number): A {
    const at = this.next * this.pageLength;
    if (length !== this.pageLength || at + length > this.all.length) return this.make(length);
    this.next++;
    return this.all.subarray(at, at + this.pageLength) as A;
  }
}
