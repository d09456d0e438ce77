// The cost functions, and nothing else. Both start from the credited overlap:
//   credited   = device + host_ext x cpu + disk_ext x disk + shared_ext x shared   (blocks)
// A tier's credit is 1 - (time to bring a block from it) / (time to recompute it).
//
// `blocks` (Dynamo's default, kept for parity):
//   prefill    = (active_prefill_tokens + max(isl - credited x bs, 0)) / bs
//   decode     = active_blocks + new_blocks                 (0 when active blocks are not tracked)
//   cost       = overlap_weight x prefill + decode
// `time` (the default): milliseconds, with the instance's prefill rate learned online (rates.ts):
//   queue      = active_prefill_tokens x ms_per_token        (prefill work booked ahead)
//                + active_attention x ms_per_attention       (its attention over its context)
//                - head_progress                             (what the engine has computed of it, below)
//                + decoding_requests x ms_per_decoding       (the decode steps of the passes it waits through,
//                + decoding_context x ms_per_decoding_context  which read the decoding requests' KV)
//   head_progress = max(0, min(ran, 2 x head - ran)), ran = since_booked - head_ahead   (the oldest
//                booking still before its first token started when the work booked ahead of it was
//                done, at the rate: a prefill booked ahead is not owed in full until its first token;
//                chunked prefill has computed part of it. Past its predicted end it is overdue and
//                taken to need min(head, overdue) more: the engine has shown it is behind)
//   own        = overhead + uncached x ms_per_token          (this request's prefill, N = uncached tokens
//                + N x (cached + N/2) x ms_per_attention      after `cached` ones: attention grows with both)
//   ttft       = queue + own
//   interfere  = decode_interference x decoding_requests x prefill   (the pass that prefills it
//                stalls every running decode, its fixed cost included: short tails are not free)
//   decode     = decode_block_ms x (active_blocks + new_blocks)   (optional, 0 by default)
//   recompute  = recompute_weight x own                      (optional, 0 by default: the
//                prefill it adds delays what queues after it there too)
//   cost       = ttft + interfere + decode + recompute       (overlap_weight is the blocks model's)
// Blocks add prefill compute to decode memory as if they cost the same: under load an instance
// holding a 6,000-token prefix loses to one with a shorter batch. Time compares like with like.
// Unlike Dynamo, a block reachable both from a lower own tier and from the shared pool is credited
// once, at the better of the two weights (Dynamo adds both: a known double count).

export interface MediumWeights {
  /** Credit for a block found only on the instance's host tier (0..1). */
  cpu: number;
  /** Credit for a block found only on disk/external tiers (0..1). */
  disk: number;
  /** Credit for a block readable from a shared pool beyond the instance's own tiers (0..1). */
  shared: number;
}

export const COST_MODELS = ['time', 'blocks'] as const;
export type CostModel = (typeof COST_MODELS)[number];

export interface CostWeights {
  model: CostModel;
  overlapWeight: number;
  medium: MediumWeights;
  /** Track decode blocks (false for prefill-only pools: cost is prefill only). */
  trackActiveBlocks: boolean;
  /** time model: weight of the stall this request's prefill puts on each running decode. */
  decodeInterference: number;
  /**
   * time model: ms per KV block the instance's in-flight requests would hold with this one (a
   * bigger batch takes longer decode steps); 0 leaves decode memory out, as by default.
   */
  decodeBlockMs?: number;
  /**
   * time model: this request's own uncached prefill counted once more, as work the requests queued
   * after it on that instance wait for too; 0 (the default) leaves it out.
   */
  recomputeWeight?: number;
}

/**
 * An instance's prefill speed: ttft ~ overheadMs + tokens x msPerToken + attention work x
 * msPerAttention + decoding requests x msPerDecoding + their context x msPerDecodingContext.
 */
export interface PrefillRate {
  msPerToken: number;
  overheadMs: number;
  /** What each request decoding there adds to a first token (the decode steps of the passes it waits through). */
  msPerDecoding: number;
  /** ms per unit of attentionWork (a new token attending to one context token). 0: the flat per-token model. */
  msPerAttention: number;
  /** What each context token of a decoding request adds to a first token (its KV read by every decode step). */
  msPerDecodingContext: number;
}

/** The oldest booking on a worker still before its first token (time model: its progress is credited). */
export interface QueueHead {
  /** Since it was booked (ms). */
  elapsedMs: number;
  /** Prefill work booked ahead of it then: tokens and their attention work. */
  aheadTokens: number;
  aheadAttention: number;
  /** Its own prefill: tokens and their attention work. */
  prefillTokens: number;
  attention: number;
}

/**
 * What the engine has computed of the queue head's prefill by now, at the rate: it started when
 * the work booked ahead of it was done (that work counted in full: a conservative start). Once
 * past its predicted end without a first token it is overdue: the engine is behind the prediction
 * (work the router cannot see, a slower pass), so it is taken to need about as long again as it is
 * late, never more than itself: remaining = min(head, overdue). The credit falls back as the
 * evidence of lateness grows, to none at twice its own time.
 */
export function headProgressMs(h: QueueHead, rate: PrefillRate): number {
  return headProgress(
    h.elapsedMs,
    h.aheadTokens,
    h.aheadAttention,
    h.prefillTokens,
    h.attention,
    rate.msPerToken,
    rate.msPerAttention,
  );
}

/** headProgressMs over plain numbers (a scorer's pass over columns reads the head's fields in place). */
export function headProgress(
  elapsedMs: number,
  aheadTokens: number,
  aheadAttention: number,
  prefillTokens: number,
  attention: number,
  msPerToken: number,
  msPerAttention: number,
): number {
  const start = aheadTokens * msPerToken + aheadAttention * msPerAttention;
  const ran = elapsedMs - start;
  return Math.max(0, Math.min(ran, 2 * headOwnMs(prefillTokens, attention, msPerToken, msPerAttention) - ran));
}

/** The queue head's own prefill compute at the rate. */
function headMs(h: QueueHead, rate: PrefillRate): number {
  return headOwnMs(h.prefillTokens, h.attention, rate.msPerToken, rate.msPerAttention);
}

function headOwnMs(prefillTokens: number, attention: number, msPerToken: number, msPerAttention: number): number {
  return prefillTokens * msPerToken + attention * msPerAttention;
}

/**
 * Attention work of computing `newTokens` after `contextTokens` cached ones: each new token
 * attends to the cached context and to the new tokens before it, N·(P + N/2) token pairs (the
 * calibrated engine model's context term; chunking a prefill does not change the sum).
 */
export function attentionWork(newTokens: number, contextTokens: number): number {
  return newTokens > 0 ? newTokens * (Math.max(0, contextTokens) + newTokens / 2) : 0;
}

export interface CostInput {
  /** Cumulative own-tier prefixes in blocks: device <= host <= disk. */
  device: number;
  host: number;
  disk: number;
  /** Shared pool's contiguous prefix in blocks. */
  shared: number;
  activePrefillTokens: number;
  /** attentionWork of the prefill booked ahead (time model; absent: 0). */
  activeAttention?: number;
  activeBlocks: number;
  /** In-flight requests past their first token (time model: who a new prefill stalls). */
  decodingRequests: number;
  /** Their prompt tokens (time model; absent: 0). */
  decodingContext?: number;
  /** The oldest booking in activePrefillTokens (time model: its progress is credited; absent: none). */
  head?: QueueHead | null;
  /** Request blocks not already held by in-flight requests on the worker. */
  newBlocks: number;
}

export interface CostBreakdown {
  creditedBlocks: number;
  prefillBlocks: number;
  decodeBlocks: number;
  /** Predicted wait for the prefill work booked ahead (ms). */
  queueMs: number;
  /** Predicted time of this request's own prefill (ms, overhead included). */
  prefillMs: number;
  /** Predicted time to first token: queueMs + prefillMs. */
  ttftMs: number;
  /** Weighted stall this prefill adds to the instance's running decodes (ms). */
  interferenceMs: number;
  /** Share of the queue head's prefill credited as computed (0..1; the booking's sample counts the rest). */
  headDone: number;
  cost: number;
}

/** Blocks of [from, to) inside [0, shared) count at max(w, shared weight), the rest at w. */
function range(from: number, to: number, w: number, shared: number, sharedW: number): number {
  if (to <= from) return 0;
  const inShared = Math.max(0, Math.min(to, shared) - from);
  return inShared * Math.max(w, sharedW) + (to - from - inShared) * w;
}

export function creditedBlocks(c: Pick<CostInput, 'device' | 'host' | 'disk' | 'shared'>, m: MediumWeights): number {
  return credit(c.device, c.host, c.disk, c.shared, m);
}

/** creditedBlocks over plain numbers. */
export function credit(device: number, host: number, disk: number, shared: number, m: MediumWeights): number {
  const h = Math.max(host, device);
  const d = Math.max(disk, h);
  return (
    device +
    range(device, h, m.cpu, shared, m.shared) +
    range(h, d, m.disk, shared, m.shared) +
    Math.max(0, shared - d) * m.shared
  );
}

/** Slots of costTerms' `out`: the breakdown's terms beside the cost it returns. */
export const TERM_QUEUE_MS = 0;
export const TERM_PREFILL_MS = 1;
export const TERM_TTFT_MS = 2;
export const TERM_INTERFERENCE_MS = 3;
export const TERM_PREFILL_BLOCKS = 4;
export const TERM_DECODE_BLOCKS = 5;
export const COST_TERMS = 6;

/**
 * The cost model's arithmetic over plain numbers (cost() is this over a CostInput; a scorer's pass
 * over 1,024 candidates' columns calls it without an object per candidate): returns the cost and
 * writes the other terms into `out` (TERM_*). `credited`: creditedBlocks; `progressMs`: the queue
 * head's (headProgress; 0 without one).
 */
export function costTerms(
  credited: number,
  activePrefillTokens: number,
  activeAttention: number,
  activeBlocks: number,
  decodingRequests: number,
  decodingContext: number,
  progressMs: number,
  newBlocks: number,
  isl: number,
  blockSize: number,
  w: CostWeights,
  msPerToken: number,
  overheadMs: number,
  msPerDecoding: number,
  msPerAttention: number,
  msPerDecodingContext: number,
  out: Float64Array,
): number {
  const uncached = Math.max(isl - credited * blockSize, 0);
  const prefillBlocks = (activePrefillTokens + uncached) / blockSize;
  const decodeBlocks = w.trackActiveBlocks ? activeBlocks + newBlocks : 0;
  const queueMs =
    Math.max(0, activePrefillTokens * msPerToken + activeAttention * msPerAttention - progressMs) +
    decodingRequests * msPerDecoding +
    decodingContext * msPerDecodingContext;
  const ownMs = uncached * msPerToken + attentionWork(uncached, isl - uncached) * msPerAttention;
  const prefillMs = overheadMs + ownMs;
  const interferenceMs = w.trackActiveBlocks ? w.decodeInterference * decodingRequests * prefillMs : 0;
  const ttftMs = queueMs + prefillMs;
  const decodeMs = w.trackActiveBlocks && w.decodeBlockMs ? w.decodeBlockMs * (activeBlocks + newBlocks) : 0;
  const recomputeMs = (w.recomputeWeight ?? 0) * ownMs;
  out[TERM_QUEUE_MS] = queueMs;
  out[TERM_PREFILL_MS] = prefillMs;
  out[TERM_TTFT_MS] = ttftMs;
  out[TERM_INTERFERENCE_MS] = interferenceMs;
  out[TERM_PREFILL_BLOCKS] = prefillBlocks;
  out[TERM_DECODE_BLOCKS] = decodeBlocks;
  return w.model === 'time'
    ? ttftMs + interferenceMs + decodeMs + recomputeMs
    : w.overlapWeight * prefillBlocks + decodeBlocks;
}

/** cost()'s terms (read right after each call: one for every call). */
const termsOut = new Float64Array(COST_TERMS);

/** The cost model over a CostInput (costTerms' arithmetic, with the whole breakdown). */
export function cost(c: CostInput, isl: number, blockSize: number, w: CostWeights, rate: PrefillRate): CostBreakdown {
  const credited = creditedBlocks(c, w.medium);
  const progressMs = c.head ? headProgressMs(c.head, rate) : 0;
  const t = termsOut;
  const value = costTerms(
    credited,
    c.activePrefillTokens,
    c.activeAttention ?? 0,
    c.activeBlocks,
    c.decodingRequests,
    c.decodingContext ?? 0,
    progressMs,
    c.newBlocks,
    isl,
    blockSize,
    w,
    rate.msPerToken,
    rate.overheadMs,
    rate.msPerDecoding,
    rate.msPerAttention,
    rate.msPerDecodingContext,
    t,
  );
  const prefillBlocks = t[TERM_PREFILL_BLOCKS];
  const decodeBlocks = t[TERM_DECODE_BLOCKS];
  const queueMs = t[TERM_QUEUE_MS];
  const prefillMs = t[TERM_PREFILL_MS];
  const ttftMs = t[TERM_TTFT_MS];
  const interferenceMs = t[TERM_INTERFERENCE_MS];
  const headDone = progressMs > 0 ? progressMs / headMs(c.head!, rate) : 0;
  return {
    creditedBlocks: credited,
    prefillBlocks,
    decodeBlocks,
    queueMs,
    prefillMs,
    ttftMs,
    interferenceMs,
    headDone,
    cost: value,
  };
}

/**
 * Pick an index: temperature 0 = argmin with a uniform tie-break among equals; T > 0 = softmax over
 * range-normalised costs, p_i ~ exp(-(c_i - min) / ((max - min) T)). `rand` returns [0, 1).
 */
export function pickByCost(costs: ArrayLike<number>, temperature: number, rand: () => number): number {
  if (costs.length === 0) return -1;
  let min = Infinity;
  let max = -Infinity;
  for (let i = 0; i < costs.length; i++) {
    const c = costs[i];
    if (c < min) min = c;
    if (c > max) max = c;
  }
  if (temperature <= 0 || max === min || !Number.isFinite(max - min)) {
    let chosen = -1;
    let ties = 0;
    for (let i = 0; i < costs.length; i++) {
      if (costs[i] !== min) continue;
      ties++;
      if (rand() * ties < 1) chosen = i; // reservoir sampling: uniform among ties
    }
    return chosen;
  }
  const range = max - min;
  const weights = Array.from(costs, (c) => Math.exp(-(c - min) / (range * temperature)));
  const total = weights.reduce((a, b) => a + b, 0);
  let u = rand() * total;
  for (let i = 0; i < weights.length; i++) {
    u -= weights[i];
    if (u < 0) return i;
  }
  return weights.length - 1;
}
