// A fleet of simulated engines in one child process (`kvrouter engine-sim --count N`), so the
// engines' CPU is apart from the load generator's and the router's.
import { loadPerfModel } from '../../engine-sim/perf-models.js';
import { type Child, spawnCli } from './children.js';

/**
 * The benchmarks' engines take their pass times from Qwen3-8B measured on an H200 (engine-sim
 * --perf-model); their KV capacity stays what each benchmark sizes (--num-gpu-blocks wins).
 */
export const BENCH_PERF_MODEL = 'h200-qwen3-8b';

/** The served model name that goes with a perf model (the mocker's engines have always served Qwen3-0.6B). */
export function benchModelName(perfModel: string): string {
  return loadPerfModel(perfModel).servedModel ?? 'Qwen/Qwen3-0.6B';
}

export interface FleetOptions {
  count: number;
  blockSize: number;
  numGpuBlocks: number;
  numCpuBlocks: number;
  maxModelLen: number;
  speedup: number;
  /** engine-sim --perf-model. */
  perfModel: string;
  seed: number;
  tokenizer: string;
  model: string;
  /** Extra engine-sim flags. */
  extra?: string[];
}

export interface EngineEndpoint {
  url: string;
  zmq: string;
  replay: string;
}

export interface Fleet {
  child: Child;
  engines: EngineEndpoint[];
  stop(): Promise<void>;
}

const LINE = /^engine-sim \S+ (http:\/\/\S+) zmq (tcp:\/\/\S+) replay (tcp:\/\/\S+)/;

export async function startFleet(o: FleetOptions): Promise<Fleet> {
  const args = [
    'engine-sim',
    '--count',
    String(o.count),
    '--port',
    '0',
    '--zmq-port',
    '0',
    '--replay-port',
    '0',
    '--model',
    o.model,
    '--tokenizer',
    o.tokenizer,
    '--block-size',
    String(o.blockSize),
    '--num-gpu-blocks',
    String(o.numGpuBlocks),
    '--num-cpu-blocks',
    String(o.numCpuBlocks),
    '--max-model-len',
    String(o.maxModelLen),
    '--speedup',
    String(o.speedup),
    '--perf-model',
    o.perfModel,
    '--seed',
    String(o.seed),
    ...(o.extra ?? []),
  ];
  const child = await spawnCli(args, LINE, { count: o.count, timeoutMs: 120_000 });
  const engines = child.lines
    .filter((l) => LINE.test(l))
    .map((l) => {
      const m = LINE.exec(l)!;
      return { url: m[1], zmq: m[2], replay: m[3] };
    });
  return { child, engines, stop: () => child.stop() };
}
