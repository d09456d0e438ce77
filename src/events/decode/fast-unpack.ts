// Fast msgpack decoding of KV event batches. Decodes exactly what msgpack.ts's `unpack` would
// (@msgpack/msgpack with useBigInt64), with one difference: inside a `[ts, [events...], ...]` batch,
// the hash and token lists of each event come back as typed arrays instead of bigint[] / number[]:
//   map events:       the values of block_hashes / seq_hashes (BigUint64Array) and token_ids (Uint32Array)
//   positional events tagged BlockStored*: element 1 (hashes) and 3 (tokens); BlockRemoved: element 1
// (the same positions in every engine's positional schema). A list is typed only when every element
// is an int of the right range (hashes: any int, taken as u64 two's complement exactly as hashValue
// and toU64 do; tokens: 0..2^32-1); otherwise it is decoded as a plain array and the event readers
// judge it as before. The readers accept both forms (values.ts, standard.ts), so every event
// semantic stays in one place.
// Anything this reader does not reproduce with certainty (extension types, bin, non-ASCII strings,
// non-string map keys, __proto__, limits, truncation, trailing bytes, deep nesting) returns undefined and
// the caller decodes with the library, which reports errors exactly as before.
import { REMOVED_TAGS, STORED_TAGS } from './engine-event.js';

const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;
const MAX_DEPTH = 64;
const MAX_MAP = 1 << 12; // msgpack.ts's limits
const MAX_ARRAY = 1 << 22;
const MAX_STR = 1 << 20;

// Thrown (never an Error: no stack capture) to abandon the fast path.
const BAIL = { bail: true } as const;

// Typed lists are carved out of shared slabs: a fresh off-heap ArrayBuffer per list costs ~2 us,
// a view on a slab ~0.2 us. A retained event pins at most one slab.
const SLAB_BYTES = 1 << 16;
let slab = new ArrayBuffer(SLAB_BYTES);
let slab32 = new Uint32Array(slab);
let slabTop = 0; // in u32 words

/**
 * The caller holds no list decoded so far: the current slab is reused from its start, where it
 * would otherwise be replaced by a new one once full. For a caller that applies each batch at once
 * and keeps nothing of it (bench fleet: the index copies what it keeps), so that decoding allocates
 * no ArrayBuffer per 64 KiB of lists (V8 starts a major GC for every 64 MiB of those). The server
 * never calls it: a retained event pins its slab.
 */
export function reuseDecodeSlab(): void {
  slabTop = 0;
}

/** Reserve `words` u32 words (8-byte aligned); returns the word offset into `slab32`. */
function reserve(words: number): number {
  slabTop = (slabTop + 1) & ~1;
  if (slabTop + words > slab32.length) {
    slab = new ArrayBuffer(Math.max(SLAB_BYTES, words * 4));
    slab32 = new Uint32Array(slab);
    slabTop = 0;
  }
  return slabTop;
}

// Short strings (map keys, tags, media) repeat in every event: a direct-mapped cache returns the
// same string after a byte compare instead of decoding it again.
const CACHE_SIZE = 512;
const CACHE_MAX_LEN = 32;
const cacheBytes: Array<Uint8Array | null> = new Array<Uint8Array | null>(CACHE_SIZE).fill(null);
const cacheStrs: string[] = new Array<string>(CACHE_SIZE).fill('');

let buf: Uint8Array = new Uint8Array(0);
let view = new DataView(buf.buffer); // DataView reads compile to single loads: ~20% faster than byte shifts
let pos = 0;
let end = 0;

function need(n: number): void {
  if (pos + n > end) throw BAIL;
}

function u8(): number {
  if (pos >= end) throw BAIL;
  return buf[pos++];
}

function u16(): number {
  need(2);
  const v = (buf[pos] << 8) | buf[pos + 1];
  pos += 2;
  return v;
}

function u32(): number {
  need(4);
  const v = ((buf[pos] << 24) | (buf[pos + 1] << 16) | (buf[pos + 2] << 8) | buf[pos + 3]) >>> 0;
  pos += 4;
  return v;
}

function str(len: number): string {
  if (len > MAX_STR) throw BAIL;
  need(len);
  const start = pos;
  pos += len;
  if (len > CACHE_MAX_LEN) return ascii(start, len);
  const b = buf;
  let h = len;
  if (len > 0) h = Math.imul(h ^ b[start], 31) ^ b[start + len - 1] ^ (b[start + (len >> 1)] << 7);
  h &= CACHE_SIZE - 1;
  const c = cacheBytes[h];
  if (c !== null && c.length === len) {
    let i = 0;
    while (i < len && c[i] === b[start + i]) i++;
    if (i === len) return cacheStrs[h];
  }
  // Internalized (a property key's form): a map key that is not costs a string-table lookup on
  // every keyed store and compares by content instead of by pointer.
  const s = internalize(ascii(start, len));
  cacheBytes[h] = b.slice(start, start + len);
  cacheStrs[h] = s;
  return s;
}

function internalize(s: string): string {
  const o: Record<string, number> = {};
  o[s] = 0;
  for (const k in o) return k;
  return s;
}

function ascii(start: number, len: number): string {
  let s = '';
  for (let i = 0; i < len; i++) {
    const b = buf[start + i];
    // Non-ASCII: the library's UTF-8 decoders handle invalid sequences in their own way.
    if (b > 0x7f) throw BAIL;
    s += String.fromCharCode(b);
  }
  return s;
}

function arrayLen(head: number): number {
  if (head >= 0x90 && head <= 0x9f) return head - 0x90;
  if (head === 0xdc) return u16();
  if (head === 0xdd) return u32();
  return -1;
}

function mapLen(head: number): number {
  if (head >= 0x80 && head <= 0x8f) return head - 0x80;
  if (head === 0xde) return u16();
  if (head === 0xdf) return u32();
  return -1;
}

/** One value, as the library decodes it. */
function value(depth: number): unknown {
  const head = u8();
  if (head < 0x80) return head;
  if (head >= 0xe0) return head - 0x100;
  if (head >= 0xa0 && head <= 0xbf) return str(head - 0xa0);
  if (head <= 0x9f) {
    if (head >= 0x90) return array(head - 0x90, depth);
    return map(head - 0x80, depth);
  }
  switch (head) {
    case 0xc0:
      return null;
    case 0xc2:
      return false;
    case 0xc3:
      return true;
    case 0xca:
      need(4);
      pos += 4;
      return view.getFloat32(pos - 4);
    case 0xcb:
      need(8);
      pos += 8;
      return view.getFloat64(pos - 8);
    case 0xcc:
      return u8();
    case 0xcd:
      return u16();
    case 0xce:
      return u32();
    case 0xcf:
      need(8);
      pos += 8;
      return view.getBigUint64(pos - 8);
    case 0xd0:
      return (u8() << 24) >> 24;
    case 0xd1:
      return (u16() << 16) >> 16;
    case 0xd2:
      return u32() | 0;
    case 0xd3:
      need(8);
      pos += 8;
      return view.getBigInt64(pos - 8);
    case 0xd9:
      return str(u8());
    case 0xda:
      return str(u16());
    case 0xdb:
      return str(u32());
    case 0xdc:
      return array(u16(), depth);
    case 0xdd:
      return array(u32(), depth);
    case 0xde:
      return map(u16(), depth);
    case 0xdf:
      return map(u32(), depth);
    default:
      // bin, ext, 0xc1: left to the library.
      throw BAIL;
  }
}

function array(n: number, depth: number): unknown[] {
  if (n > MAX_ARRAY || n > end - pos || depth >= MAX_DEPTH) throw BAIL;
  const out = new Array<unknown>(n);
  for (let i = 0; i < n; i++) out[i] = value(depth + 1);
  return out;
}

function key(): string {
  const head = u8();
  let len: number;
  if (head >= 0xa0 && head <= 0xbf) len = head - 0xa0;
  else if (head === 0xd9) len = u8();
  else if (head === 0xda) len = u16();
  else if (head === 0xdb) len = u32();
  else throw BAIL; // number keys are legal for the library; never seen in events
  const k = str(len);
  if (k === '__proto__') throw BAIL;
  return k;
}

function map(n: number, depth: number): Record<string, unknown> {
  if (n > MAX_MAP || 2 * n > end - pos || depth >= MAX_DEPTH) throw BAIL;
  const out: Record<string, unknown> = {};
  for (let i = 0; i < n; i++) {
    const k = key();
    out[k] = value(depth + 1);
  }
  return out;
}

// The two list readers below keep the cursor in locals: module-level `pos` costs a context store
// per byte, which made them 3x slower.

/**
 * A hash list as BigUint64Array when every element is an int; otherwise rewinds and returns the
 * plain decoding.
 */
function hashes(depth: number): unknown {
  const start = pos;
  const n = arrayLen(u8());
  if (n < 0 || n > end - pos || n > MAX_ARRAY) {
    pos = start;
    return value(depth); // which applies the library's limits (and bails where it would throw)
  }
  const at = reserve(2 * n);
  const w = slab32;
  const b = buf;
  const d = view;
  const e = end;
  let p = pos;
  for (let i = 0; i < n; i++) {
    if (p >= e) throw BAIL;
    const head = b[p++];
    let lo: number;
    let hi = 0;
    if (head < 0x80) lo = head;
    else if (head === 0xcf || head === 0xd3) {
      if (p + 8 > e) throw BAIL;
      hi = d.getInt32(p);
      lo = d.getInt32(p + 4);
      p += 8;
    } else if (head >= 0xe0) {
      lo = head - 0x100;
      hi = -1;
    } else if (head === 0xcc || head === 0xd0) {
      if (p + 1 > e) throw BAIL;
      const v = head === 0xcc ? b[p] : (b[p] << 24) >> 24;
      p += 1;
      lo = v;
      hi = v < 0 ? -1 : 0;
    } else if (head === 0xcd || head === 0xd1) {
      if (p + 2 > e) throw BAIL;
      const u = (b[p] << 8) | b[p + 1];
      const v = head === 0xcd ? u : (u << 16) >> 16;
      p += 2;
      lo = v;
      hi = v < 0 ? -1 : 0;
    } else if (head === 0xce || head === 0xd2) {
      if (p + 4 > e) throw BAIL;
      const v = d.getInt32(p);
      p += 4;
      lo = v;
      hi = head === 0xd2 && v < 0 ? -1 : 0;
    } else {
      pos = start;
      return value(depth);
    }
    const o = at + 2 * i;
    if (LITTLE_ENDIAN) {
      w[o] = lo;
      w[o + 1] = hi;
    } else {
      w[o] = hi;
      w[o + 1] = lo;
    }
  }
  pos = p;
  slabTop = at + 2 * n;
  return new BigUint64Array(slab, at * 4, n);
}

/** A token list as Uint32Array when every element is an int in 0..2^32-1; else the plain decoding. */
function tokens(depth: number): unknown {
  const start = pos;
  const n = arrayLen(u8());
  if (n < 0 || n > end - pos || n > MAX_ARRAY) {
    pos = start;
    return value(depth); // which applies the library's limits (and bails where it would throw)
  }
  const at = reserve(n);
  const w = slab32;
  const b = buf;
  const d = view;
  const e = end;
  let p = pos;
  for (let i = 0; i < n; i++) {
    if (p >= e) throw BAIL;
    const head = b[p++];
    // Unsigned encodings only (what encoders emit for non-negative ints); v keeps the u32 bits as
    // an int32, which the Uint32Array store wraps back. Anything else goes the plain way.
    let v: number;
    if (head < 0x80) v = head;
    else if (head === 0xce) {
      if (p + 4 > e) throw BAIL;
      v = d.getInt32(p);
      p += 4;
    } else if (head === 0xcd) {
      if (p + 2 > e) throw BAIL;
      v = d.getUint16(p);
      p += 2;
    } else if (head === 0xcc) {
      if (p + 1 > e) throw BAIL;
      v = b[p];
      p += 1;
    } else {
      pos = start;
      return value(depth);
    }
    w[at + i] = v;
  }
  pos = p;
  slabTop = at + n;
  return new Uint32Array(slab, at * 4, n);
}

function eventMap(m: number, depth: number): Record<string, unknown> {
  if (m > MAX_MAP || 2 * m > end - pos || depth >= MAX_DEPTH) throw BAIL;
  const out: Record<string, unknown> = {};
  for (let i = 0; i < m; i++) {
    const k = key(); // internalized: the comparisons below are pointer compares
    out[k] =
      k === 'token_ids'
        ? tokens(depth + 1)
        : k === 'block_hashes' || k === 'seq_hashes'
          ? hashes(depth + 1)
          : value(depth + 1);
  }
  return out;
}

function event(depth: number): unknown {
  const start = pos;
  const head = u8();
  const m = mapLen(head);
  if (m >= 0) return eventMap(m, depth);
  const n = arrayLen(head);
  if (n > 0) {
    if (n > MAX_ARRAY || n > end - pos || depth >= MAX_DEPTH) throw BAIL;
    const out = new Array<unknown>(n);
    const tag = value(depth + 1);
    out[0] = tag;
    const stored = typeof tag === 'string' && STORED_TAGS.has(tag);
    const typed = stored || (typeof tag === 'string' && REMOVED_TAGS.has(tag));
    for (let i = 1; i < n; i++)
      out[i] = typed && i === 1 ? hashes(depth + 1) : stored && i === 3 ? tokens(depth + 1) : value(depth + 1);
    return out;
  }
  pos = start;
  return value(depth);
}

function batch(): unknown {
  const n = arrayLen(u8());
  if (n < 2) {
    // Not a [ts, events, ...] batch (bare standardized events, junk): decoded plainly.
    pos = 0;
    return value(0);
  }
  if (n > MAX_ARRAY || n > end - pos) throw BAIL;
  const out = new Array<unknown>(n);
  out[0] = value(1);
  const at = pos;
  const m = arrayLen(u8());
  if (m >= 0) {
    if (m > MAX_ARRAY || m > end - pos) throw BAIL;
    const evs = new Array<unknown>(m);
    for (let i = 0; i < m; i++) evs[i] = event(2);
    out[1] = evs;
  } else {
    pos = at;
    out[1] = value(1);
  }
  for (let i = 2; i < n; i++) out[i] = value(1);
  return out;
}

const EMPTY = new Uint8Array(0);
const EMPTY_VIEW = new DataView(EMPTY.buffer);

/**
 * Decode a payload like msgpack.ts's `unpack`, with typed hash/token lists inside a batch's events
 * (see the top of this file); undefined when the library must decode it instead.
 */
export function fastUnpack(payload: Uint8Array): unknown {
  buf = payload;
  view = new DataView(payload.buffer, payload.byteOffset, payload.byteLength);
  pos = 0;
  end = payload.byteLength;
  try {
    const v = batch();
    return pos === end ? v : undefined; // trailing bytes: the library's error
  } catch {
    // BAIL, or a stack overflow on adversarial input: the library decides.
    return undefined;
  } finally {
    buf = EMPTY;
    view = EMPTY_VIEW;
  }
}
