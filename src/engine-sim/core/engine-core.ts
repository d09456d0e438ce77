// The simulated engine of one DP rank: no sockets, no timers. An adapter calls `step(now)`
// whenever the previous pass has ended; each pass returns its virtual duration, the tokens it
// produced and the KV events it caused (published at pass start, as Dynamo's mocker does for vLLM).
import { ChunkArena } from '../../common/chunk-arena.js';
import type { BlockContent, GpuBlock } from './block.js';
import type { ChainContext } from './chain.js';
import { extendChain } from './chain.js';
import { CORE_DEFAULTS, validateCoreConfig, type CoreConfig } from './config.js';
import { makeHasher } from './engine-hash.js';
import { HybridCache } from './hybrid-cache.js';
import { KvCache } from './kv-cache.js';
import type { CoreKvEvent } from './kv-events.js';
import { SimRequest, type FinishReason, type SimRequestSpec } from './request.js';
import { Rng } from './rng.js';
import { Scheduler, type Admission } from './scheduler.js';
import { type PassContents, passMs, type PrefillChunk, type TimingKnobs } from './perf-model.js';

export interface TokenOutput {
  requestId: string;
  token: number;
  /** 0 for the first generated token. */
  index: number;
  finishReason: FinishReason | null;
  /** The stop token id when finishReason is 'stop'. */
  stopReason: number | null;
  /** Prompt tokens reused from cache (GPU + host) when the request was first admitted. */
  cachedTokens: number;
}

export interface StepOutput {
  startMs: number;
  endMs: number;
  tokens: TokenOutput[];
  admitted: Admission[];
  preempted: readonly string[];
  /** Requests that cannot fit this engine at all; the adapter fails them. */
  rejected: readonly string[];
  events: readonly CoreKvEvent[];
  prefillTokens: number;
  loadedTokens: number;
  decodeRequests: number;
}

export interface CoreStats {
  running: number;
  waiting: number;
  activeBlocks: number;
  cachedGpuBlocks: number;
  cachedCpuBlocks: number;
  /** Blocks cached in the hybrid model's second group (0 without one). */
  cachedGroupBlocks: number;
  /** vLLM's kv_cache_usage_perc: blocks held by requests / total (0..1). */
  kvUsage: number;
  clockMs: number;
}

export interface CachedBlockView extends BlockContent {
  refs: number;
}

const NO_PREFILLS: PrefillChunk[] = [];
const NO_IDS: readonly string[] = [];
/** Longest quiet window planned at once (a longer run is planned again at its end). */
const QUIET_MAX = 256;

/** Tokens per chunk of a core's own token arena. */
const TOKEN_CHUNK = 1 << 16;

/** Requests' token storage: chunks recycled as requests end (a fleet shares one among its engines). */
export function tokenArena(chunkTokens = TOKEN_CHUNK): ChunkArena<Uint32Array> {
  return new ChunkArena((n) => new Uint32Array(n), chunkTokens);
}

export class EngineCore {
  readonly cfg: CoreConfig;
  private readonly cache: KvCache;
  /** The hybrid model's second KV-cache group (null: full attention only). */
  private readonly groups: HybridCache | null;
  private readonly scheduler: Scheduler;
  private readonly chainCtx: ChainContext;
  private readonly byId = new Map<string, SimRequest>();
  private clock = 0;
  private arrivals = 0;
  private readonly tokens: ChunkArena<Uint32Array>;
  private readonly knobs: TimingKnobs;
  /** cfg.outputVocab, on this object (read by every pass). */
  private readonly vocab: Uint32Array;
  // cfg's fields read by every pass, on this object (as vocab).
  private readonly numGpuBlocks: number;
  private readonly blockSize: number;
  private readonly prefixCaching: boolean;
  /** The pass's contents as the perf model reads them, refilled every pass (a model keeps none of it). */
  private readonly contents: PassContents = { prefills: NO_PREFILLS, decodes: 0, decodeContextTokens: 0, kvUsage: 0 };
  // The quiet window planned last (`planQuiet`): its passes' ends, first start, batch and length.
  private readonly quietEndsMs = new Float64Array(QUIET_MAX);
  private quietStart = 0;
  private quietBatch = 0;
  private quietPlanned = 0;

  constructor(
    cfg: Partial<CoreConfig> & Pick<CoreConfig, 'outputVocab'>,
    /** Where requests' tokens live (default: an arena of its own). */
    tokens: ChunkArena<Uint32Array> = tokenArena(),
    /** Where the KV cache's token pages come from (default: a buffer each; KvCache). */
    tokenPage?: (length: number) => Uint32Array,
  ) {
    this.tokens = tokens;
    this.cfg = { ...CORE_DEFAULTS, ...cfg };
    const errs = validateCoreConfig(this.cfg);
    if (errs.length > 0) throw new RangeError(errs.join('; '));
    this.vocab = this.cfg.outputVocab;
    this.numGpuBlocks = this.cfg.numGpuBlocks;
    this.blockSize = this.cfg.blockSize;
    this.prefixCaching = this.cfg.enablePrefixCaching;
    this.knobs = {
      speedup: this.cfg.speedup,
      decodeSpeedup: this.cfg.decodeSpeedup,
      cpuLoadFraction: this.cfg.cpuLoadFraction,
    };
    this.cache = new KvCache(this.cfg.numGpuBlocks, this.cfg.numCpuBlocks, this.cfg.blockSize, tokenPage);
    this.chainCtx = {
      hasher: makeHasher(this.cfg.hashFlavor, this.cfg.pythonHashSeed),
      blockSize: this.cfg.blockSize,
      routerSeed: this.cfg.routerHashSeed,
    };
    this.groups = this.cfg.hybrid
      ? new HybridCache(this.cfg.hybrid, this.cfg.hybridBlocks || this.cfg.numGpuBlocks, this.cfg.blockSize)
      : null;
    this.scheduler = new Scheduler(this.cfg, this.cache, this.chainCtx, this.groups);
  }

  /** Largest prompt + max_tokens one request may ask for. */
  get maxModelLen(): number {
    return this.cfg.numGpuBlocks * this.cfg.blockSize;
  }

  add(spec: SimRequestSpec, nowMs: number): void {
    this.quietPlanned = 0;
    if (this.byId.has(spec.id)) throw new Error(`duplicate request id ${spec.id}`);
    if (spec.prompt.length === 0) throw new RangeError('empty prompt');
    if (!(spec.maxTokens >= 1)) throw new RangeError('max_tokens must be >= 1');
    const stream = spec.seed ?? this.arrivals;
    this.arrivals++;
    const rng = new Rng(this.cfg.seed ^ (spec.seed == null ? 0 : 0x5bd1e995), stream);
    const req = new SimRequest(spec, nowMs, rng, this.tokens.alloc(spec.prompt.length + spec.maxTokens));
    if (spec.imported) this.importPrompt(req);
    this.byId.set(req.id, req);
    this.scheduler.add(req);
  }

  /**
   * Blocks computed by a prefill engine arrive (disaggregated decode): the request's full prompt
   * blocks become cached here, each a stored event, so its own prefill finds them. Blocks already
   * cached are kept; a full cache takes what fits. Returns the blocks added.
   */
  private importPrompt(req: SimRequest): number {
    if (!this.cfg.enablePrefixCaching) return 0;
    const full = Math.floor(req.promptLen / this.cfg.blockSize);
    const chain = extendChain(this.chainCtx, req, full);
    const held: GpuBlock[] = [];
    let added = 0;
    for (let i = 0; i < full; i++) {
      const hit = this.cache.lookup([chain[i]], 1) === 1 ? this.cache.hitBlocks[0] : null;
      if (hit !== null) {
        this.cache.acquire(hit); // held while importing: the blocks after it must not evict it
        held.push(hit);
        continue;
      }
      const block = this.cache.allocate();
      if (!block) break;
      held.push(this.cache.commit(block, chain[i]));
      added++;
    }
    this.cache.release(held);
    if (this.groups) {
      this.groups.commit(req.id, chain, 0, full, full * this.cfg.blockSize);
      this.groups.releaseRequest(req.id);
    }
    return added;
  }

  /** Drop a request (client gone); its blocks are freed, cached ones stay cached. */
  abort(id: string): boolean {
    this.quietPlanned = 0;
    const req = this.byId.get(id);
    if (!req) return false;
    const removed = this.scheduler.remove(req);
    this.end(req);
    return removed;
  }

  hasWork(): boolean {
    return this.scheduler.running.length > 0 || this.scheduler.waiting.length > 0;
  }

  /**
   * Plan a quiet window: the passes that can run back to back from max(now, end of the previous
   * pass) which nothing outside the core could tell apart from `step`'s but by their durations and
   * their one token per request: only running decodes, no admission, preemption or rejection, no
   * block allocated (none evicted) or filled (no KV event), no first or last token. Their number
   * (0: the next pass is not quiet; at most QUIET_MAX) is returned and their ends are
   * `quietEnds[0..n)`; while nothing arrives they are a function of the state now (the decode
   * context grows by the batch per pass, the KV usage stays), so a driver can let them run without
   * a call per pass. Changes nothing: `runQuiet(k)` applies the first k; any other call drops the plan.
   */
  planQuiet(nowMs: number): number {
    this.quietPlanned = 0;
    const n = this.quietWindow();
    if (n === 0) return 0;
    const contents = this.contents;
    contents.decodes = this.quietBatch;
    contents.kvUsage = this.cache.activeBlocks / this.numGpuBlocks;
    const context = contents.decodeContextTokens;
    const ends = this.quietEndsMs;
    let at = Math.max(nowMs, this.clock);
    this.quietStart = at;
    for (let p = 0; p < n; p++) {
      // The same durations as `step`'s: the pass's decode context is the requests' KV before it.
      contents.decodeContextTokens = context + this.quietBatch * p;
      at += passMs(this.cfg.perfModel, contents, 0, this.knobs);
      ends[p] = at;
    }
    this.quietPlanned = n;
    return n;
  }

  /** The planned quiet passes' ends (ms; `planQuiet` says how many are valid). */
  get quietEnds(): Float64Array {
    return this.quietEndsMs;
  }

  /** When the planned window's first pass starts. */
  get quietStartMs(): number {
    return this.quietStart;
  }

  /** Tokens each planned quiet pass produces (one per running request). */
  get quietTokens(): number {
    return this.quietBatch;
  }

  /** Apply the first `passes` passes of the plan, as `step` would have: each request's KV and tokens (drawn in order), the clock. */
  runQuiet(passes: number): void {
    if (!(passes >= 1 && passes <= this.quietPlanned)) throw new RangeError(`no ${passes} quiet passes planned`);
    this.quietPlanned = 0;
    const running = this.scheduler.running;
    const vocab = this.vocab;
    for (let i = 0; i < running.length; i++) {
      const req = running[i];
      req.computed += passes;
      for (let p = 0; p < passes; p++) req.append(vocab[req.rng.nextInt(vocab.length)]);
    }
    this.clock = this.quietEndsMs[passes - 1];
  }

  /**
   * Quiet passes the state allows from here (0: the next pass is not quiet): only running decodes,
   * within the token budget, and for each request the passes before its next block (allocation),
   * its next full block (commit) and its last token (or a stop token it may meet). Leaves the
   * batch and its summed KV (the first pass's decode context) in `quietBatch` and `contents`.
   */
  private quietWindow(): number {
    const sched = this.scheduler;
    const running = sched.running;
    const batch = running.length;
    if (batch === 0 || sched.waiting.length > 0 || batch > this.cfg.maxNumBatchedTokens) return 0;
    const bs = this.blockSize;
    let n = QUIET_MAX;
    let context = 0;
    for (let i = 0; i < batch; i++) {
      const req = running[i];
      if (!req.decoding) return 0;
      const c = req.computed;
      const out = req.outputLen;
      // Pass p computes the KV of position c + p and samples output token out + p + 1.
      n = Math.min(n, req.blockCount * bs - c, req.maxTokens - out - 1);
      if (this.prefixCaching) n = Math.min(n, (req.committed + 1) * bs - c - 1);
      if (req.stop.size > 0) n = Math.min(n, req.minTokens - out - 1);
      if (n <= 0) return 0;
      context += c;
    }
    this.quietBatch = batch;
    this.contents.decodeContextTokens = context;
    return n;
  }

  /** Run one pass starting at max(now, end of the previous pass). Null when idle. */
  step(nowMs: number): StepOutput | null {
    this.quietPlanned = 0;
    if (!this.hasWork()) return null;
    const startMs = Math.max(nowMs, this.clock);
    const plan = this.scheduler.schedule();
    let prefillTokens = 0;
    let decodeRequests = 0;
    let decodeContextTokens = 0;
    // (Most passes of a fleet are decodes: no array for them.)
    let prefills: PrefillChunk[] = NO_PREFILLS;
    const work = plan.work;
    for (let i = 0; i < work.length; i++) {
      const w = work[i];
      // req.computed is still the KV before this pass: what the new tokens attend to.
      if (w.decode) {
        decodeRequests++;
        decodeContextTokens += w.req.computed;
      } else {
        prefillTokens += w.tokens;
        if (prefills === NO_PREFILLS) prefills = [];
        prefills.push({ newTokens: w.tokens, contextTokens: w.req.computed });
      }
    }
    const contents = this.contents;
    contents.prefills = prefills;
    contents.decodes = decodeRequests;
    contents.decodeContextTokens = decodeContextTokens;
    contents.kvUsage = this.cache.activeBlocks / this.numGpuBlocks;
    const duration = passMs(this.cfg.perfModel, contents, plan.loadedTokens, this.knobs);
    contents.prefills = NO_PREFILLS;
    const endMs = startMs + duration;
    this.clock = endMs;

    const tokens: TokenOutput[] = [];
    for (let i = 0; i < work.length; i++) {
      const w = work[i];
      const req = w.req;
      req.computed += w.tokens;
      this.commitFull(req);
      if (req.computed < req.length) continue;
      tokens.push(this.sample(req, endMs));
    }
    for (const req of plan.rejected) this.end(req);
    const out: StepOutput = {
      startMs,
      endMs,
      tokens,
      admitted: plan.admitted,
      preempted: plan.preempted.length === 0 ? NO_IDS : plan.preempted.map((r) => r.id),
      rejected: plan.rejected.length === 0 ? NO_IDS : plan.rejected.map((r) => r.id),
      events: this.drainEvents(),
      prefillTokens,
      loadedTokens: plan.loadedTokens,
      decodeRequests,
    };
    this.scheduler.endPass();
    return out;
  }

  /** Clear the prefix cache on both tiers (AllBlocksCleared). Running requests keep their KV and re-cache it. */
  resetPrefixCache(): readonly CoreKvEvent[] {
    this.quietPlanned = 0;
    this.cache.reset();
    this.groups?.reset();
    for (const req of this.scheduler.running) req.committed = 0;
    return this.drainEvents();
  }

  stats(): CoreStats {
    return {
      running: this.scheduler.running.length,
      waiting: this.scheduler.waiting.length,
      activeBlocks: this.cache.activeBlocks,
      cachedGpuBlocks: this.cache.cachedBlocks,
      cachedCpuBlocks: this.cache.host?.size ?? 0,
      cachedGroupBlocks: this.groups?.cachedBlocks ?? 0,
      kvUsage: this.cache.activeBlocks / this.cfg.numGpuBlocks,
      clockMs: this.clock,
    };
  }

  /** The true cached blocks per tier. */
  snapshot(): { gpu: CachedBlockView[]; cpu: BlockContent[] } {
    const gpu: CachedBlockView[] = [];
    for (const b of this.cache.gpuBlocks()) gpu.push({ ...plainContent(b.content as BlockContent), refs: b.refs });
    return { gpu, cpu: this.cache.hostContents().map(plainContent) };
  }

  /** A request leaves the engine (finished, aborted or rejected); its blocks were released. */
  private end(req: SimRequest): void {
    this.byId.delete(req.id);
    req.state = 'finished';
    req.releaseTokens(this.tokens);
  }

  private commitFull(req: SimRequest): void {
    if (!this.prefixCaching) return;
    const full = Math.floor(req.computed / this.blockSize);
    if (full <= req.committed) return;
    const chain = extendChain(this.chainCtx, req, full);
    for (let i = req.committed; i < full; i++) req.blocks[i] = this.cache.commit(req.blocks[i], chain[i]);
    this.groups?.commit(req.id, chain, req.committed, full, req.computed);
    req.committed = full;
  }

  /** Full-attention events, then the second group's (its parents are full-attention blocks too). */
  private drainEvents(): readonly CoreKvEvent[] {
    const events = this.cache.drainEvents();
    if (this.groups === null) return events;
    const more = this.groups.drainEvents();
    return more.length === 0 ? events : events.concat(more);
  }

  private sample(req: SimRequest, endMs: number): TokenOutput {
    const vocab = this.vocab;
    const token = vocab[req.rng.nextInt(vocab.length)];
    req.append(token);
    const index = req.outputLen - 1;
    if (req.firstTokenMs === null) req.firstTokenMs = endMs;
    let finishReason: FinishReason | null = null;
    let stopReason: number | null = null;
    if (req.stop.has(token) && req.outputLen >= req.minTokens) {
      finishReason = 'stop';
      stopReason = token;
    } else if (req.outputLen >= req.maxTokens) finishReason = 'length';
    if (finishReason) {
      this.scheduler.remove(req);
      this.end(req);
    }
    return { requestId: req.id, token, index, finishReason, stopReason, cachedTokens: req.cachedTokens ?? 0 };
  }
}

/** A content as plain fields, its tokens copied (a getter is no own property to spread). */
function plainContent(c: BlockContent): BlockContent {
  return {
    hash: c.hash,
    parent: c.parent,
    depth: c.depth,
    tokens: c.tokens.slice(),
    routerHash: c.routerHash,
    loraName: c.loraName,
    cacheSalt: c.cacheSalt,
    extraKeys: c.extraKeys,
  };
}
