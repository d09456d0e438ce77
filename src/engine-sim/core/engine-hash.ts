// The engine's own block hashes, deliberately NOT the router's XXH3 standard, so a router must
// key blocks by engine hash and recompute its own from token_ids (the dual-key path).
//   vllm:   vLLM's `sha256_cbor`: sha256(cbor([parent_digest, [tokens], extra_keys|null])),
//           root parent NONE_HASH = sha256(cbor(str(PYTHONHASHSEED))); event id = low 64 bits.
//   sglang: SGLang's chain: sha256(parent_digest || tokens as u32 LE); event id = first 8 bytes
//           as a signed int64 (kept here as its u64 two's complement).
//   xxh3:   an XXH3-64 chain (vLLM's `--prefix-caching-hash-algo xxhash` in spirit): several times
//           cheaper than sha256, for `bench fleet`'s thousand engines in one process. Still not the
//           router's hash (other seed and chaining), so routers rehash token_ids as for vLLM.
import { createHash } from 'node:crypto';
import { xxh3_64 } from '../../hashing/index.js';

export type HashFlavor = 'vllm' | 'sglang' | 'xxh3';

/** Per-block extra keys in vLLM order: LoRA name on every block, cache_salt on block 0. */
export type ExtraKeys = string[] | null;

export interface EngineHasher {
  readonly flavor: HashFlavor;
  /** Digest of one full block; `parent` null means the first block of a sequence. */
  digest(parent: Uint8Array | null, tokens: Uint32Array, extra: ExtraKeys): Uint8Array;
  /** The u64 block id carried in events (two's complement for SGLang's signed ids). */
  id(digest: Uint8Array): bigint;
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
    digest(parent, tokens, extra) {
      w.pos = 0;
      w.byte(0x83);
      w.head(2, 32);
      w.bytes(parent ?? none);
      w.head(4, tokens.length);
      for (let i = 0; i < tokens.length; i++) w.head(0, tokens[i]);
      if (extra === null || extra.length === 0) w.byte(0xf6);
      else {
        w.head(4, extra.length);
        for (const k of extra) w.text(k);
      }
      return createHash('sha256').update(w.view()).digest();
    },
    id: (d) => readU64(d, d.length - 8),
  };
}

const SGLANG_SALT_PREFIX = 'sglang-cache-salt-v1\u0000';

export function sglangHasher(): EngineHasher {
  return {
    flavor: 'sglang',
    digest(parent, tokens, extra) {
      const h = createHash('sha256');
      // SGLang seeds a salted chain from a salt digest; LoRA gets the same treatment here (approximation).
      if (parent) h.update(parent);
      else if (extra && extra.length > 0) h.update(createHash('sha256').update(SGLANG_SALT_PREFIX + extra.join('\u0000')).digest());
      const le = Buffer.alloc(tokens.length * 4);
      for (let i = 0; i < tokens.length; i++) le.writeUInt32LE(tokens[i], i * 4);
      return h.update(le).digest();
    },
    id: (d) => readU64(d, 0),
  };
}

// Root and mixing seeds of the xxh3 chain: arbitrary, and not the router's 1337.
const XXH3_ROOT = 0x656e67696e65n;
const XXH3_MIX = 0x9e3779b97f4a7c15n;

export function xxh3Hasher(): EngineHasher {
  return {
    flavor: 'xxh3',
    digest(parent, tokens, extra) {
      let seed = parent ? readU64(parent, 0) ^ XXH3_MIX : XXH3_ROOT;
      if (extra !== null && extra.length > 0) seed = xxh3_64(extra.join('\u0000'), seed);
      const h = xxh3_64(new Uint8Array(tokens.buffer, tokens.byteOffset, tokens.byteLength), seed);
      const d = new Uint8Array(8);
      new DataView(d.buffer).setBigUint64(0, h, false);
      return d;
    },
    id: (d) => readU64(d, 0),
  };
}

export function makeHasher(flavor: HashFlavor, pythonHashSeed: string): EngineHasher {
  return flavor === 'sglang' ? sglangHasher() : flavor === 'xxh3' ? xxh3Hasher() : vllmHasher(pythonHashSeed);
}
