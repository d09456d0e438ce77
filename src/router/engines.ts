// Simulated engines started inside `kvrouter serve` (the `engine_sim:` section): models without
// instances are served by them.
import { ListenError } from '../common/listen.js';
import type { RouterConfig } from '../config/schema.js';
import { ENGINE_ROLES, type EngineHandle, startEngines } from '../engine-sim/index.js';
import type { PublisherType } from '../events/registry.js';

const ENGINE_TYPES: Record<RouterConfig['engine_sim']['event_format'], PublisherType> = {
  map: 'vLLM',
  array: 'vLLM',
  sglang: 'SGLang',
  mooncake: 'Mooncake',
};

// Engine i of `engine_sim` listens on port + i and publishes on zmq_port / replay_port + 2i.
const EMBEDDED_ENGINE_HINTS: Record<string, string> = {
  [ENGINE_ROLES.http]: 'engine_sim.port (engine i takes port + i)',
  [ENGINE_ROLES.pub]: 'engine_sim.zmq_port (engine i takes zmq_port + 2i)',
  [ENGINE_ROLES.replay]: 'engine_sim.replay_port (engine i takes replay_port + 2i)',
};

export async function startEmbeddedEngines(cfg: RouterConfig, log: (l: string) => void): Promise<EngineHandle[]> {
  const es = cfg.engine_sim;
  if (es.count === 0) return [];
  const m = cfg.models[0];
  const engines = await startEngines(es.count, {
    host: '127.0.0.1',
    port: es.port,
    zmqPort: es.zmq_port,
    replayPort: es.replay_port,
    model: m.name,
    tokenizer: m.tokenizer.package ?? m.tokenizer.path,
    blockSize: m.block_size,
    numGpuBlocks: es.num_gpu_blocks,
    numCpuBlocks: es.num_cpu_blocks,
    speedup: es.speedup,
    seed: es.seed,
    eventFormat: es.event_format,
    hashSeed: BigInt(m.hash_seed ?? cfg.hashing.seed),
  }).catch((err: unknown) => {
    throw err instanceof ListenError ? err.withHint(EMBEDDED_ENGINE_HINTS[err.role] ?? 'the engine_sim ports') : err;
  });
  for (const e of engines) log(`engine-sim ${e.id} ${e.url} zmq ${e.zmqEndpoint} replay ${e.replayEndpoint}`);
  return engines;
}

/** What a router needs to know of a simulated engine: its address (plain data, sent to `--workers` processes). */
export type EngineRef = Pick<EngineHandle, 'id' | 'url' | 'ranks' | 'zmqEndpoint' | 'replayEndpoint'>;

export const engineRef = (e: EngineRef): EngineRef => ({
  id: e.id,
  url: e.url,
  ranks: e.ranks.map((r) => ({ ...r })),
  zmqEndpoint: e.zmqEndpoint,
  replayEndpoint: e.replayEndpoint,
});

/** Models without instances are served by the simulated engines. */
export function fillEngineInstances(cfg: RouterConfig, engines: readonly EngineRef[]): void {
  if (engines.length === 0) return;
  for (const model of cfg.models) {
    if (model.instances.length > 0) continue;
    model.instances = engines.map((e) => ({
      id: e.id,
      url: e.url,
      dp_size: e.ranks.length,
      role: 'both' as const,
      bootstrap_port: 8998,
      lora_adapters: [],
      ...(e.zmqEndpoint
        ? {
            kv_events: {
              endpoint: e.zmqEndpoint,
              ...(e.replayEndpoint ? { replay_endpoint: e.replayEndpoint } : {}),
              type: ENGINE_TYPES[cfg.engine_sim.event_format],
              topic: '',
            },
          }
        : {}),
    }));
  }
}
