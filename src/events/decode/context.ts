// What a decoder knows besides the bytes: the registration's defaults (which fill what events leave
// out) and small per-listener state learned from the stream itself.
import type { PublisherType, Registration } from '../registry.js';
import { GroupFilter } from './groups.js';

export type RegistrationDefaults = Pick<
  Registration,
  'type' | 'model' | 'blockSize' | 'tenant' | 'loraName' | 'additionalSalt' | 'backendId' | 'dpRank'
>;

/** A (block size, LoRA, salt) namespace variant a listener stored into, with its chunk ratio. */
export interface SpaceVariant {
  blockSize: number;
  loraName: string | null;
  salt: string | null;
  /** Router blocks per engine block (> 1 when engine blocks were split, see rechunk.ts). */
  ratio: number;
}

const MAX_VARIANTS = 256;

export class DecodeState {
  readonly groups = new GroupFilter();
  private readonly variants = new Map<string, SpaceVariant>();

  /**
   * Removals carry only engine hashes, not the LoRA/salt/block size their blocks were stored under,
   * so a removal is applied in every variant this stream has stored into (unknown hashes are no-ops).
   */
  noteVariant(v: SpaceVariant): void {
    const key = `${v.blockSize}\u0000${v.loraName ?? ''}\u0000${v.salt ?? ''}`;
    const old = this.variants.get(key);
    if (old) old.ratio = Math.max(old.ratio, v.ratio);
    else if (this.variants.size < MAX_VARIANTS) this.variants.set(key, { ...v });
  }

  spaceVariants(): Iterable<SpaceVariant> {
    return this.variants.values();
  }

  get variantCount(): number {
    return this.variants.size;
  }
}

export interface DecodeContext {
  readonly reg: RegistrationDefaults;
  readonly state: DecodeState;
}

export function decodeContext(reg: RegistrationDefaults): DecodeContext {
  const state = new DecodeState();
  // The registration's own namespace always receives removals, even before any store was seen.
  state.noteVariant({ blockSize: reg.blockSize, loraName: reg.loraName || null, salt: reg.additionalSalt || null, ratio: 1 });
  return { reg, state };
}

export type { PublisherType };
