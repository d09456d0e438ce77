// The channel between the simulation's thread and a router worker (router-threads.ts,
// router-worker.ts): one SharedArrayBuffer per worker holding a single-producer single-consumer
// ring of calls, in the order the simulation makes them, and a control block. A call is a record of
// 8-byte-aligned fields (op, length, then float64 arguments and any tokens or bytes); the main
// thread writes it and publishes the ring's tail, the worker reads and runs it and publishes the
// head. A call the simulation needs answered (decide, close) waits for the answer's sequence
// number in the control block; everything else is fire and forget.

/** Call kinds. */
export const Op = {
  wrap: 1,
  arrive: 2,
  decide: 3,
  book: 4,
  firstToken: 5,
  finished: 6,
  abandoned: 7,
  dropped: 8,
  kv: 9,
  scrape: 10,
  expire: 11,
  close: 12,
} as const;

/** Int32 slots of the control block. */
export const Ctl = {
  /** Ring bytes read by the worker (its next record's offset). */
  head: 0,
  /** Ring bytes written by the main thread (the next record's offset). */
  tail: 1,
  /** Answers given (decide, close): the main thread waits for the count it expects. */
  answers: 2,
  /** 1: the worker failed (its message waits on the port); 0 otherwise. */
  status: 3,
  /** Records the worker has run (progress, for the stall bound). */
  beat: 4,
} as const;
export const CTL_SLOTS = 8;
/** Float64 slots of a decision's answer (after the Int32 control slots). */
export const ANSWER_SLOTS = 8;
export const STATUS_FAILED = 1;

/** Bytes of the shared buffer ahead of the ring: control slots and the answer. */
export const RING_OFFSET = CTL_SLOTS * 4 + ANSWER_SLOTS * 8;

/** Record header: op and length (int32 each); fields follow as float64. */
export const HEADER = 8;

/** A record's length, header and fields and the rest, rounded up to 8 bytes. */
export const recordBytes = (fields: number, extra: number): number => (HEADER + fields * 8 + extra + 7) & ~7;

/** Views over one worker's shared buffer. */
export class RingViews {
  readonly ctl: Int32Array;
  readonly answer: Float64Array;
  readonly u8: Uint8Array;
  readonly i32: Int32Array;
  readonly u32: Uint32Array;
  readonly u16: Uint16Array;
  readonly f64: Float64Array;
  /** Ring bytes (a multiple of 8). */
  readonly size: number;

  constructor(readonly sab: SharedArrayBuffer) {
    this.ctl = new Int32Array(sab, 0, CTL_SLOTS);
    this.answer = new Float64Array(sab, CTL_SLOTS * 4, ANSWER_SLOTS);
    this.size = sab.byteLength - RING_OFFSET;
    this.u8 = new Uint8Array(sab, RING_OFFSET, this.size);
    this.i32 = new Int32Array(sab, RING_OFFSET, this.size >> 2);
    this.u32 = new Uint32Array(sab, RING_OFFSET, this.size >> 2);
    this.u16 = new Uint16Array(sab, RING_OFFSET, this.size >> 1);
    this.f64 = new Float64Array(sab, RING_OFFSET, this.size >> 3);
  }
}
