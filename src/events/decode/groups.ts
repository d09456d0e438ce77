// KV-cache group filter. Hybrid models (sliding-window, Mamba, ...) publish one event stream per KV
// cache group; only blocks of the main attention groups describe a reusable prefix. vLLM tags
// BlockStored with `group_idx` + `kv_cache_spec_kind` (BlockRemoved has only `group_idx`), so the kind
// of each (dp rank, group) is learned from stored events:
//   - a known kind: indexed iff it is a full-attention kind;
//   - an unknown kind: group 0 (or no group at all: single-group engines, SGLang) is indexed, any
//     other group is dropped.
// Every full-attention group is indexed into the same holder: a store from any of them adds the block
// and a removal from any of them drops it, so the index can under-claim but never keep a block one
// group evicted.
const MAIN_KINDS = new Set(['full_attention', 'mla_attention', 'sink_full_attention']);
const MAX_GROUPS = 4096;

export class GroupFilter {
  private readonly kinds = new Map<string, string>();

  admitStored(dpRank: number, group: number | null, kind: string | null): boolean {
    if (kind !== null) {
      if (group !== null && this.kinds.size < MAX_GROUPS) this.kinds.set(`${dpRank}:${group}`, kind);
      return MAIN_KINDS.has(kind);
    }
    return this.admitUnlabelled(dpRank, group);
  }

  admitRemoved(dpRank: number, group: number | null): boolean {
    return this.admitUnlabelled(dpRank, group);
  }

  /** Learned kind of a group (diagnostics). */
  kindOf(dpRank: number, group: number): string | undefined {
    return this.kinds.get(`${dpRank}:${group}`);
  }

  private admitUnlabelled(dpRank: number, group: number | null): boolean {
    if (group === null) return true;
    const known = this.kinds.get(`${dpRank}:${group}`);
    return known !== undefined ? MAIN_KINDS.has(known) : group === 0;
  }
}
