// KV-event payloads in flight (published by an engine, not yet delivered to the routers), cut
// from recycled chunks. A payload is read once, at its delivery, by every replica's decoder (which
// copies what it keeps), and is garbage after. A fresh ArrayBuffer per payload made the run's
// major GCs: V8 starts one for every 64 MiB of ArrayBuffers allocated ("external memory
// pressure"), and a 1,024-engine run publishes ~40 KB of payload per request; recycled chunks
// allocate nothing once the run is warm.

/** Chunk size; a larger payload gets a buffer of its own. */
const CHUNK_BYTES = 1 << 20;

export class PayloadChunk {
  readonly bytes = new Uint8Array(CHUNK_BYTES);
  used = 0;
  /** Payloads cut from it and not yet delivered. */
  live = 0;
}

export class PayloadArena {
  private current: PayloadChunk | null = null;
  private readonly free: PayloadChunk[] = [];

  /** Room for an n-byte payload: its bytes, and the chunk to release at delivery (null: its own buffer). */
  alloc(n: number): { bytes: Uint8Array; chunk: PayloadChunk | null } {
    if (n > CHUNK_BYTES) return { bytes: new Uint8Array(n), chunk: null };
    let c = this.current;
    if (c === null || c.used + n > CHUNK_BYTES) {
      // The filled chunk returns to the free list at its last delivery (release).
      if (c !== null && c.live === 0) this.free.push(c);
      c = this.free.pop() ?? new PayloadChunk();
      c.used = 0;
      this.current = c;
    }
    const bytes = c.bytes.subarray(c.used, c.used + n);
    c.used += n;
    c.live++;
    return { bytes, chunk: c };
  }

  /** A payload was delivered (every replica read it): its chunk may be reused once none is left. */
  release(chunk: PayloadChunk | null): void {
    if (chunk === null) return;
    if (--chunk.live === 0 && chunk !== this.current) this.free.push(chunk);
  }
}
