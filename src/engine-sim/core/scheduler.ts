// vLLM v1-style scheduling pass: running requests first (decode or next prefill chunk), LIFO
// preemption when blocks run out, then admission from the waiting queue with prefix reuse.
// It only allocates and reuses blocks; computing tokens and committing blocks is engine-core's job.
import { extendChain, type ChainContext } from './chain.js';
import type { CoreConfig } from './config.js';
import type { HybridCache } from './hybrid-cache.js';
import type { KvCache } from './kv-cache.js';
import type { SimRequest } from './request.js';
import type { BlockContent } from './block.js';

export interface ScheduledWork {
  req: SimRequest;
  /** Tokens computed for this request in the pass. */
  tokens: number;
  decode: boolean;
}

export interface Admission {
  req: SimRequest;
  /** Tokens looked up in the prefix cache (vLLM counts the whole sequence). */
  queried: number;
  gpuHitTokens: number;
  hostHitTokens: number;
  /** False when a preempted request is re-admitted. */
  first: boolean;
}

/**
 * One pass's plan. The scheduler reuses the object from pass to pass (a fleet steps a thousand
 * engines, most passes a decode of a request or two): read it before the next `schedule`, then
 * `endPass` drops its references (a finished request is not kept alive by a plan). `admitted` is an
 * array of its own when the pass admits (the caller may keep it).
 */
export interface PassPlan {
  work: ScheduledWork[];
  admitted: Admission[];
  preempted: SimRequest[];
  /** Requests that can never fit (finished by the core with an error). */
  rejected: SimRequest[];
  loadedTokens: number;
}

/** What a pass without admissions, preemptions or rejections returns (never pushed into). */
const NO_ADMISSIONS: Admission[] = [];
const NO_REQUESTS: SimRequest[] = [];
const NO_WORK: ScheduledWork[] = [];

export class Scheduler {
  readonly waiting: SimRequest[] = [];
  readonly running: SimRequest[] = [];
  // The config's fields read by every pass, on this object: a fleet steps a thousand engines in
  // turn, and each object a pass reads is a cache miss.
  private readonly maxBatched: number;
  private readonly chunked: boolean;
  private readonly blockSize: number;
  private readonly plan: PassPlan = {
    work: NO_WORK,
    admitted: NO_ADMISSIONS,
    preempted: NO_REQUESTS,
    rejected: NO_REQUESTS,
    loadedTokens: 0,
  };

  constructor(
    private readonly cfg: CoreConfig,
    private readonly cache: KvCache,
    private readonly chainCtx: ChainContext,
    /** A hybrid model's second KV-cache group: it decides where a hit may end. */
    private readonly groups: HybridCache | null = null,
  ) {
    this.maxBatched = cfg.maxNumBatchedTokens;
    this.chunked = cfg.enableChunkedPrefill;
    this.blockSize = cfg.blockSize;
  }

  add(req: SimRequest): void {
    req.state = 'waiting';
    this.waiting.push(req);
  }

  /** Remove a request wherever it is and free its blocks. */
  remove(req: SimRequest): boolean {
    const list = req.state === 'running' ? this.running : this.waiting;
    const i = list.indexOf(req);
    if (i < 0) return false;
    list.splice(i, 1);
    this.freeBlocks(req);
    return true;
  }

  schedule(): PassPlan {
    const plan = this.plan;
    plan.work = [];
    plan.loadedTokens = 0;
    let budget = this.maxBatched;

    for (let i = 0; i < this.running.length && budget > 0; ) {
      const req = this.running[i];
      const decode = req.decoding;
      const n = Math.min(req.remaining, budget);
      if (!this.chunked && n < req.remaining) break;
      let scheduled = true;
      while (!this.grow(req, req.computed + n)) {
        const victim = this.running.pop() as SimRequest;
        this.preempt(victim);
        if (plan.preempted === NO_REQUESTS) plan.preempted = [];
        plan.preempted.push(victim);
        if (victim === req) {
          scheduled = false;
          break;
        }
      }
      if (!scheduled) break;
      plan.work.push({ req, tokens: n, decode });
      budget -= n;
      i++;
    }

    while (
      plan.preempted.length === 0 &&
      budget > 0 &&
      this.waiting.length > 0 &&
      this.running.length < this.cfg.maxNumSeqs
    ) {
      const req = this.waiting[0];
      const admission = this.admit(req, budget, plan);
      if (!admission) {
        if (this.running.length === 0 && plan.work.length === 0) {
          // Nothing else holds blocks, so this request can never fit.
          this.waiting.shift();
          if (plan.rejected === NO_REQUESTS) plan.rejected = [];
          plan.rejected.push(req);
          continue;
        }
        break;
      }
      this.waiting.shift();
      req.state = 'running';
      this.running.push(req);
      if (plan.admitted === NO_ADMISSIONS) plan.admitted = [];
      plan.admitted.push(admission);
      plan.work.push({ req, tokens: admission.tokens, decode: false });
      budget -= admission.tokens;
    }
    return plan;
  }

  /** The pass is applied: the plan lets go of its requests and lists. */
  endPass(): void {
    const plan = this.plan;
    plan.work = NO_WORK;
    plan.admitted = NO_ADMISSIONS;
    plan.preempted = NO_REQUESTS;
    plan.rejected = NO_REQUESTS;
  }

  private admit(req: SimRequest, budget: number, plan: PassPlan): (Admission & { tokens: number }) | null {
    const bs = this.cfg.blockSize;
    // vLLM always recomputes at least the last token, so a full hit stops one block short.
    const maxHit = this.cfg.enablePrefixCaching ? Math.floor((req.length - 1) / bs) : 0;
    const chain = extendChain(this.chainCtx, req, maxHit);
    const cache = this.cache;
    let hits = cache.lookup(chain, maxHit);
    // A hybrid model reuses the largest prefix every group accepts (vLLM's coordinator).
    if (this.groups) hits = this.groups.clampHit(chain, hits);
    // Hit i: a GPU block, or (null) a host-tier content (read here, before any other lookup).
    const gpu = cache.hitBlocks;
    const host = cache.hitContents;
    const hitTokens = hits * bs;
    const toCompute = req.length - hitTokens;
    const n = Math.min(toCompute, budget);
    if (!this.cfg.enableChunkedPrefill && n < toCompute) return null;
    let evictableHits = 0;
    let hostHits = 0;
    for (let i = 0; i < hits; i++) {
      const b = gpu[i];
      if (b !== null) evictableHits += b.refs === 0 ? 1 : 0;
      else hostHits++;
    }
    const newBlocks = Math.ceil((hitTokens + n) / bs) - hits;
    if (cache.available - evictableHits < hostHits + newBlocks) return null;

    for (let i = 0; i < hits; i++) {
      const b = gpu[i];
      if (b !== null) cache.acquire(b);
    }
    // Refresh host copies first so loading one block cannot push out the next.
    if (hostHits > 0) for (let i = 0; i < hits; i++) if (gpu[i] === null) cache.host?.touch(host[i] as BlockContent);
    for (let i = 0; i < hits; i++) {
      const b = gpu[i];
      if (b !== null) req.blocks.push(b);
      else req.blocks.push(cache.loadFromHost(host[i] as BlockContent)!); // room was checked above
    }
    req.blockCount = req.blocks.length;
    req.committed = hits;
    req.computed = hitTokens;
    this.groups?.admit(req.id, chain, hits);
    this.grow(req, hitTokens + n);
    plan.loadedTokens += hostHits * bs;
    const first = req.cachedTokens === null;
    if (first) req.cachedTokens = hitTokens;
    return {
      req,
      tokens: n,
      queried: req.length,
      gpuHitTokens: (hits - hostHits) * bs,
      hostHitTokens: hostHits * bs,
      first,
    };
  }

  /** Ensure the block table holds `tokens` tokens; all or nothing. */
  private grow(req: SimRequest, tokens: number): boolean {
    const need = Math.ceil(tokens / this.blockSize) - req.blockCount;
    if (need <= 0) return true;
    if (this.cache.available < need) return false;
    for (let k = 0; k < need; k++) req.blocks.push(this.cache.allocate()!); // room was checked above
    req.blockCount = req.blocks.length;
    return true;
  }

  private preempt(req: SimRequest): void {
    this.freeBlocks(req);
    req.state = 'waiting';
    req.preemptions++;
    this.waiting.unshift(req);
  }

  private freeBlocks(req: SimRequest): void {
    this.cache.release(req.blocks);
    this.groups?.releaseRequest(req.id);
    req.blocks.length = 0;
    req.blockCount = 0;
    req.committed = 0;
    req.computed = 0;
  }
}
