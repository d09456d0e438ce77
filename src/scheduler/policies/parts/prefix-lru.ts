// The Gateway API Inference Extension's approximate prefix index (reimplemented from
// kubernetes-sigs/gateway-api-inference-extension pkg/epp/framework/plugins/requestcontrol/
// dataproducer/approximateprefix/{hashing,indexer,plugin}.go at 1748e82, the last commit before the
// EPP moved to llm-d/llm-d-router, where it is unchanged at ebab687): the request text cut into
// blocks of block_size x 4 characters (4 characters per token, an estimate), each hash chained on
// the previous, at most `maxBlocks` of them plus a hash of the partial tail; per pod, an LRU of the
// block hashes routed there (31,250 by default). What the router routed is assumed cached.
import { type HashSpace, chainHash, seqHashes, xxh3_64 } from '../../../hashing/index.js';
import type { RequestText } from '../types.js';

/** GIE's `averageCharactersPerToken`. */
export const CHARS_PER_TOKEN = 4;

/**
 * The prompt's block hashes: complete blocks of `blockSizeTokens` tokens' worth of symbols (x4 for
 * characters; token ids are tokens already), at most `maxBlocks` of them, then the partial tail if
 * any. Empty when the prompt is shorter than one block (GIE: "too small for prefix cache").
 */
export function approxBlockHashes(
  text: RequestText,
  blockSizeTokens: number,
  maxBlocks: number,
  space: HashSpace,
): BigUint64Array {
  const per = text.kind === 'chars' ? blockSizeTokens * CHARS_PER_TOKEN : blockSizeTokens;
  let s = text.symbols;
  if (per <= 0 || s.length < per) return new BigUint64Array(0);
  if (s.length > per * maxBlocks) s = s.subarray(0, per * maxBlocks);
  const full = Math.floor(s.length / per);
  const blocks = seqHashes(s.subarray(0, full * per), per, space);
  if (full * per === s.length) return blocks;
  const out = new BigUint64Array(full + 1);
  out.set(blocks);
  const tail = s.slice(full * per);
  const local = xxh3_64(new Uint8Array(tail.buffer, tail.byteOffset, tail.byteLength), space.localSeed);
  out[full] = chainHash(blocks[full - 1], local, space.chainSeed);
  return out;
}

export class ApproxPrefixIndex {
  private readonly holders = new Map<bigint, Set<string>>();
  /** Per pod, its blocks oldest first (a Map keeps insertion order: a touch re-inserts). */
  private readonly lru = new Map<string, Map<bigint, true>>();

  constructor(private readonly capacityPerPod: number) {}

  /**
   * Per pod, blocks matched: the walk goes block by block while any pod holds the block, and each
   * pod holding it counts one (GIE's matchLongestPrefix; a pod that lost an early block to its LRU
   * still counts the later ones it holds).
   */
  match(hashes: BigUint64Array): Map<string, number> {
    const out = new Map<string, number>();
    for (const h of hashes) {
      const pods = this.holders.get(h);
      if (!pods || pods.size === 0) break;
      for (const p of pods) out.set(p, (out.get(p) ?? 0) + 1);
    }
    return out;
  }

  /** The request was routed to `pod`: its blocks become the pod's newest. */
  add(hashes: BigUint64Array, pod: string): void {
    let lru = this.lru.get(pod);
    if (!lru) this.lru.set(pod, (lru = new Map()));
    for (const h of hashes) {
      if (lru.has(h)) lru.delete(h);
      lru.set(h, true);
      if (lru.size > this.capacityPerPod) {
        const oldest = lru.keys().next().value as bigint;
        lru.delete(oldest);
        this.unhold(oldest, pod);
      }
    }
    for (const h of hashes) {
      let pods = this.holders.get(h);
      if (!pods) this.holders.set(h, (pods = new Set()));
      pods.add(pod);
    }
  }

  pods(): string[] {
    return [...this.lru.keys()];
  }

  removePod(pod: string): void {
    const lru = this.lru.get(pod);
    if (!lru) return;
    for (const h of lru.keys()) this.unhold(h, pod);
    this.lru.delete(pod);
  }

  private unhold(h: bigint, pod: string): void {
    const pods = this.holders.get(h);
    if (!pods) return;
    pods.delete(pod);
    if (pods.size === 0) this.holders.delete(h);
  }
}
