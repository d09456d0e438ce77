// A namespace is one hash space and one index: blocks from different models, block sizes, LoRA
// adapters, salts or tenants can never match each other (tenant A never sees tenant B's blocks).
import { DEFAULT_HASH_SEED, type HashSpace, hashSpace } from '../hashing/index.js';
import { BlockIndex } from './block-index.js';
import { KvGroups } from './groups.js';

export interface NamespaceId {
  model: string;
  blockSize: number;
  loraName: string | null;
  /** `additional_salt` on events and registrations, `cache_salt` on queries. */
  salt: string | null;
  tenant: string;
}

export const DEFAULT_TENANT = 'default';

/** The map key of a namespace; normalizes as `normalizeNamespace` does, without building its object (hot path). */
export function namespaceKey(id: {
  model: string;
  blockSize: number;
  loraName?: string | null;
  salt?: string | null;
  tenant?: string | null;
}): string {
  return `${id.model}\u0000${id.blockSize}\u0000${id.loraName || ''}\u0000${id.salt || ''}\u0000${id.tenant || DEFAULT_TENANT}`;
}

export function normalizeNamespace(id: {
  model: string;
  blockSize: number;
  loraName?: string | null;
  salt?: string | null;
  tenant?: string | null;
}): NamespaceId {
  return {
    model: id.model,
    blockSize: id.blockSize,
    loraName: id.loraName ? id.loraName : null,
    salt: id.salt ? id.salt : null,
    tenant: id.tenant ? id.tenant : DEFAULT_TENANT,
  };
}

export class Namespace {
  readonly key: string;
  readonly space: HashSpace;
  readonly index: BlockIndex;
  /** Instances known in this namespace (registered, or seen through events). */
  readonly instances = new Set<string>();
  /**
   * Secondary KV-cache groups of hybrid instances (groups.ts); null until one is seen, so queries
   * of single-group fleets do no extra work.
   */
  groups: KvGroups | null = null;

  constructor(
    readonly id: NamespaceId,
    seed: bigint = DEFAULT_HASH_SEED,
    /** Called when holders are purged (their ids may be reused). */
    onHoldersPurged?: () => void,
    /** Record rows reserved up front (TieredIndexerOptions.reserveRecords). */
    reserveRecords = 0,
    /** Engine hashes each group's map holds without growing (TieredIndexerOptions.reserveEngineHashes). */
    reserveEngineHashes = 0,
  ) {
    this.key = namespaceKey(id);
    this.space = hashSpace({ seed, loraName: id.loraName, salt: id.salt });
    this.index = new BlockIndex(1024, onHoldersPurged, reserveRecords, reserveEngineHashes);
  }

  /** The groups, created on the first secondary-group event. */
  hybridGroups(): KvGroups {
    this.groups ??= new KvGroups();
    return this.groups;
  }
}
