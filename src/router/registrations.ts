// KV-event registrations derived from the config: one per instance and dp rank. Reconciling a new
// config adds listeners for new publishers and removes (and purges) those that went away or changed.
import type { RouterConfig } from '../config/schema.js';
import type { ListenerPool } from '../events/listener-pool.js';
import { registrationKey, type Registry, type RegistrationSpec } from '../events/registry.js';

function bumpPort(endpoint: string, by: number): string {
  return by === 0 ? endpoint : endpoint.replace(/:(\d+)$/, (_m, p: string) => `:${Number(p) + by}`);
}

export function desiredRegistrations(cfg: RouterConfig): RegistrationSpec[] {
  const out: RegistrationSpec[] = [];
  for (const m of cfg.models) {
    for (const inst of m.instances) {
      if (!inst.kv_events) continue;
      for (let r = 0; r < inst.dp_size; r++) {
        out.push({
          endpoint: bumpPort(inst.kv_events.endpoint, r),
          replayEndpoint: inst.kv_events.replay_endpoint ? bumpPort(inst.kv_events.replay_endpoint, r) : null,
          type: inst.kv_events.type,
          model: m.name,
          loraName: null,
          tenant: 'default',
          instanceId: inst.id,
          blockSize: m.block_size,
          dpRank: r,
          additionalSalt: null,
          topic: inst.kv_events.topic,
          backendId: inst.id,
          shared: false,
        });
      }
    }
  }
  return out;
}

const FIELDS: ReadonlyArray<keyof RegistrationSpec> = [
  'endpoint',
  'replayEndpoint',
  'type',
  'model',
  'blockSize',
  'topic',
];

/**
 * Make the config-owned registrations match `cfg`. Registrations made through /register are left
 * alone. Returns the keys removed (the caller purges what they indexed) and added.
 */
export async function reconcileRegistrations(
  cfg: RouterConfig,
  owned: Set<string>,
  registry: Registry,
  listeners: ListenerPool,
  now: number,
): Promise<{ removed: RegistrationSpec[]; added: string[] }> {
  const want = new Map(
    desiredRegistrations(cfg).map((s) => [registrationKey(s.instanceId, s.tenant, s.dpRank), s] as const),
  );
  const removed: RegistrationSpec[] = [];
  for (const key of [...owned]) {
    const cur = registry.get(key);
    const next = want.get(key);
    if (cur && next && FIELDS.every((f) => cur[f] === next[f])) continue;
    owned.delete(key);
    if (!cur) continue;
    await listeners.remove(key);
    registry.unregister(cur.instanceId, cur.tenant, cur.dpRank);
    removed.push(cur);
  }
  const added: string[] = [];
  for (const [key, spec] of want) {
    if (owned.has(key)) continue;
    const res = registry.register(spec, now);
    if (res.kind === 'conflict') continue; // an API registration already holds the key
    owned.add(key);
    listeners.add(res.registration);
    added.push(key);
  }
  return { removed, added };
}

/** Per-model hash seeds of a config (models without one use hashing.seed). */
export function modelSeeds(cfg: RouterConfig): Map<string, bigint> {
  return new Map(
    cfg.models.filter((m) => m.hash_seed !== undefined).map((m) => [m.name, BigInt(m.hash_seed!)] as const),
  );
}
