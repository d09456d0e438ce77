// Selection and booking, shared by the proxy path and the decision API (one implementation).
// Pure: the caller supplies candidates, `now` and randomness; no sockets, no timers.
import { WorkerMap } from '../common/worker-map.js';
import { seqHashes } from '../hashing/index.js';
import type { NamespaceId } from '../indexer/namespace.js';
import type { CandidateOverlaps } from '../indexer/block-index.js';
import { hashView } from '../indexer/layout.js';
import type { TieredIndexer } from '../indexer/namespaces.js';
import {
  ActiveSequences,
  type Booking,
  HEAD_AHEAD_ATTENTION,
  HEAD_AHEAD_TOKENS,
  HEAD_ATTENTION,
  HEAD_CREATED_AT,
  HEAD_PREFILL_TOKENS,
  HEAD_QUEUED,
  HEAD_STRIDE,
  type HeldPrefixes,
  IDLE_LOAD,
  type Load,
} from './active-sequences.js';
import {
  attentionWork,
  COST_TERMS,
  type CostBreakdown,
  type CostInput,
  type CostModel,
  type CostWeights,
  cost,
  costTerms,
  credit,
  headProgress,
  type PrefillRate,
  type QueueHead,
  TERM_PREFILL_MS,
  TERM_QUEUE_MS,
} from './cost.js';
import { type Filtered, filterCandidates } from './filters.js';
import { type PolicyName, policySpec, readsIndex } from './policies/registry.js';
import { nameHash } from './policies/pickers.js';
import { PolicyStates } from './policies/state.js';
import type { PickLoads, PolicyContext, PolicySpec, RequestText } from './policies/types.js';
import { DEFAULT_RATE_PRIOR, PrefillRates, type RatePrior, type RateSample, validSample } from './rates.js';
import { holderWorthWaiting } from './hold.js';
import { speculate, withdrawSpeculation } from './speculation.js';
import type { EngineLoad } from '../engine-load/load-view.js';

export interface Candidate {
  instance: string;
  dpRank: number;
}

export interface BusyThresholds {
  /** A worker with more un-prefilled tokens in flight is busy. */
  maxActivePrefillTokens: number;
  /** A worker holding more KV blocks for in-flight requests is busy. */
  maxActiveBlocks: number;
}

export interface RouteInput {
  ns: NamespaceId;
  candidates: readonly Candidate[];
  /** Prompt tokens, or precomputed router seq hashes. */
  tokens?: ArrayLike<number>;
  seq?: BigUint64Array;
  /** Prompt length in tokens (defaults to tokens.length or seq.length x block size). */
  isl?: number;
  policy: PolicyName;
  weights: CostWeights;
  temperature: number;
  sessionKey?: string | null;
  target?: string | null;
  busy?: BusyThresholds | null;
  /** Candidates to skip (instance ids), e.g. after a failed attempt. */
  exclude?: ReadonlySet<string>;
  /** Prefill speed assumed for a worker before the router has learned its own. */
  ratePrior?: RatePrior;
  /**
   * Sibling co-location (kv/approx at temperature 0): candidates holding the same cached prefix as the
   * cheapest one and predicted within this fraction of its own prefill time of it are equals; the
   * request goes to the one its next blocks hash to (rendezvous), so requests sharing a new prefix
   * meet on one instance before any event confirms it. 0 disables.
   */
  prefixAffinity?: number;
  /** How many blocks past the cached prefix name the new prefix for co-location. */
  affinityBlocks?: number;
  /** Co-location's equals need only be within the slack, whatever cached prefix they credit. */
  affinityAny?: boolean;
  /**
   * Bounded load (kv/approx): a candidate whose in-flight requests would exceed this factor x the
   * mean keeps the request only if its cache saves at least half of the prefill elsewhere. 0 = off.
   */
  loadBound?: number;
  /** Bounded load judges an over-bound candidate by the prefix only it holds (beyond the next best candidate's). */
  loadBoundUnique?: boolean;
  /** kv: bounded load judges a request opening a session (its key not routed before) by the prefix only its pick holds. */
  loadBoundNewSession?: boolean;
  /** kv, time cost: weight of a candidate's own prefill added to its cost while every candidate has prefill queued. */
  recomputeWeightSaturated?: number;
  /**
   * Credit only the part of a GPU prefix that survives the prefill queued ahead on that instance
   * (its LRU order and size as the event stream shows them): a prefix about to be evicted is worth less.
   */
  evictionAware?: boolean;
  /** LoRA adapter the request names (null: the base model). */
  adapter?: string | null;
  /**
   * time model: penalty (ms) for a worker that has not had a request for the adapter booked within
   * `adapterWarmMs`: it may have to load the adapter into a GPU slot first (adapter affinity).
   */
  adapterLoadMs?: number;
  adapterWarmMs?: number;
  /**
   * The engines' own load (scraped), or null for none / a stale scrape. Requests an engine reports
   * beyond the router's bookings count as load: waiting ones as queued prefill (at the mean prompt
   * the router books), running ones as decoding requests, each with its weight.
   */
  engineLoad?: ((instance: string, dpRank: number) => EngineLoad | null) | null;
  engineWeights?: EngineLoadWeights;
  /** The request's text, for the policies that declare `needs.text`. */
  text?: RequestText | null;
  /**
   * Set by a caller that can hold the request while instances are busy (the capacity queue): kv and
   * approx (time model) then keep a busy holder of the prompt's prefix when waiting for it saves more
   * than it costs (hold.ts): the decision names it (`held`) and chooses nothing. Absent: busy
   * candidates are filtered out, as for a prefill leg.
   */
  hold?: boolean;
  /**
   * What the caller reads of the decision's scores: 'all' (the default), or 'decision': the chosen
   * candidate's alone (a caller that keeps no explanation or log of the others, as the fleet
   * simulator's router). The decision then carries only the chosen one's score in `candidates` when
   * the policy picks over the scorer's columns (PolicySpec.pickScores) and no filter removed a
   * candidate: a thousand candidates are then a thousand column entries, not score objects.
   * The chosen one is priced a second time after the pick, so `engineLoad` must answer the same
   * within one decision (the simulator's virtual clock does; the server's staleness check reads the
   * wall clock, which is why its proxy path keeps 'all').
   */
  scores?: 'all' | 'decision';
}

export interface EngineLoadWeights {
  waiting: number;
  running: number;
  /** Penalty (ms) at a full KV cache, ramping up from 80 % usage. */
  kvUsageMs: number;
}

export interface CandidateScore extends Candidate {
  device: number;
  host: number;
  disk: number;
  shared: number;
  newBlocks: number;
  creditedBlocks: number;
  prefillBlocks: number;
  decodeBlocks: number;
  queueMs: number;
  prefillMs: number;
  ttftMs: number;
  interferenceMs: number;
  /** Share of the prefill of the oldest booking still queued there predicted computed (cost.ts, head_progress; absent: 0). */
  headDone?: number;
  /** The worker's prefill speed the prediction used (learned, or the prior). */
  tokensPerS: number;
  /** Longest prefix the index holds for it on any tier, in blocks, credited or not (what the engine should report). */
  indexedBlocks: number;
  /**
   * Hybrid instances: the full-attention device prefix before the sliding-window / Mamba groups
   * ended the hit earlier (0 when they did not). Co-location keys on it: a prefix every instance
   * holds is not a new one to meet on, whether or not its end is reusable.
   */
  hybridPrefix?: number;
  /** Its predictions failed the closed-loop check: its index entries earn no credit. */
  distrusted: boolean;
  /** Adapter load time assumed for this worker (0: it served the adapter recently, or no adapter). */
  adapterLoadMs: number;
  /** Requests the engine reported beyond the router's bookings (0 without a fresh scrape). */
  unbookedRequests: number;
  /** The engine's scraped gauges (null: not scraped, or the scrape is stale). */
  engine: EngineLoad | null;
  cost: number;
  load: Load;
  busy: boolean;
}

/** The candidates over a busy threshold that the request may go to (not excluded). */
function busyOf(candidates: readonly CandidateScore[], input: Pick<RouteInput, 'exclude'>): CandidateScore[] {
  return candidates.filter((c) => c.busy && !input.exclude?.has(c.instance));
}

/** A candidate's cached prefix per tier, in tokens (what explanation headers and APIs report). */
export function overlapTokens(
  c: Pick<CandidateScore, 'device' | 'host' | 'disk' | 'shared'>,
  blockSize: number,
): { gpu: number; cpu: number; disk: number; shared: number } {
  return { gpu: c.device * blockSize, cpu: c.host * blockSize, disk: c.disk * blockSize, shared: c.shared * blockSize };
}

/**
 * A copy of a candidate's score with another cost. A spread would not do: the scorer's scores compute
 * part of their breakdown when read (`Score`), and a spread copies only what they keep.
 */
export function withCost(c: CandidateScore, cost: number): CandidateScore {
  return c instanceof Score ? c.withCost(cost) : Object.assign({}, c, { cost });
}

/** `held`: a busy candidate holding the prompt's prefix is worth waiting for (RouteInput.hold). */
export type NoRouteReason = 'no_candidates' | 'all_busy' | 'held' | 'unknown_target';

export interface Decision {
  chosen: CandidateScore | null;
  /** The LoRA adapter routed for (booking records its use on the chosen worker). */
  adapter: string | null;
  reason: NoRouteReason | null;
  policy: PolicyName;
  /** The candidates' scores, in the input's order; only the chosen one's when RouteInput.scores is 'decision' and nothing was filtered. */
  candidates: CandidateScore[];
  /** How many candidates were scored (the input's). */
  scored: number;
  /** Candidates the filter step removed, and which filter did (in the order applied). */
  filtered: Filtered[];
  /** Reason `held` (RouteInput.hold): the busy candidate holding the prompt's prefix that the request waits for. */
  held: CandidateScore | null;
  /** The steps that made the decision: the scorer (cost model) that ranked the candidates and the policy's pick step. */
  steps: { scorer: CostModel; picker: string };
  seq: BigUint64Array;
  isl: number;
  blockSize: number;
  /** What the policy's pick left for its `booked` hook. */
  memo: unknown;
}

/**
 * What a request keeps of its decision while it runs: its choice and what the closed loop and the
 * response headers read. Not the other candidates' scores: at a thousand instances those are a
 * thousand objects (and the queue heads' bookings they hold) per request in flight.
 */
export type KeptDecision = Pick<Decision, 'chosen' | 'policy' | 'isl' | 'blockSize'>;

export function keptOf(d: Decision): KeptDecision {
  return { chosen: d.chosen, policy: d.policy, isl: d.isl, blockSize: d.blockSize };
}

export interface BookOptions {
  requestId: string;
  now: number;
  /** Speculative insert of the request's blocks on the chosen instance (ms; 0 = none). */
  speculativeTtlMs: number;
  /** Prompt tokens the instance computes itself, when not what the decision predicts (a decode leg whose prompt was prefilled elsewhere). */
  prefillTokens?: number;
}

/** Observers of booking changes (replica sync, decision logs). Called synchronously, after the change. */
export interface SchedulerHooks {
  /** `touchedBlocks`: the cached GPU prefix the booking touched in the index's LRU model (replicas repeat it). */
  booked?(b: Booking, ns: NamespaceId, speculativeTtlMs: number, now: number, touchedBlocks: number): void;
  prefillCompleted?(id: string): void;
  /**
   * `rate`: the prefill-rate sample its first token gave (what replicas learn from too); `failed`:
   * its attempt failed and its speculative insert was withdrawn (replicas withdraw theirs).
   */
  freed?(id: string, rate: RateSample | undefined, failed: boolean): void;
}

/** What every candidate's cost of one decision shares. */
interface Pricing {
  isl: number;
  blockSize: number;
  weights: CostWeights;
  /** When it was decided (a queue head's time since booking is measured to it). */
  now: number;
}

/** The cost model's view of a worker's queue head at `now` (one definition: the scorer's columns hold the same fields). */
function queueHeadOf(head: Booking, now: number): QueueHead {
  return {
    elapsedMs: now - head.createdAt,
    aheadTokens: head.aheadTokens,
    aheadAttention: head.aheadAttention,
    prefillTokens: head.prefillTokens,
    attention: attentionWork(head.prefillTokens, head.contextTokens),
  };
}

/** A cost input to fill (a score's getters, each their own: the scorer prices from columns, price()). */
const blankCostInput = (): CostInput => ({
  device: 0,
  host: 0,
  disk: 0,
  shared: 0,
  activePrefillTokens: 0,
  activeAttention: 0,
  activeBlocks: 0,
  decodingRequests: 0,
  decodingContext: 0,
  head: null,
  newBlocks: 0,
});

/**
 * The cost model's input for a candidate, into `c` (a score's derived fields, from its Load). The
 * load's terms in Load's order. price() makes the same sums over the load columns in place (no
 * object per candidate): cost-terms.test.ts holds the two to the bit.
 */
function costInput(
  c: CostInput,
  device: number,
  host: number,
  disk: number,
  shared: number,
  prefillTokens: number,
  attention: number,
  blocks: number,
  decoding: number,
  decodingContext: number,
  extra: UnbookedLoad,
  head: QueueHead | null,
  newBlocks: number,
): CostInput {
  c.device = device;
  c.host = host;
  c.disk = disk;
  c.shared = shared;
  c.activePrefillTokens = prefillTokens + extra.prefill;
  c.activeAttention = attention + extra.attention;
  c.activeBlocks = blocks;
  c.decodingRequests = decoding + extra.decoding;
  c.decodingContext = decodingContext;
  c.head = head;
  c.newBlocks = newBlocks;
  return c;
}

/**
 * A candidate's score as the scorer builds it, 1,024 times a decision at fleet scale: one class (one
 * hidden class, every field set once, in one order). It keeps what the pick reads (cost, credited
 * blocks, prefill time) and the cost model's inputs; the rest of the breakdown, which only
 * explanations, logs and the booking read, is computed again from them on demand (the same pure
 * function of the same values: the same numbers). Each double kept in a field is a heap box in V8.
 */
class Score implements CandidateScore {
  declare readonly instance: string;
  declare readonly dpRank: number;
  declare readonly device: number;
  declare readonly host: number;
  declare readonly disk: number;
  declare readonly shared: number;
  declare readonly newBlocks: number;
  declare readonly indexedBlocks: number;
  declare readonly hybridPrefix: number;
  declare readonly distrusted: boolean;
  declare readonly adapterLoadMs: number;
  declare readonly unbookedRequests: number;
  declare readonly engine: EngineLoad | null;
  declare readonly load: Load;
  declare readonly busy: boolean;
  declare readonly creditedBlocks: number;
  declare readonly prefillMs: number;
  declare readonly cost: number;
  declare private readonly extra: UnbookedLoad;
  /** The worker's queue head when decided (a booking never changes), or null: none queued. */
  declare private readonly head: Booking | null;
  declare private readonly rate: PrefillRate;
  declare private readonly pricing: Pricing;
  constructor(
    instance: string,
    dpRank: number,
    device: number,
    host: number,
    disk: number,
    shared: number,
    newBlocks: number,
    indexedBlocks: number,
    hybridPrefix: number,
    distrusted: boolean,
    adapterLoadMs: number,
    unbookedRequests: number,
    engine: EngineLoad | null,
    load: Load,
    busy: boolean,
    creditedBlocks: number,
    prefillMs: number,
    cost: number,
    extra: UnbookedLoad,
    head: Booking | null,
    rate: PrefillRate,
    pricing: Pricing,
  ) {
    this.instance = instance;
    this.dpRank = dpRank;
    this.device = device;
    this.host = host;
    this.disk = disk;
    this.shared = shared;
    this.newBlocks = newBlocks;
    this.indexedBlocks = indexedBlocks;
    this.hybridPrefix = hybridPrefix;
    this.distrusted = distrusted;
    this.adapterLoadMs = adapterLoadMs;
    this.unbookedRequests = unbookedRequests;
    this.engine = engine;
    this.load = load;
    this.busy = busy;
    this.creditedBlocks = creditedBlocks;
    this.prefillMs = prefillMs;
    this.cost = cost;
    this.extra = extra;
    this.head = head;
    this.rate = rate;
    this.pricing = pricing;
  }
  /** The same score with another cost (a policy re-pricing candidates on copies, e.g. kv at saturation). */
  withCost(cost: number): Score {
    return new Score(
      this.instance,
      this.dpRank,
      this.device,
      this.host,
      this.disk,
      this.shared,
      this.newBlocks,
      this.indexedBlocks,
      this.hybridPrefix,
      this.distrusted,
      this.adapterLoadMs,
      this.unbookedRequests,
      this.engine,
      this.load,
      this.busy,
      this.creditedBlocks,
      this.prefillMs,
      cost,
      this.extra,
      this.head,
      this.rate,
      this.pricing,
    );
  }
  /** The cost model's breakdown again (what the scorer computed). */
  private breakdown(): CostBreakdown {
    const p = this.pricing;
    const l = this.load;
    const input = costInput(
      blankCostInput(),
      this.device,
      this.host,
      this.disk,
      this.shared,
      l.activePrefillTokens,
      l.activeAttention,
      l.activeBlocks,
      l.decodingRequests,
      l.decodingContext,
      this.extra,
      this.head === null ? null : queueHeadOf(this.head, p.now),
      this.newBlocks,
    );
    return cost(input, p.isl, p.blockSize, p.weights, this.rate);
  }
  get prefillBlocks(): number {
    return this.breakdown().prefillBlocks;
  }
  get decodeBlocks(): number {
    return this.breakdown().decodeBlocks;
  }
  get queueMs(): number {
    return this.breakdown().queueMs;
  }
  get ttftMs(): number {
    return this.breakdown().ttftMs + this.adapterLoadMs;
  }
  get interferenceMs(): number {
    return this.breakdown().interferenceMs;
  }
  get headDone(): number {
    return this.breakdown().headDone;
  }
  get tokensPerS(): number {
    return 1000 / this.rate.msPerToken;
  }
}

/** What score() computes once per request and every candidate's score reads. */
interface ScoreContext {
  input: RouteInput;
  seq: BigUint64Array;
  isl: number;
  now: number;
  peer: boolean;
  weights: CostWeights;
  /** The candidates' worker ids for the load columns (ActiveSequences.columns; null: nothing in flight anywhere). */
  ids: Int32Array | null;
  /** The candidates' rate fit ids (PrefillRates.idsOf). */
  fitIds: Int32Array;
  allocations: Int32Array | undefined;
  overlap: CandidateOverlaps | null;
  /** Hybrid instances: the device overlaps before the groups clamped them (null: nothing clamped). */
  unclamped: Int32Array | null;
  shared: number;
  poolRate: PrefillRate;
  /** The prompt's prefixes the workers' in-flight requests hold, by worker id (null: nothing in flight). */
  held: HeldPrefixes | null;
  pricing: Pricing;
}

/** Load an engine reports beyond the router's bookings, as the cost counts it. */
interface UnbookedLoad {
  unbooked: number;
  prefill: number;
  attention: number;
  decoding: number;
  kvPenaltyMs: number;
}

const NO_EXTRA: UnbookedLoad = Object.freeze({ unbooked: 0, prefill: 0, attention: 0, decoding: 0, kvPenaltyMs: 0 });

/** One candidate's terms as price() leaves them for its score (the worker's load id: ActiveSequences.columns). */
interface PricedTerms {
  id: number;
  device: number;
  host: number;
  disk: number;
  shared: number;
  newBlocks: number;
  indexedBlocks: number;
  distrusted: boolean;
  adapterLoadMs: number;
  seen: EngineLoad | null;
  extra: UnbookedLoad;
  head: Booking | null;
  rate: PrefillRate;
}

/** PricedTerms' rate before any candidate is priced (never read). */
const DEFAULT_PRICED: PrefillRate = Object.freeze({
  msPerToken: 0,
  overheadMs: 0,
  msPerDecoding: 0,
  msPerAttention: 0,
  msPerDecodingContext: 0,
});

export class Scheduler {
  readonly active = new ActiveSequences();
  /** Prefill speed per worker, learned from first-token times of the bookings made here. */
  readonly rates = new PrefillRates();
  /**
   * Instances whose cache predictions the closed-loop check found wrong: they compete on load
   * alone until their (still computed) predictions agree with the engine again.
   */
  readonly distrusted = new Set<string>();
  /** Mean prefill tokens per booked request (what an unbooked waiting request is assumed to cost). */
  private meanPrefillTokens = 1024;
  /** Mean attention work per booked request (the same unbooked request's context term). */
  private meanAttention = attentionWork(1024, 0);
  /** Per worker, when a request for each LoRA adapter was last booked there (adapter affinity). */
  private readonly adapterUse = new WorkerMap<Map<string, number>>();
  private readonly turns = new Map<string, number>();
  /** State of the policies that remember across requests (peers' approximate indexes), per pool. */
  private readonly policyStates = new PolicyStates();
  private readonly hooks: SchedulerHooks[] = [];
  /** price()'s cost terms of the candidate it priced last (costTerms' `out`, read right after each call). */
  private readonly termsOut = new Float64Array(COST_TERMS);
  /**
   * The last scored list's in-flight requests and queued prefill per candidate position (the load's),
   * then compacted to the eligible candidates' for the pick (PickLoads; read within decide only).
   */
  private pickRequests = new Float64Array(0);
  private pickPrefill = new Float64Array(0);
  /** The last scored list's cost terms by position (PickLoads), and whether each is busy (1). */
  private pickCost = new Float64Array(0);
  private pickCredited = new Float64Array(0);
  private pickPrefillMs = new Float64Array(0);
  private pickQueueMs = new Float64Array(0);
  private pickHybrid = new Float64Array(0);
  private pickBusy = new Uint8Array(0);
  /** The index's answer for the candidates of the decision being made (overlapsFor's `into`: device, host, disk, surviving). */
  private overlapCols = new Int32Array(0);
  /** Whether price() found a candidate busy since this was last cleared. */
  private busySeen = false;
  /** price()'s unbooked load of the candidate it priced last (read within price, copied by its score). */
  private readonly extraIn: UnbookedLoad = { unbooked: 0, prefill: 0, attention: 0, decoding: 0, kvPenaltyMs: 0 };
  /** price()'s terms of the candidate it priced last, beyond the columns (what its score object keeps). */
  private readonly terms: PricedTerms = {
    id: -1,
    device: 0,
    host: 0,
    disk: 0,
    shared: 0,
    newBlocks: 0,
    indexedBlocks: 0,
    distrusted: false,
    adapterLoadMs: 0,
    seen: null,
    extra: NO_EXTRA,
    head: null,
    rate: DEFAULT_PRICED,
  };
  /** The last scored list's epoch (ActiveSequences.listEpoch: the same while the list is; -1: not resolved). */
  private scoredList = -1;
  /** Name hashes by position of the list of epoch `namesFor` (PickLoads.names), and their eligible ones. */
  private namesFor = -1;
  private listNames = new Uint32Array(0);
  private pickNames = new Uint32Array(0);

  addHooks(h: SchedulerHooks): void {
    this.hooks.push(h);
  }

  constructor(
    private readonly indexer: TieredIndexer,
    private readonly rand: () => number = Math.random,
  ) {}

  /**
   * Every candidate's overlap per tier, load and cost for a prompt; changes nothing. Computes only
   * what the policy declares it reads (PolicySpec.needs): the index walk runs for a policy that
   * reads the index or the router's predictions, never for the others (round-robin, least-loaded,
   * session, ...), whose candidates then carry no overlap. Beyond the walk, one pass over the prompt
   * for the blocks in flight (ActiveSequences.heldPrefixes), then O(1) per candidate. The one
   * per-candidate walk of the prompt left is the index's eviction judgement of a loaded candidate
   * whose GPU cache has evicted (up to its first block that would go, O(1) a block).
   */
  score(input: RouteInput, now: number): { candidates: CandidateScore[]; seq: BigUint64Array; isl: number } {
    const x = this.scoreContext(input, now);
    return { candidates: this.scoreAll(x), seq: x.seq, isl: x.isl };
  }

  /** Every candidate's score, in order. */
  private scoreAll(x: ScoreContext): CandidateScore[] {
    const n = x.input.candidates.length;
    const candidates: CandidateScore[] = new Array(n);
    for (let k = 0; k < n; k++) candidates[k] = this.scoreCandidate(x, k);
    return candidates;
  }

  /**
   * What every candidate's score of a request shares (the index walk, the blocks in flight, the
   * pool's rate), with the columns sized for its candidates.
   */
  private scoreContext(input: RouteInput, now: number): ScoreContext {
    const bs = input.ns.blockSize;
    const ns = this.indexer.find(input.ns);
    const space = ns ? ns.space : this.indexer.spaceFor(input.ns);
    const seq = input.seq ?? seqHashes(input.tokens ?? [], bs, space);
    const isl = input.isl ?? input.tokens?.length ?? seq.length * bs;
    const spec = policySpec(input.policy);
    const readIndex = ns !== undefined && seq.length > 0 && readsIndex(spec);
    // A peer reads the index as it stands (no eviction-aware credit, distrust or engine blend, which
    // are kvrouter's), and its own cost weights (Dynamo's blocks) replace routing's.
    const peer = spec.peer !== undefined;
    const { ids, allocations } = this.loadsOf(input, readIndex && input.evictionAware === true && !peer);
    // Overlaps in the candidates' order: no result object or key string per candidate.
    // (Into the scheduler's buffer: the overlaps are read within this decision only.)
    const n = input.candidates.length;
    if (readIndex && this.overlapCols.length < 4 * n) this.overlapCols = new Int32Array(4 * n);
    const overlap = readIndex ? ns!.index.overlapsFor(seq, now, input.candidates, allocations, this.overlapCols) : null;
    // Hybrid instances: a hit ends where every sliding-window / Mamba group accepts it (the engine
    // reuses at most the prompt less its last token). Nothing to do for single-group fleets.
    let unclamped: Int32Array | null = null;
    if (overlap && ns!.groups !== null && !ns!.groups.empty) {
      unclamped = overlap.device.slice();
      ns!.groups.clampOverlaps(seq, Math.floor(Math.max(0, isl - 1) / bs), input.candidates, overlap);
    }
    const weights = spec.cost ? { ...input.weights, ...spec.cost } : input.weights;
    const ctx: ScoreContext = {
      input,
      seq,
      isl,
      now,
      peer,
      weights,
      ids,
      fitIds: this.rates.idsOf(input.candidates),
      allocations,
      overlap,
      unclamped,
      shared: overlap?.shared ?? 0,
      // The pool's rate once per request; each candidate's own fit shrinks toward it.
      poolRate: this.rates.poolRate(input.ratePrior ?? DEFAULT_RATE_PRIOR, input.ns.model),
      // One pass over the prompt for every worker's in-flight blocks, not a lookup per candidate
      // (price() asks for the held prefixes of the workers with requests in flight alone).
      held: ids !== null && seq.length > 0 ? this.active.heldPrefixes(seq, hashView(seq)) : null,
      pricing: { isl, blockSize: bs, weights, now },
    };
    if (this.pickRequests.length < n) {
      this.pickRequests = new Float64Array(n);
      this.pickPrefill = new Float64Array(n);
      this.pickCost = new Float64Array(n);
      this.pickCredited = new Float64Array(n);
      this.pickPrefillMs = new Float64Array(n);
      this.pickQueueMs = new Float64Array(n);
      this.pickHybrid = new Float64Array(n);
      this.pickBusy = new Uint8Array(n);
    }
    this.scoredList = ids === null ? -1 : this.active.listEpoch;
    return ctx;
  }

  /**
   * The candidates' worker ids for their loads (null: nothing in flight anywhere, every load is idle)
   * and, for eviction awareness, the blocks the prefill queued on each trusted candidate will allocate.
   */
  private loadsOf(input: RouteInput, evictionAware: boolean): { ids: Int32Array | null; allocations?: Int32Array } {
    if (this.active.size === 0) return { ids: null };
    const ids = this.active.idsOf(input.candidates);
    if (!evictionAware) return { ids };
    const prefill = this.active.columns.prefillTokens;
    let allocations: Int32Array | undefined;
    for (let k = 0; k < ids.length; k++) {
      const id = ids[k];
      if (id < 0 || !(prefill[id] > 0)) continue;
      if (this.distrusted.size > 0 && this.distrusted.has(input.candidates[k].instance)) continue;
      allocations ??= new Int32Array(ids.length);
      allocations[k] = Math.ceil(prefill[id] / input.ns.blockSize);
    }
    return { ids, allocations };
  }

  /**
   * Candidates [from, to)'s score terms, into the columns at their positions (what the pick reads:
   * PickLoads), and the last one's into the scratch fields scoreCandidate makes its score of. One
   * pass over typed columns (loads by worker id, rates by fit id, the index's overlaps): the cost
   * model's arithmetic over plain numbers (costTerms), no object or call with object arguments per
   * candidate, for the 1,024 candidates of every request.
   */
  private price(x: ScoreContext, from: number, to: number): void {
    const { input, overlap, shared, seq, weights, ids, held, allocations, unclamped, fitIds, poolRate, isl } = x;
    const cols = this.active.columns;
    // (Every column read into a local: nothing the loop calls reallocates them. The rate columns grow
    // when a fit is priced, inside rateById: read through their object.)
    const { requests: requestsCol, prefillTokens: prefillCol, blocks: blocksCol, head: headCol } = cols;
    const { attention: attentionCol, decoding: decodingCol, decodingContext: contextCol } = cols;
    const { pickRequests, pickPrefill, pickCost, pickCredited, pickPrefillMs, pickQueueMs, pickHybrid, pickBusy } =
      this;
    const deviceCol = overlap ? overlap.device : null;
    const hostCol = overlap ? overlap.host : null;
    const diskCol = overlap ? overlap.disk : null;
    const rateCols = this.rates.columns;
    const candidates = input.candidates;
    const blockSize = input.ns.blockSize;
    const medium = weights.medium;
    const timeModel = weights.model === 'time';
    const busy = input.busy;
    // (A peer never distrusts; with nobody distrusted there is no lookup per candidate.)
    const judgeTrust = !x.peer && this.distrusted.size > 0;
    const engineLoad = input.engineLoad;
    const penalised = input.adapter && input.adapterLoadMs;
    const out = this.termsOut;
    const hops = seq.length;
    for (let k = from; k < to; k++) {
      const id = ids === null ? -1 : ids[k];
      // The load's terms from the columns (an idle worker's are 0, as IDLE_LOAD's); its Load object is
      // only kept (by the score), not read here.
      const requests = id < 0 ? 0 : requestsCol[id];
      const prefill = id < 0 ? 0 : prefillCol[id];
      const blocks = id < 0 ? 0 : blocksCol[id];
      // (What the pick reads of the load, by position: PickLoads.)
      pickRequests[k] = requests;
      pickPrefill[k] = prefill;
      const distrusted = judgeTrust && this.distrusted.has(candidates[k].instance);
      const indexedBlocks = Math.max(diskCol !== null ? diskCol[k] : 0, shared);
      let device = distrusted || deviceCol === null ? 0 : deviceCol[k];
      let host = distrusted || hostCol === null ? 0 : hostCol[k];
      let disk = distrusted || diskCol === null ? 0 : diskCol[k];
      if (device > 0 && allocations && allocations[k] > 0) {
        const indexed = device;
        device = overlap!.surviving[k];
        // Tiers are cumulative: blocks evicted from GPU are on no other tier unless the index says
        // a lower tier extends the prefix (where an offloading engine puts what leaves the GPU).
        if (host === indexed) host = device;
        if (disk === indexed) disk = device;
      }
      // A worker without requests in flight holds no blocks for them (and has no entry to look up).
      const newBlocks = hops === 0 ? 0 : id < 0 || requests === 0 || !held ? hops : hops - held.ofId(id);
      // The worker's rate (the object the score keeps) and its terms: the pool's, or its fit's columns.
      const fit = fitIds[k];
      const rate = this.rates.rateById(fit, poolRate);
      const pooled = rate === poolRate;
      const msPerToken = pooled ? rate.msPerToken : rateCols.msPerToken[fit];
      const msPerAttention = pooled ? rate.msPerAttention : rateCols.msPerAttention[fit];
      let seen: EngineLoad | null = null;
      let extra = NO_EXTRA;
      if (engineLoad) {
        const c = candidates[k];
        seen = engineLoad(c.instance, c.dpRank) ?? null;
        if (seen && input.engineWeights && !x.peer)
          extra = this.unbookedLoad(seen, requests, input.engineWeights, this.extraIn);
      }
      const adapterLoadMs = penalised
        ? this.adapterPenalty(candidates[k], input.adapter!, input.adapterLoadMs!, input.adapterWarmMs ?? 0, x.now)
        : 0;
      const creditedShared = distrusted ? 0 : shared;
      // The queue head's fields from its row (queueHeadOf's, read in place; its booking only for the score).
      const ho = id * HEAD_STRIDE;
      const queued = prefill > 0 && headCol[ho + HEAD_QUEUED] === 1;
      const progressMs = !queued
        ? 0
        : headProgress(
            x.now - headCol[ho + HEAD_CREATED_AT],
            headCol[ho + HEAD_AHEAD_TOKENS],
            headCol[ho + HEAD_AHEAD_ATTENTION],
            headCol[ho + HEAD_PREFILL_TOKENS],
            headCol[ho + HEAD_ATTENTION],
            msPerToken,
            msPerAttention,
          );
      // (costInput's sums: the load's terms plus the engine's unbooked load.)
      const credited = credit(device, host, disk, creditedShared, medium);
      const priced = costTerms(
        credited,
        prefill + extra.prefill,
        (id < 0 ? 0 : attentionCol[id]) + extra.attention,
        blocks,
        (id < 0 ? 0 : decodingCol[id]) + extra.decoding,
        id < 0 ? 0 : contextCol[id],
        progressMs,
        newBlocks,
        isl,
        blockSize,
        weights,
        msPerToken,
        pooled ? rate.overheadMs : rateCols.overheadMs[fit],
        pooled ? rate.msPerDecoding : rateCols.msPerDecoding[fit],
        msPerAttention,
        pooled ? rate.msPerDecodingContext : rateCols.msPerDecodingContext[fit],
        out,
      );
      const hybrid = unclamped !== null && !distrusted && unclamped[k] > deviceCol![k] ? unclamped[k] : 0;
      // Only the time model's costs are milliseconds: the penalties join them there.
      const value = timeModel ? priced + adapterLoadMs + extra.kvPenaltyMs : priced;
      const isBusy = busy ? prefill > busy.maxActivePrefillTokens || blocks > busy.maxActiveBlocks : false;
      pickCost[k] = value;
      pickCredited[k] = credited;
      pickPrefillMs[k] = out[TERM_PREFILL_MS];
      pickQueueMs[k] = out[TERM_QUEUE_MS];
      pickHybrid[k] = hybrid;
      pickBusy[k] = isBusy ? 1 : 0;
      if (isBusy) this.busySeen = true;
      if (k !== to - 1) continue;
      const t = this.terms;
      t.id = id;
      t.device = device;
      t.host = host;
      t.disk = disk;
      t.shared = creditedShared;
      t.newBlocks = newBlocks;
      t.indexedBlocks = indexedBlocks;
      t.distrusted = distrusted;
      t.adapterLoadMs = adapterLoadMs;
      t.seen = seen;
      t.extra = extra;
      t.head = queued ? (cols.heads[id] ?? null) : null;
      t.rate = rate;
    }
  }

  /** One candidate's score (price's terms as an object: what a decision carries). */
  private scoreCandidate(x: ScoreContext, k: number): CandidateScore {
    this.price(x, k, k + 1);
    const c = x.input.candidates[k];
    const t = this.terms;
    // (price() leaves the unbooked load in scratch: the score keeps a copy.)
    const e = t.extra;
    const extra =
      e === NO_EXTRA
        ? e
        : {
            unbooked: e.unbooked,
            prefill: e.prefill,
            attention: e.attention,
            decoding: e.decoding,
            kvPenaltyMs: e.kvPenaltyMs,
          };
    return new Score(
      c.instance,
      c.dpRank,
      t.device,
      t.host,
      t.disk,
      t.shared,
      t.newBlocks,
      t.indexedBlocks,
      this.pickHybrid[k],
      t.distrusted,
      t.adapterLoadMs,
      extra.unbooked,
      t.seen,
      this.active.columns.loadOf(t.id),
      this.pickBusy[k] === 1,
      this.pickCredited[k],
      this.pickPrefillMs[k],
      this.pickCost[k],
      extra,
      t.head,
      t.rate,
      x.pricing,
    );
  }

  /** Load the engine reports beyond what the router booked there. */
  private unbookedLoad(
    seen: EngineLoad,
    activeRequests: number,
    ew: EngineLoadWeights,
    into: UnbookedLoad,
  ): UnbookedLoad {
    // (kvUsage is 0..1 by the metric's definition; a percentage from a misconfigured exporter is clamped.)
    const unbooked = Math.max(0, seen.running + seen.waiting - activeRequests);
    const waiting = Math.min(unbooked, seen.waiting);
    into.unbooked = unbooked;
    into.prefill = ew.waiting * waiting * this.meanPrefillTokens;
    into.attention = ew.waiting * waiting * this.meanAttention;
    into.decoding = ew.running * (unbooked - waiting);
    into.kvPenaltyMs =
      seen.kvUsage !== null && ew.kvUsageMs > 0
        ? ew.kvUsageMs * Math.max(0, (Math.min(1, seen.kvUsage) - 0.8) / 0.2)
        : 0;
    return into;
  }

  /** Choose a candidate (no booking). */
  decide(input: RouteInput, now: number): Decision {
    const x = this.scoreContext(input, now);
    const { seq, isl } = x;
    const n = input.candidates.length;
    // A literal per outcome, not a spread of shared fields plus these two: adding keys after a spread
    // is V8's slow path (~1 us per decision on Node 20).
    const spec = policySpec(input.policy);
    const filtered: Filtered[] = [];
    const steps = { scorer: input.weights.model, picker: spec.pick.name };
    let candidates: CandidateScore[] = [];
    const decision = (
      chosen: CandidateScore | null,
      reason: NoRouteReason | null,
      memo: unknown = null,
      held: CandidateScore | null = null,
    ): Decision => ({
      chosen,
      reason,
      policy: input.policy,
      candidates,
      scored: n,
      filtered,
      held,
      steps,
      seq,
      isl,
      blockSize: input.ns.blockSize,
      adapter: input.adapter ?? null,
      memo,
    });
    // The caller reads only the chosen candidate's score, and the policy's pick only the columns:
    // no score object for the others (when no filter removes one: else as below).
    const pickScores = input.scores === 'decision' ? spec.pickScores : undefined;
    const fast = pickScores !== undefined && n > 0 && !(input.exclude && input.exclude.size > 0);
    // (A busy candidate, for a policy that filters them: every score is made after all, as below.)
    if (fast) {
      this.busySeen = false;
      this.price(x, 0, n);
    }
    if (fast && !(spec.busyFilter && this.busySeen)) {
      const ctx = this.pickContext(input, spec, x, now);
      const idx = pickScores(this.columnsOf(input.candidates), ctx);
      if (idx < 0) {
        // (Nothing chosen: the caller may read them all, e.g. for one with room: hold.ts waitOn.)
        candidates = this.scoreAll(x);
        return decision(null, spec.needs.target ? 'unknown_target' : 'no_candidates');
      }
      // (Priced again into its score object: the same pure function of the same state, so the same terms.)
      const chosen = this.scoreCandidate(x, idx);
      candidates = [chosen];
      return decision(chosen, null, ctx.memo);
    }
    candidates = this.scoreAll(x);
    const eligible = filterCandidates(candidates, input, spec, filtered);
    // The hold (kv, approx on the time model): busy holders of the prefix stay in the judgement.
    const hold =
      input.hold === true &&
      !spec.peer &&
      readsIndex(spec) &&
      input.weights.model === 'time' &&
      eligible.length < candidates.length;
    if (eligible.length === 0) {
      if (candidates.length === 0 || filtered.every((f) => f.filter === 'excluded'))
        return decision(null, 'no_candidates');
      return decision(null, 'all_busy');
    }
    const ctx = this.pickContext(input, spec, x, now);
    ctx.loads = this.pickLoads(candidates, eligible);
    const idx = spec.pick(eligible, ctx);
    if (idx < 0) return decision(null, spec.needs.target ? 'unknown_target' : 'no_candidates');
    if (hold) {
      const h = holderWorthWaiting(
        candidates,
        busyOf(candidates, input),
        eligible[idx],
        input.recomputeWeightSaturated ?? 0,
      );
      if (h) return decision(null, 'held', null, h);
    }
    return decision(eligible[idx], null, ctx.memo);
  }

  /** The pick's context for a decision (its loads: the caller's). */
  private pickContext(input: RouteInput, spec: PolicySpec, x: ScoreContext, now: number): PolicyContext {
    const poolKey = input.ns.model;
    return {
      temperature: input.temperature,
      rand: this.rand,
      nextTurn: () => {
        const t = this.turns.get(poolKey) ?? 0;
        this.turns.set(poolKey, t + 1);
        return t;
      },
      sessionKey: input.sessionKey ?? null,
      target: input.target ?? null,
      prefixAffinity: input.prefixAffinity ?? 0,
      affinityBlocks: input.affinityBlocks ?? 4,
      affinityAny: input.affinityAny ?? false,
      loadBound: input.loadBound ?? 0,
      loadBoundUnique: input.loadBoundUnique ?? false,
      loadBoundNewSession: input.loadBoundNewSession ?? false,
      recomputeWeightSaturated: input.recomputeWeightSaturated ?? 0,
      seq: x.seq,
      tokens: input.tokens ?? null,
      isl: x.isl,
      ns: input.ns,
      text: spec.needs.text ? (input.text ?? null) : null,
      now,
      state: this.policyStates.of(poolKey, spec),
      memo: null as unknown,
      loads: null,
    };
  }

  /** The last scored list's name hashes by position (PickLoads.names; null: none while nothing is in flight). */
  private namesOf(candidates: readonly Candidate[]): Uint32Array | null {
    // The list's name hashes, once per list (its epoch stands for it).
    if (this.scoredList < 0) return null;
    if (this.scoredList !== this.namesFor) {
      if (this.listNames.length < 2 * candidates.length) {
        this.listNames = new Uint32Array(2 * candidates.length);
        this.pickNames = new Uint32Array(2 * candidates.length);
      }
      for (let k = 0; k < candidates.length; k++) {
        const h = nameHash(candidates[k]);
        this.listNames[2 * k] = h[0];
        this.listNames[2 * k + 1] = h[1];
      }
      this.namesFor = this.scoredList;
    }
    return this.listNames;
  }

  /** The last scored list's columns (price()'s, by position), for all of `candidates`. */
  private columnsOf(candidates: readonly Candidate[]): PickLoads {
    return {
      of: candidates,
      n: candidates.length,
      requests: this.pickRequests,
      prefill: this.pickPrefill,
      names: this.namesOf(candidates),
      cost: this.pickCost,
      credited: this.pickCredited,
      prefillMs: this.pickPrefillMs,
      queueMs: this.pickQueueMs,
      hybrid: this.pickHybrid,
    };
  }

  /** The scored candidates' columns (score()'s, by position) for the eligible ones, by their index. */
  private pickLoads(candidates: readonly CandidateScore[], eligible: readonly CandidateScore[]): PickLoads {
    const all = this.columnsOf(candidates);
    if (eligible === candidates) return all;
    // Eligible is candidates in order, less some: compacted in place (j <= k); the names into their own copy.
    const { requests, prefill, cost, credited, prefillMs, queueMs, hybrid } = all;
    const from = all.names;
    const names = from === null ? null : this.pickNames;
    for (let k = 0, j = 0; k < candidates.length && j < eligible.length; k++) {
      if (candidates[k] !== eligible[j]) continue;
      requests[j] = requests[k];
      prefill[j] = prefill[k];
      cost[j] = cost[k];
      credited[j] = credited[k];
      prefillMs[j] = prefillMs[k];
      queueMs[j] = queueMs[k];
      hybrid[j] = hybrid[k];
      if (from !== null && names !== null) {
        names[2 * j] = from[2 * k];
        names[2 * j + 1] = from[2 * k + 1];
      }
      j++;
    }
    return { ...all, of: eligible, n: eligible.length, names };
  }

  /** Book a decision: active load plus a speculative insert of its blocks. */
  book(d: Decision, ns: NamespaceId, opts: BookOptions): Booking {
    const c = d.chosen;
    if (!c) throw new Error('cannot book a decision without a chosen candidate');
    const prefill = opts.prefillTokens ?? Math.max(0, Math.round(d.isl - c.creditedBlocks * d.blockSize)); // whole tokens: a fractional tier credit would make replica sync refuse the add
    const context = Math.max(0, Math.round(d.isl - prefill)); // (a whole token count: replica sync sends integers)
    // (The head's progress the prediction credited: the booking's rate sample counts the work it waits for as predicted.)
    const booking = this.active.book(
      opts.requestId,
      c.instance,
      c.dpRank,
      d.seq,
      prefill,
      opts.now,
      ns.model,
      context,
      c.headDone ?? 0,
    );
    this.meanPrefillTokens += 0.05 * (prefill - this.meanPrefillTokens);
    this.meanAttention += 0.05 * (attentionWork(prefill, context) - this.meanAttention);
    if (d.adapter) {
      let m = this.adapterUse.get(c.instance, c.dpRank);
      if (!m) this.adapterUse.set(c.instance, c.dpRank, (m = new Map()));
      m.set(d.adapter, opts.now);
    }
    // The engine is about to use the cached prefix: it becomes the newest in the instance's LRU.
    if (c.device > 0) this.indexer.find(ns)?.index.touch(c.instance, c.dpRank, d.seq, c.device);
    speculate(this.indexer, ns, booking, opts.speculativeTtlMs, opts.now);
    this.policyStates.booked(ns.model, policySpec(d.policy), {
      requestId: opts.requestId,
      chosen: c,
      memo: d.memo,
      isl: d.isl,
      now: opts.now,
    });
    for (const h of this.hooks) h.booked?.(booking, ns, opts.speculativeTtlMs, opts.now, c.device > 0 ? c.device : 0);
    return booking;
  }

  /**
   * The first token arrived. With `now` (the proxy path, which saw the whole wait itself), the
   * booking becomes a sample of its worker's prefill rate, taken when it is freed: by then the
   * engine may have reported how many prompt tokens it really computed. A gateway's report through
   * the decision API arrives late by an unknown amount and teaches nothing.
   */
  prefillComplete(requestId: string, now?: number): boolean {
    const b = this.active.get(requestId);
    const changed = b !== undefined && !b.prefillDone;
    const ok = this.active.prefillComplete(requestId);
    if (changed) {
      if (now !== undefined) b.firstTokenAt = now;
      this.policyStates.prefillDone(requestId);
      for (const h of this.hooks) h.prefillCompleted?.(requestId);
    }
    return ok;
  }

  private adapterPenalty(c: Candidate, adapter: string, loadMs: number, warmMs: number, now: number): number {
    const last = this.adapterUse.get(c.instance, c.dpRank)?.get(adapter);
    return last !== undefined && now - last <= warmMs ? 0 : loadMs;
  }

  /** An instance left the pool: free its bookings, forget its adapter history, rate and distrust. */
  dropInstance(instance: string): number {
    this.adapterUse.deleteInstance(instance);
    this.rates.drop(instance);
    this.distrusted.delete(instance);
    this.policyStates.dropInstance(instance, (name) => policySpec(name as PolicyName));
    return this.active.dropInstance(instance);
  }

  /** The engine's usage for a booked request: the prompt tokens it computed (prompt - cached). */
  reportUncached(requestId: string, uncachedTokens: number): void {
    const b = this.active.get(requestId);
    if (b && uncachedTokens >= 0) b.reportedUncached = uncachedTokens;
  }

  /** Free bookings nobody released within maxAgeMs (through free(), so hooks see them). */
  sweep(now: number, maxAgeMs: number): string[] {
    const stale = this.active.staleIds(now, maxAgeMs);
    for (const id of stale) this.free(id);
    return stale;
  }

  /**
   * Release a booking. `failed` (at `now`): the engine did not compute the prompt (the attempt
   * failed, was cut by its other leg, refused or abandoned before its first token): its speculative
   * insert is withdrawn, so nothing counts the prompt as cached there on its account.
   */
  free(requestId: string, outcome?: { failed: boolean; now: number }): boolean {
    const b = this.active.get(requestId);
    // Work = what was queued ahead of it + what it computed itself (as reported, else as predicted),
    // after the rest of its prompt (cached).
    let rate: RateSample | undefined;
    if (b?.firstTokenAt !== undefined) {
      const own = b.reportedUncached ?? b.prefillTokens;
      const sample: RateSample = {
        workTokens: b.aheadTokens + own,
        attentionWork: b.aheadAttention + attentionWork(own, b.contextTokens + b.prefillTokens - own),
        decoding: b.decodingAhead,
        decodingContext: b.decodingContextAhead,
        ttftMs: b.firstTokenAt - b.createdAt,
        pool: b.pool,
      };
      // Only a sample PrefillRates takes goes to the hooks (a clock stepped back makes a negative TTFT).
      if (validSample(sample)) {
        rate = sample;
        this.rates.observeSample(b.instance, b.dpRank, sample);
      }
    }
    const ok = this.active.free(requestId);
    this.policyStates.freed(requestId);
    if (!ok) return false;
    const failed = outcome?.failed === true;
    if (failed) withdrawSpeculation(this.indexer, b!, outcome!.now);
    for (const h of this.hooks) h.freed?.(requestId, rate, failed);
    return true;
  }
}
