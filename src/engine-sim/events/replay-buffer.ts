// Ring buffer of the last N published batches (already encoded), for the replay socket.

export class ReplayBuffer {
  private readonly seqs: bigint[] = [];
  private readonly payloads: Uint8Array[] = [];
  private head = 0;

  constructor(readonly capacity: number) {}

  get size(): number {
    return this.seqs.length;
  }

  push(seq: bigint, payload: Uint8Array): void {
    if (this.capacity <= 0) return;
    if (this.seqs.length < this.capacity) {
      this.seqs.push(seq);
      this.payloads.push(payload);
      return;
    }
    this.seqs[this.head] = seq;
    this.payloads[this.head] = payload;
    this.head = (this.head + 1) % this.capacity;
  }

  /** Buffered batches with seq >= `start`, oldest first (older history is silently gone, as in vLLM). */
  *from(start: bigint): Generator<[bigint, Uint8Array]> {
    const n = this.seqs.length;
    for (let k = 0; k < n; k++) {
      const i = (this.head + k) % n;
      if (this.seqs[i] >= start) yield [this.seqs[i], this.payloads[i]];
    }
  }
}
