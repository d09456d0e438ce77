// The one msgpack decoder every adapter uses: 64-bit ints come back as bigint (hashes exceed 2^53),
// and size limits keep a hostile header from allocating gigabytes before the bytes run out.
import { Decoder } from '@msgpack/msgpack';

const decoder = new Decoder({
  useBigInt64: true,
  maxStrLength: 1 << 20,
  maxBinLength: 1 << 20,
  maxArrayLength: 1 << 22,
  maxMapLength: 1 << 12,
  maxExtLength: 1 << 16,
});

/** Decode one msgpack document; throws on malformed or trailing bytes (callers catch). */
export function unpack(payload: Uint8Array): unknown {
  return decoder.decode(payload);
}
