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
  private readonly list: SpaceVariant[] = [];

  /**
   * Removals carry only engine hashes, not the LoRA/salt/block size their blocks were stored under,
   * so a removal is applied in every variant this stream has stored into (unknown hashes are no-ops).
   */
  noteVariant(blockSize: number, loraName: string | null, salt: string | null, ratio: number): void {
    // Fast path: nearly every stream stores into its registration's namespace only.
    const last = this.list[this.list.length - 1];
    if (last && last.blockSize === blockSize && last.loraName === loraName && last.salt === salt && last.ratio >= ratio)
      return;
    const key = `${blockSize}\u0000${loraName ?? ''}\u0000${salt ?? ''}`;
    const old = this.variants.get(key);
    if (old) old.ratio = Math.max(old.ratio, ratio);
    else if (this.variants.size < MAX_VARIANTS) {
      const v = { blockSize, loraName, salt, ratio };
      this.variants.set(key, v);
      this.list.push(v);
    }
  }

  spaceVariants(): readonly SpaceVariant[] {
    return this.list;
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
  state.noteVariant(reg.blockSize, reg.loraName || null, reg.additionalSalt || null, 1);
  return { reg, state };
}

export type { PublisherType };
