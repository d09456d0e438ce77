// Block contents of a sequence, computed on demand: engine hash chain + router-standard seq hash.
import { hashSpace, seqHashesTransient, type HashSpace } from '../../hashing/index.js';
import { type BlockContent, ChainContent } from './block.js';
import type { EngineHasher } from './engine-hash.js';
import type { SimRequest } from './request.js';

export interface ChainContext {
  hasher: EngineHasher;
  blockSize: number;
  /** Router hash seed (--hash-seed). */
  routerSeed: bigint;
  /** The router hash space of requests without LoRA or salt (set on first use). */
  plainSpace?: HashSpace;
}

function routerSpace(ctx: ChainContext, req: SimRequest): HashSpace {
  // Most requests have neither LoRA nor salt: the context's own space, no key string to build.
  if (req.loraName === null && req.cacheSalt === null) {
    ctx.plainSpace ??= hashSpace({ seed: ctx.routerSeed });
    return ctx.plainSpace;
  }
  return hashSpace({ seed: ctx.routerSeed, loraName: req.loraName, salt: req.cacheSalt });
}

function extraKeys(req: SimRequest, depth: number): string[] | null {
  if (req.loraName === null && (depth !== 0 || req.cacheSalt === null)) return null;
  const keys: string[] = [];
  if (req.loraName) keys.push(req.loraName);
  if (depth === 0 && req.cacheSalt) keys.push(req.cacheSalt);
  return keys.length > 0 ? keys : null;
}

/** Extend `req.chain` to cover `nBlocks` full blocks (never beyond the tokens it has). */
export function extendChain(ctx: ChainContext, req: SimRequest, nBlocks: number): BlockContent[] {
  const bs = ctx.blockSize;
  const limit = Math.min(nBlocks, Math.floor(req.length / bs));
  if (req.chain.length >= limit) return req.chain;
  const space = routerSpace(ctx, req);
  const start = req.chain.length;
  // One call for the whole range, the chain continued from the last block's seq hash: the router
  // hash is cheapest per prompt, not per block. A view into hashing scratch memory, read before the
  // next hashing call (the engine hasher below is not the router's).
  const routerHashes = seqHashesTransient(
    req.tokens.subarray(start * bs, limit * bs),
    bs,
    space,
    start > 0 ? req.chain[start - 1].routerHash : null,
  );
  for (let i = start; i < limit; i++) {
    const prev = i > 0 ? req.chain[i - 1] : null;
    const extra = extraKeys(req, i);
    // Only the next block's hash reads a digest: the request keeps its last one, the blocks do not.
    // The block's tokens are read in place (no view per block).
    const digest = ctx.hasher.digest(prev ? req.chainDigest : null, req.tokens, extra, req.chainDigest, i * bs, bs);
    req.chainDigest = digest;
    // Its tokens are read from the request's, no copy: a committed block's content moves them to
    // its slot in the GPU pool's token pages (KvCache.commit), so a cached block never keeps a prompt alive.
    req.chain.push(
      new ChainContent(
        ctx.hasher.id(digest),
        prev ? prev.hash : null,
        i,
        req.tokens,
        i * bs,
        bs,
        routerHashes[i - start],
        req.loraName,
        req.cacheSalt,
        extra,
        ctx.hasher.key(digest),
      ),
    );
  }
  return req.chain;
}
