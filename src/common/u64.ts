// u64 helpers: hashes arrive as JSON integers (number or bigint), decimal strings, 0x hex strings,
// negative i64 (two's complement, as SGLang and Dynamo send) or 8-byte big-endian buffers.
export const U64_MAX = (1n << 64n) - 1n;
const I64_MIN = -(1n << 63n);

/** Convert a wire value to an unsigned 64-bit bigint, or return null when it is not one. */
export function toU64(value: unknown): bigint | null {
  let v: bigint;
  if (typeof value === 'bigint') v = value;
  else if (typeof value === 'number') {
    if (!Number.isSafeInteger(value)) return null;
    v = BigInt(value);
  } else if (typeof value === 'string') {
    const s = value.trim();
    if (/^-?\d{1,20}$/.test(s)) v = BigInt(s);
    else if (/^0x[0-9a-fA-F]{1,16}$/.test(s)) v = BigInt(s);
    else return null;
  } else if (value instanceof Uint8Array) {
    if (value.length === 0 || value.length > 8) return null;
    v = 0n;
    for (const b of value) v = (v << 8n) | BigInt(b);
  } else return null;
  if (v < 0n) {
    if (v < I64_MIN) return null;
    return v & U64_MAX;
  }
  return v > U64_MAX ? null : v;
}

/** Hex rendering used in logs and debug output. */
export function u64Hex(v: bigint): string {
  return '0x' + v.toString(16).padStart(16, '0');
}
