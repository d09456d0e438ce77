// Lossless JSON for u64 hashes: integers beyond 2^53 become bigint instead of being rounded.
// JSON.parse is ~10x faster, so it is used whenever the text cannot hold an unsafe integer.
import { isInteger, isSafeNumber, parse as losslessParse, stringify as losslessStringify } from 'lossless-json';

export type JsonValue = null | boolean | number | bigint | string | JsonValue[] | { [key: string]: JsonValue };

// 16+ consecutive digits is the only way a JSON number can exceed 2^53 exactly as an integer
// (or carry an exponent, which we also route to the lossless parser).
const MAYBE_UNSAFE = /\d{16,}|\d[eE][+-]?\d/;

/** Parse JSON; integers that do not fit a double exactly come back as bigint. Throws SyntaxError. */
export function parseJson(text: string): JsonValue {
  if (!MAYBE_UNSAFE.test(text)) return JSON.parse(text) as JsonValue;
  return losslessParse(text, null, parseNumber) as JsonValue;
}

// Safe numbers stay numbers; only integers a double cannot hold exactly become bigint.
function parseNumber(s: string): number | bigint {
  if (isInteger(s) && !isSafeNumber(s)) return BigInt(s);
  return Number(s);
}

function hasBigint(value: unknown, depth = 0): boolean {
  if (typeof value === 'bigint') return true;
  if (depth > 64 || value === null || typeof value !== 'object') return false;
  if (Array.isArray(value)) {
    for (const v of value) if (hasBigint(v, depth + 1)) return true;
    return false;
  }
  for (const v of Object.values(value as Record<string, unknown>)) if (hasBigint(v, depth + 1)) return true;
  return false;
}

/** Serialize JSON, writing bigint as exact integers. */
export function stringifyJson(value: unknown, space?: number): string {
  if (!hasBigint(value)) return JSON.stringify(value, null, space);
  return losslessStringify(value as never, undefined, space) ?? 'null';
}
