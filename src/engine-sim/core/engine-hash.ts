// The engine's own block hashes, deliberately NOT the router's XXH3 standard, so a router must
// key blocks by engine hash and recompute its own from token_ids (the dual-key path).
//   vllm:   vLLM's `sha256_cbor`: sha256(cbor([parent_digest, [tokens], extra_keys|null])),
//           root parent NONE_HASH = sha256(cbor(str(PYTHONHASHSEED))); event id = low 64 bits.
//   sglang: SGLang's chain: sha256(parent_digest || tokens as u32 LE); event id = first 8 bytes
//           as a signed int64 (kept here as its u64 two's complement).
import { createHash } from 'node:crypto';

export type HashFlavor = 'vllm' | 'sglang';

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
  return new DataView(bytes.buffer, bytes.byteOffset + offset, 8).getBigUint64(0, false);
}

// --- minimal canonical CBOR for the shapes vLLM hashes ---------------------------------------
function cborHead(major: number, n: number, out: number[]): void {
  const m = major << 5;
  if (n < 24) out.push(m | n);
  else if (n < 0x100) out.push(m | 24, n);
  else if (n < 0x10000) out.push(m | 25, n >>> 8, n & 0xff);
  else out.push(m | 26, (n >>> 24) & 0xff, (n >>> 16) & 0xff, (n >>> 8) & 0xff, n & 0xff);
}

function cborText(s: string, out: number[]): void {
  const b = Buffer.from(s, 'utf8');
  cborHead(3, b.length, out);
  for (const x of b) out.push(x);
}

export function vllmNoneHash(pythonHashSeed: string): Uint8Array {
  const out: number[] = [];
  cborText(pythonHashSeed, out);
  return createHash('sha256').update(Uint8Array.from(out)).digest();
}

export function vllmHasher(pythonHashSeed = '0'): EngineHasher {
  const none = vllmNoneHash(pythonHashSeed);
  return {
    flavor: 'vllm',
    digest(parent, tokens, extra) {
      const out: number[] = [0x83];
      cborHead(2, 32, out);
      for (const x of parent ?? none) out.push(x);
      cborHead(4, tokens.length, out);
      for (const t of tokens) cborHead(0, t, out);
      if (extra === null || extra.length === 0) out.push(0xf6);
      else {
        cborHead(4, extra.length, out);
        for (const k of extra) cborText(k, out);
      }
      return createHash('sha256').update(Uint8Array.from(out)).digest();
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

export function makeHasher(flavor: HashFlavor, pythonHashSeed: string): EngineHasher {
  return flavor === 'sglang' ? sglangHasher() : vllmHasher(pythonHashSeed);
}
