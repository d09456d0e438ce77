// KV-event registrations of a router config (one per instance and dp rank), as startRouter makes
// them: the relay subscribes to exactly the publishers the routers would have.
import type { RouterConfig } from '../config/schema.js';
import type { RegistrationSpec } from '../events/registry.js';

function bumpPort(endpoint: string, by: number): string {
  return by === 0 ? endpoint : endpoint.replace(/:(\d+)$/, (_m, p: string) => `:${Number(p) + by}`);
}

export function registrationsFromConfig(cfg: RouterConfig): RegistrationSpec[] {
  const out: RegistrationSpec[] = [];
  for (const m of cfg.models) {
    for (const inst of m.instances) {
      const ev = inst.kv_events;
      if (!ev) continue;
      for (let r = 0; r < inst.dp_size; r++) {
        out.push({
          endpoint: bumpPort(ev.endpoint, r),
          replayEndpoint: ev.replay_endpoint ? bumpPort(ev.replay_endpoint, r) : null,
          type: ev.type,
          model: m.name,
          loraName: null,
          tenant: 'default',
          instanceId: inst.id,
          blockSize: m.block_size,
          dpRank: r,
          additionalSalt: null,
          topic: ev.topic,
          backendId: inst.id,
          shared: false,
        });
      }
    }
  }
  return out;
}

/** Per-model hash seeds of a config (models without one use hashing.seed). */
export function modelSeeds(cfg: RouterConfig): Map<string, bigint> {
  return new Map(cfg.models.filter((m) => m.hash_seed !== undefined).map((m) => [m.name, BigInt(m.hash_seed!)] as const));
}
