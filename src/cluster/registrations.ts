// What the relay needs from a router config: exactly the publishers the routers would subscribe to
// (the same derivation startRouter uses) and the per-model hash seeds.
import type { RouterConfig } from '../config/schema.js';
import { desiredRegistrations } from '../router/registrations.js';

export const registrationsFromConfig = desiredRegistrations;

/** Per-model hash seeds of a config (models without one use hashing.seed). */
export function modelSeeds(cfg: RouterConfig): Map<string, bigint> {
  return new Map(cfg.models.filter((m) => m.hash_seed !== undefined).map((m) => [m.name, BigInt(m.hash_seed!)] as const));
}
