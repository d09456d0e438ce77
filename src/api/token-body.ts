// The token-id body's fast path: a completion body whose `prompt` is a flat array of token ids is
// read straight from its bytes, the ids into a Uint32Array, every other value through JSON.parse of
// its own bytes. JSON.parse of the whole body made a 6 KB string, a 1,024-element array and then
// its Uint32Array copy for every request (docs/profile.md). The result is what JSON.parse gives
// except that `prompt` is a `TokenIds` (it serializes back to the same array); anything the scanner
// does not take whole (invalid JSON, a `__proto__` key, ids that are not plain u32 integers) returns
// null and the caller parses the body the ordinary way, with its error messages.
// test/unit/token-body.test.ts compares it with JSON.parse on generated and malformed bodies.

/** Token ids parsed from a body: a Uint32Array that JSON.stringify writes as the array it was. */
export class TokenIds extends Uint32Array {
  toJSON(): number[] {
    return Array.from(this);
  }
}

const SPACE = 0x20;
const TAB = 0x09;
const LF = 0x0a;
const CR = 0x0d;
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COMMA = 0x2c;
const COLON = 0x3a;
const ZERO = 0x30;
const NINE = 0x39;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;
const MAX_U32 = 0xffffffff;

const isSpace = (c: number) => c === SPACE || c === LF || c === CR || c === TAB;

function skipSpace(b: Uint8Array, i: number): number {
  while (i < b.length && isSpace(b[i])) i++;
  return i;
}

/** Index after the string starting at `i` (a quote), or -1 when it does not end. */
function stringEnd(b: Uint8Array, i: number): number {
  for (i++; i < b.length; i++) {
    const c = b[i];
    if (c === QUOTE) return i + 1;
    if (c === BACKSLASH) i++;
  }
  return -1;
}

/** Index after the value starting at `i` (not validated: JSON.parse of the slice does that), or -1. */
function valueEnd(b: Uint8Array, i: number): number {
  const c = b[i];
  if (c === QUOTE) return stringEnd(b, i);
  if (c === OPEN_OBJECT || c === OPEN_ARRAY) {
    let depth = 0;
    for (; i < b.length; i++) {
      const d = b[i];
      if (d === QUOTE) {
        i = stringEnd(b, i) - 1;
        if (i < 0) return -1;
      } else if (d === OPEN_OBJECT || d === OPEN_ARRAY) depth++;
      else if (d === CLOSE_OBJECT || d === CLOSE_ARRAY) {
        if (--depth === 0) return i + 1;
      }
    }
    return -1;
  }
  // A number, true, false or null: up to the next delimiter.
  while (i < b.length && !isSpace(b[i]) && b[i] !== COMMA && b[i] !== CLOSE_OBJECT && b[i] !== CLOSE_ARRAY) i++;
  return i;
}

/** A key of printable ASCII without escapes, read without JSON.parse; null for any other. */
function plainKey(b: Buffer, start: number, end: number): string | null {
  for (let i = start + 1; i < end - 1; i++) if (b[i] < SPACE || b[i] > 0x7e || b[i] === BACKSLASH) return null;
  return b.toString('latin1', start + 1, end - 1);
}

/** Ids kept between bodies (256 KB); a longer prompt grows a scratch that is dropped after it. */
const SCRATCH_KEPT = 65_536;
let scratch = new Uint32Array(4096);

/** The ids of a flat array of u32 integers starting at `i` (a bracket) and the index after it, or null. */
function tokenIds(b: Uint8Array, i: number): { ids: TokenIds; end: number } | null {
  let n = 0;
  i = skipSpace(b, i + 1);
  if (b[i] === CLOSE_ARRAY) return null; // [] : the ordinary path names the error
  for (;;) {
    let c = b[i];
    if (!(c >= ZERO && c <= NINE)) return null; // (also past the end: undefined)
    let v = c - ZERO;
    c = b[++i];
    if (v === 0 && c >= ZERO && c <= NINE) return null; // a leading zero is not JSON
    // (b[i] past the end is undefined: every comparison is false)
    while (c >= ZERO && c <= NINE) {
      v = v * 10 + (c - ZERO);
      c = b[++i];
    }
    if (v > MAX_U32) return null; // (exact: 10 digits or fewer stay far below 2^53; more fail here too)
    if (n === scratch.length) {
      const grown = new Uint32Array(n * 2);
      grown.set(scratch);
      scratch = grown;
    }
    scratch[n++] = v;
    if (isSpace(c)) c = b[(i = skipSpace(b, i))];
    if (c === COMMA) {
      c = b[++i];
      if (isSpace(c)) i = skipSpace(b, i);
    } else if (c === CLOSE_ARRAY) break;
    else return null; // a fraction, an exponent, or not an array of numbers
  }
  const ids = new TokenIds(n);
  ids.set(scratch.subarray(0, n));
  return { ids, end: i + 1 };
}

/**
 * The body as JSON.parse would give it, with a flat token-id `prompt` as TokenIds; null when the
 * body is not a JSON object with such a prompt (the caller parses it the ordinary way).
 */
export function parseTokenIdBody(b: Buffer): Record<string, unknown> | null {
  let i = skipSpace(b, 0);
  if (b[i] !== OPEN_OBJECT) return null;
  const body: Record<string, unknown> = {};
  let sawIds = false;
  i = skipSpace(b, i + 1);
  if (b[i] === CLOSE_OBJECT) return null;
  try {
    for (;;) {
      if (b[i] !== QUOTE) return null;
      const keyEnd = stringEnd(b, i);
      if (keyEnd < 0) return null;
      const key = plainKey(b, i, keyEnd) ?? (JSON.parse(b.toString('utf8', i, keyEnd)) as string);
      // JSON.parse makes "__proto__" an own key; an assignment would set the prototype.
      if (key === '__proto__') return null;
      i = skipSpace(b, keyEnd);
      if (b[i] !== COLON) return null;
      i = skipSpace(b, i + 1);
      if (key === 'prompt') {
        // Any other prompt (text, a batch, a float) is JSON.parse's: stop here, not at the end.
        const ids = b[i] === OPEN_ARRAY ? tokenIds(b, i) : null;
        // One huge prompt (read whole or not) must not keep its scratch for the life of the process.
        if (scratch.length > SCRATCH_KEPT) scratch = new Uint32Array(SCRATCH_KEPT);
        if (ids === null) return null;
        body[key] = ids.ids;
        sawIds = true;
        i = ids.end;
      } else {
        const end = valueEnd(b, i);
        if (end <= i) return null;
        body[key] = JSON.parse(b.toString('utf8', i, end));
        i = end;
      }
      i = skipSpace(b, i);
      if (b[i] === COMMA) i = skipSpace(b, i + 1);
      else if (b[i] === CLOSE_OBJECT) break;
      else return null;
    }
  } catch {
    return null; // a value JSON.parse refuses: the ordinary path reports it
  }
  if (skipSpace(b, i + 1) !== b.length) return null;
  return sawIds ? body : null;
}
