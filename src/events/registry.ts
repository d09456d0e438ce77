// Publisher registrations (POST /register, YAML pools, --workers): who publishes KV events where,
// for which instance and namespace. Pure bookkeeping; the ZMQ listeners are driven from it.

export type PublisherType = 'vLLM' | 'SGLang' | 'LMCache' | 'Mooncake';
export const PUBLISHER_TYPES: readonly PublisherType[] = ['vLLM', 'SGLang', 'LMCache', 'Mooncake'];

export type ListenerStatus = 'pending' | 'active' | 'paused' | 'failed';

export interface RegistrationSpec {
  endpoint: string;
  replayEndpoint: string | null;
  type: PublisherType;
  model: string;
  loraName: string | null;
  tenant: string;
  instanceId: string;
  blockSize: number;
  dpRank: number;
  additionalSalt: string | null;
  /** ZMQ topic filter ('' = all). */
  topic: string;
  /**
   * Event owner. Engines own their blocks (backend = instance); a Mooncake store is a shared pool
   * every instance of the namespace can read, so its backend is not tied to one instance.
   */
  backendId: string;
  shared: boolean;
}

export interface Registration extends RegistrationSpec {
  /** `instance|tenant|dp_rank`, the Conductor's service key. */
  key: string;
  status: ListenerStatus;
  lastError: string | null;
  registeredAt: number;
}

export function registrationKey(instanceId: string, tenant: string, dpRank: number): string {
  return `${instanceId}|${tenant}|${dpRank}`;
}

export type RegisterResult =
  | { kind: 'created'; registration: Registration }
  | { kind: 'unchanged'; registration: Registration }
  | { kind: 'conflict'; reason: string; registration: Registration };

const IDENTITY_FIELDS: ReadonlyArray<keyof RegistrationSpec> = [
  'endpoint',
  'replayEndpoint',
  'type',
  'model',
  'loraName',
  'blockSize',
  'additionalSalt',
  'topic',
  'backendId',
  'shared',
];

export class Registry {
  private readonly regs = new Map<string, Registration>();

  /** Identical re-registration is idempotent; a different spec under the same key is a conflict. */
  register(spec: RegistrationSpec, now: number): RegisterResult {
    const key = registrationKey(spec.instanceId, spec.tenant, spec.dpRank);
    const existing = this.regs.get(key);
    if (existing) {
      const diff = IDENTITY_FIELDS.filter((f) => existing[f] !== spec[f]);
      if (diff.length === 0) return { kind: 'unchanged', registration: existing };
      const what = diff.map((f) => `${f} ${JSON.stringify(existing[f])} != ${JSON.stringify(spec[f])}`).join(', ');
      return {
        kind: 'conflict',
        reason: `${key} is already registered with a different ${what}`,
        registration: existing,
      };
    }
    const reg: Registration = { ...spec, key, status: 'pending', lastError: null, registeredAt: now };
    this.regs.set(key, reg);
    return { kind: 'created', registration: reg };
  }

  unregister(instanceId: string, tenant: string, dpRank: number): Registration | undefined {
    const key = registrationKey(instanceId, tenant, dpRank);
    const reg = this.regs.get(key);
    if (reg) this.regs.delete(key);
    return reg;
  }

  get(key: string): Registration | undefined {
    return this.regs.get(key);
  }

  setStatus(key: string, status: ListenerStatus, lastError: string | null = null): void {
    const reg = this.regs.get(key);
    if (!reg) return;
    reg.status = status;
    reg.lastError = lastError;
  }

  all(): Registration[] {
    return [...this.regs.values()];
  }

  /** Routable instances registered under a tenant (optionally for one model). */
  instances(tenant: string, model?: string): string[] {
    const out = new Set<string>();
    for (const r of this.regs.values()) {
      if (r.tenant === tenant && !r.shared && (model === undefined || r.model === model)) out.add(r.instanceId);
    }
    return [...out];
  }

  /** Registered DP ranks of an instance in a tenant. */
  ranks(tenant: string, instanceId: string): number[] {
    const out: number[] = [];
    for (const r of this.regs.values())
      if (r.tenant === tenant && r.instanceId === instanceId && !r.shared) out.push(r.dpRank);
    return out.sort((a, b) => a - b);
  }

  get size(): number {
    return this.regs.size;
  }
}
