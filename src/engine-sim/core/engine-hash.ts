// The engine's own block hashes, deliberately NOT the router's XXH3 standard, so a router must
// key blocks by engine hash and recompute its own from token_ids (the dual-key path).
//   vllm:   vLLM's `sha256_cbor`: sha256(cbor([parent_digest, [tokens], extra_keys|null])),
//           root parent NONE_HASH = sha256(cbor(str(PYTHONHASHSEED))); event id = low 64 bits.
//   sglang: SGLang's chain: sha256(parent_digest || tokens as u32 LE); event id = first 8 bytes
//           as a signed int64 (kept here as its u64 two's complement).
//   murmur: a non-cryptographic 64-bit chain (two murmur3 lanes over the parent id and tokens) in
//           plain JS, no digest object or native call: `bench fleet`'s thousand engines in one
//           process hash tens of millions of blocks. Not the router's hash either (another
//           function), so routers rehash token_ids as for vLLM.
import { createHash } from 'node:crypto';

export type HashFlavor = 'vllm' | 'sglang' | 'murmur';

/** Per-block extra keys in vLLM order: LoRA name on every block, cache_salt on block 0. */
export type ExtraKeys = string[] | null;

export interface EngineHasher {
  readonly flavor: HashFlavor;
  /**
   * Digest of one full block; `parent` null means the first block of a sequence. `into`: a
   * digest of an earlier block (this hasher's, possibly `parent` itself) the result may overwrite
   * instead of allocating (murmur does; the sha256 flavors return a new one). The block's tokens
   * are `tokens[at, at + len)` (default: all of them; a range, so that a request's blocks are
   * hashed in place: a view per block was most of a fleet's engine garbage).
   */
  digest(
    parent: Uint8Array | null,
    tokens: Uint32Array,
    extra: ExtraKeys,
    into?: Uint8Array | null,
    at?: number,
    len?: number,
  ): Uint8Array;
  /** The u64 block id carried in events (two's complement for SGLang's signed ids). */
  id(digest: Uint8Array): bigint;
  /** The id's low 30 bits (`blockKey`), read from the digest: no bigint arithmetic. */
  key(digest: Uint8Array): number;
}

/** The low 30 bits of a big-endian u64 whose last 4 bytes start at `at`. */
function lowKey(d: Uint8Array, at: number): number {
  return ((d[at] & 0x3f) << 24) | (d[at + 1] << 16) | (d[at + 2] << 8) | d[at + 3];
}

function readU64(bytes: Uint8Array, offset: number): bigint {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).readBigUInt64BE(offset);
}

// --- minimal canonical CBOR for the shapes vLLM hashes, written into a reused scratch buffer ---
class CborWriter {
  buf = Buffer.allocUnsafe(4096);
  pos = 0;

  reserve(n: number): void {
    if (this.pos + n <= this.buf.length) return;
    const next = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.pos + n));
    this.buf.copy(next, 0, 0, this.pos);
    this.buf = next;
  }

  head(major: number, n: number): void {
    this.reserve(5);
    const m = major << 5;
    const b = this.buf;
    if (n < 24) b[this.pos++] = m | n;
    else if (n < 0x100) {
      b[this.pos++] = m | 24;
      b[this.pos++] = n;
    } else if (n < 0x10000) {
      b[this.pos++] = m | 25;
      b.writeUInt16BE(n, this.pos);
      this.pos += 2;
    } else {
      b[this.pos++] = m | 26;
      b.writeUInt32BE(n >>> 0, this.pos);
      this.pos += 4;
    }
  }

  bytes(data: Uint8Array): void {
    this.reserve(data.length);
    this.buf.set(data, this.pos);
    this.pos += data.length;
  }

  text(s: string): void {
    const b = Buffer.from(s, 'utf8');
    this.head(3, b.length);
    this.bytes(b);
  }

  byte(v: number): void {
    this.reserve(1);
    this.buf[this.pos++] = v;
  }

  view(): Uint8Array {
    return this.buf.subarray(0, this.pos);
  }
}

export function vllmNoneHash(pythonHashSeed: string): Uint8Array {
  const w = new CborWriter();
  w.text(pythonHashSeed);
  return createHash('sha256').update(w.view()).digest();
}

export function vllmHasher(pythonHashSeed = '0'): EngineHasher {
  const none = vllmNoneHash(pythonHashSeed);
  const w = new CborWriter();
  return {
    flavor: 'vllm',
    digest(parent, tokens, extra, _into, at = 0, len = tokens.length - at) {
      w.pos = 0;
      w.byte(0x83);
      w.head(2, 32);
      w.bytes(parent ?? none);
      w.head(4, len);
      for (let i = at; i < at + len; i++) w.head(0, tokens[i]);
      if (extra === null || extra.length === 0) w.byte(0xf6);
      else {
        w.head(4, extra.length);
        for (const k of extra) w.text(k);
      }
      return createHash('sha256').update(w.view()).digest();
    },
    id: (d) => readU64(d, d.length - 8),
    key: (d) => lowKey(d, d.length - 4),
  };
}

const SGLANG_SALT_PREFIX = 'sglang-cache-salt-v1\u0000';

export function sglangHasher(): EngineHasher {
  return {
    flavor: 'sglang',
    digest(parent, tokens, extra, _into, at = 0, len = tokens.length - at) {
      const h = createHash('sha256');
      // SGLang seeds a salted chain from a salt digest; LoRA gets the same treatment here (approximation).
      if (parent) h.update(parent);
      else if (extra && extra.length > 0)
        h.update(
          createHash('sha256')
            .update(SGLANG_SALT_PREFIX + extra.join('\u0000'))
            .digest(),
        );
      const le = Buffer.alloc(len * 4);
      for (let i = 0; i < len; i++) le.writeUInt32LE(tokens[at + i], i * 4);
      return h.update(le).digest();
    },
    id: (d) => readU64(d, 0),
    key: (d) => lowKey(d, 4),
  };
}

// murmur3's 32-bit block mix and finalizer (two lanes with different seeds make 64 bits).
function mix32(h: number, k: number): number {
  k = Math.imul(k, 0xcc9e2d51);
  k = (k << 15) | (k >>> 17);
  h ^= Math.imul(k, 0x1b873593);
  h = (h << 13) | (h >>> 19);
  return (Math.imul(h, 5) + 0xe6546b64) | 0;
}

function fmix32(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

// Lane seeds of the root block: arbitrary ("engi", "ne\0\0"), unrelated to the router's 1337.
const ROOT_HI = 0x656e6769;
const ROOT_LO = 0x6e650000;

// id(): the digest's 8 bytes as one big-endian u64 (one BigInt, not one per half and per operation).
const idBytes = new Uint8Array(8);
const idView = new DataView(idBytes.buffer);

export function murmurHasher(): EngineHasher {
  return {
    flavor: 'murmur',
    digest(parent, tokens, extra, into, at = 0, len = tokens.length - at) {
      let hi = parent ? ((parent[0] << 24) | (parent[1] << 16) | (parent[2] << 8) | parent[3]) ^ ROOT_LO : ROOT_HI;
      let lo = parent ? ((parent[4] << 24) | (parent[5] << 16) | (parent[6] << 8) | parent[7]) ^ ROOT_HI : ROOT_LO;
      if (extra !== null) {
        for (const key of extra) {
          for (let i = 0; i < key.length; i++) {
            hi = mix32(hi, key.charCodeAt(i));
            lo = mix32(lo, key.charCodeAt(i) ^ 0x5bd1e995);
          }
          hi = mix32(hi, 0);
          lo = mix32(lo, 0);
        }
      }
      for (let i = at; i < at + len; i++) {
        hi = mix32(hi, tokens[i]);
        lo = mix32(lo, tokens[i] ^ 0x9e3779b9);
      }
      hi = fmix32(hi ^ len);
      lo = fmix32(lo ^ Math.imul(len, 0x27d4eb2f));
      // (parent was read above: `into` may be the same bytes.)
      const d = into != null && into.length === 8 ? into : new Uint8Array(8);
      d[0] = hi >>> 24;
      d[1] = hi >>> 16;
      d[2] = hi >>> 8;
      d[3] = hi;
      d[4] = lo >>> 24;
      d[5] = lo >>> 16;
      d[6] = lo >>> 8;
      d[7] = lo;
      return d;
    },
    id(d) {
      for (let i = 0; i < 8; i++) idBytes[i] = d[i];
      return idView.getBigUint64(0);
    },
    key: (d) => lowKey(d, 4),
  };
}

export function makeHasher(flavor: HashFlavor, pythonHashSeed: string): EngineHasher {
  return flavor === 'sglang' ? sglangHasher() : flavor === 'murmur' ? murmurHasher() : vllmHasher(pythonHashSeed);
}
