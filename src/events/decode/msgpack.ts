// The one msgpack decoding path every adapter uses: 64-bit ints come back as bigint (hashes exceed
// 2^53). @msgpack/msgpack allocates `new Array(n)` from a header before reading the elements, so a
// corrupt header claiming 4M elements cost ~25 ms. No container can hold more elements than the
// payload has bytes, so each payload is decoded with limits no larger than its own size
// (one decoder per power-of-two size class, created on first use).
import { Decoder } from '@msgpack/msgpack';

const MAX_ARRAY = 1 << 22;
const MAX_MAP = 1 << 12;
const MAX_BYTES = 1 << 20;
const decoders: Decoder[] = [];

function decoderFor(size: number): Decoder {
  const cls = Math.max(6, 32 - Math.clz32(Math.max(1, size - 1))); // ceil(log2(size)), at least 64
  let d = decoders[cls];
  if (!d) {
    const cap = 2 ** cls;
    d = new Decoder({
      useBigInt64: true,
      maxArrayLength: Math.min(MAX_ARRAY, cap),
      maxMapLength: Math.min(MAX_MAP, cap),
      maxStrLength: Math.min(MAX_BYTES, cap),
      maxBinLength: Math.min(MAX_BYTES, cap),
      maxExtLength: Math.min(1 << 16, cap),
    });
    decoders[cls] = d;
  }
  return d;
}

/** Decode one msgpack document; throws on malformed or trailing bytes (callers catch). */
export function unpack(payload: Uint8Array): unknown {
  // Errors from a corrupt payload are reported by message only; capturing their stack made a
  // rejected frame cost ~15 us, 20x a good one.
  const limit = Error.stackTraceLimit;
  Error.stackTraceLimit = 0;
  try {
    return decoderFor(payload.byteLength).decode(payload);
  } finally {
    Error.stackTraceLimit = limit;
  }
}
