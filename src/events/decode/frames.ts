// ZMQ multipart framing of KV-event publishers (vLLM, SGLang and peers):
//   live:    [topic, payload] or [topic, seq(8-byte big-endian), payload]
//   replay:  ["", topic, seq, payload] (vLLM >= 0.26) or ["", seq, payload] (older vLLM, SGLang),
//            ending with the same layout carrying seq FF x 8 and an empty payload.

export interface LiveFrame {
  topic: string;
  /** null for 2-frame publishers, which cannot be gap-checked. */
  seq: bigint | null;
  payload: Uint8Array;
}

export type ReplayFrame = { end: true } | { end: false; seq: bigint; payload: Uint8Array };

export type FrameResult<T> = { ok: true; value: T } | { ok: false; error: string };

export const END_SEQ = 0xffff_ffff_ffff_ffffn;

export function readSeq(b: Uint8Array): bigint {
  return new DataView(b.buffer, b.byteOffset, 8).getBigUint64(0, false);
}

export function encodeSeq(seq: bigint): Buffer {
  const b = Buffer.alloc(8);
  b.writeBigUInt64BE(seq);
  return b;
}

function text(b: Uint8Array): string {
  return Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString('utf8');
}

/** Split a live SUB message into topic, seq and payload. */
export function parseLiveFrames(frames: readonly Uint8Array[]): FrameResult<LiveFrame> {
  if (frames.length === 3) {
    const [topic, seq, payload] = frames;
    if (seq.byteLength !== 8) return { ok: false, error: `seq frame is ${seq.byteLength} bytes, expected 8` };
    return { ok: true, value: { topic: text(topic), seq: readSeq(seq), payload } };
  }
  if (frames.length === 2) return { ok: true, value: { topic: text(frames[0]), seq: null, payload: frames[1] } };
  return { ok: false, error: `expected 2 or 3 frames, got ${frames.length}` };
}

/** Parse one DEALER reply from a replay ROUTER, in either layout. */
export function parseReplayFrames(frames: readonly Uint8Array[]): FrameResult<ReplayFrame> {
  if (frames.length !== 3 && frames.length !== 4)
    return { ok: false, error: `replay reply has ${frames.length} frames` };
  if (frames[0].byteLength !== 0) return { ok: false, error: 'replay reply lacks the empty delimiter frame' };
  const seqFrame = frames[frames.length - 2];
  const payload = frames[frames.length - 1];
  if (seqFrame.byteLength !== 8) return { ok: false, error: `replay seq frame is ${seqFrame.byteLength} bytes` };
  const seq = readSeq(seqFrame);
  if (seq === END_SEQ) {
    if (payload.byteLength !== 0) return { ok: false, error: 'end-of-replay marker with a non-empty payload' };
    return { ok: true, value: { end: true } };
  }
  return { ok: true, value: { end: false, seq, payload } };
}
