// Dynamo-style `--workers "1=tcp://h:5557,2:1=tcp://h:5558|tcp://h:5559"`: id[:dp]=endpoint[|replay].
import { PUBLISHER_TYPES, type Registration, type Registry } from '../events/registry.js';

export interface WorkerFlag {
  instanceId: string;
  dpRank: number;
  endpoint: string;
  replayEndpoint: string | null;
}

export function parseWorkersFlag(flag: string): WorkerFlag[] {
  return flag
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)
    .map((item) => {
      const m = /^([^=:]+)(?::(\d+))?=([^|]+)(?:\|(.+))?$/.exec(item);
      if (!m) throw new Error(`--workers: cannot parse '${item}' (expected id[:dp]=tcp://host:port[|replay-endpoint])`);
      return { instanceId: m[1], dpRank: m[2] ? Number(m[2]) : 0, endpoint: m[3], replayEndpoint: m[4] ?? null };
    });
}

/** Register each worker; the caller adds the registrations to its ListenerPool (which indexes them). */
export function registerWorkers(
  registry: Registry,
  workers: WorkerFlag[],
  ctx: { model: string; blockSize: number; type: string; tenant: string },
): Registration[] {
  const type = PUBLISHER_TYPES.find((t) => t.toLowerCase() === ctx.type.toLowerCase());
  if (!type) throw new Error(`--type must be one of ${PUBLISHER_TYPES.join(', ')}`);
  const out: Registration[] = [];
  for (const w of workers) {
    const res = registry.register(
      {
        endpoint: w.endpoint,
        replayEndpoint: w.replayEndpoint,
        type,
        model: ctx.model,
        loraName: null,
        tenant: ctx.tenant,
        instanceId: w.instanceId,
        blockSize: ctx.blockSize,
        dpRank: w.dpRank,
        additionalSalt: null,
        topic: '',
        backendId: w.instanceId,
        shared: type === 'Mooncake',
      },
      Date.now(),
    );
    if (res.kind === 'conflict') throw new Error(res.reason);
    out.push(res.registration);
  }
  return out;
}
