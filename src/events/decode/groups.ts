// KV-cache groups. Hybrid models (sliding-window, Mamba / linear attention, ...) publish one event
// stream per KV-cache group (vLLM's hybrid KV-cache manager; vllm-project/vllm#37688 added
// `group_idx`, #40984 `kv_cache_spec_kind` and `kv_cache_spec_sliding_window`). BlockStored names
// the group's kind, BlockRemoved only its index, so the kind of each (dp rank, group) is learned
// from stored events:
//   - full_attention, mla_attention, sink_full_attention: the prefix index ('main'). Every such
//     group feeds the same holder: a removal from any of them drops the block (may under-claim,
//     never stale);
//   - sliding_window / sliding_window_mla with a window, and mamba: a secondary group, kept beside
//     the prefix index (src/indexer/groups.ts), where it decides where a hit may end;
//   - any other kind (chunked local attention, unknown): skipped;
//   - no kind learned yet: group 0 (or no group at all: single-group engines, SGLang) is 'main',
//     any other group is skipped.
// Kind strings are vLLM's KVCacheSpecKind values (vllm/v1/kv_cache_interface.py,
// get_kv_cache_spec_kind).
import type { KvCacheGroup } from '../../indexer/kv-event.js';

const MAIN_KINDS = new Set(['full_attention', 'mla_attention', 'sink_full_attention']);
const WINDOW_KINDS = new Set(['sliding_window', 'sliding_window_mla']);
const STATE_KINDS = new Set(['mamba']);
const MAX_GROUPS = 4096;

/** Where an event's blocks go: the prefix index, a secondary group, or nowhere. */
export type GroupClass = 'main' | 'skip' | KvCacheGroup;

type Learned = 'main' | 'skip' | KvCacheGroup;

export class GroupFilter {
  private readonly kinds = new Map<string, Learned>();
  private readonly names = new Map<string, string>();
  // The last classifyStored() that learned nothing, and its answer: an engine's stored events name
  // the same group and kind again and again, and the answer then depends only on them (no key
  // string, no lookup). Any change to what was learned clears it.
  private memoSet = false;
  private memoDp = 0;
  private memoGroup: number | null = null;
  private memoKind: string | null = null;
  private memoWindow: number | null = null;
  private memoBlockSize = 0;
  private memoOut: GroupClass = 'skip';

  /** A BlockStored of `group` (null: none on the wire) whose engine block size is `blockSize`. */
  classifyStored(
    dpRank: number,
    group: number | null,
    kind: string | null,
    window: number | null,
    blockSize: number,
  ): GroupClass {
    if (
      this.memoSet &&
      kind === this.memoKind &&
      dpRank === this.memoDp &&
      group === this.memoGroup &&
      window === this.memoWindow &&
      blockSize === this.memoBlockSize
    )
      return this.memoOut;
    const size = this.kinds.size;
    const out = this.classify(dpRank, group, kind, window, blockSize);
    // Learned nothing (the same classes, the same count): the same call answers the same.
    this.memoSet = this.kinds.size === size && !this.changed;
    this.changed = false;
    this.memoDp = dpRank;
    this.memoGroup = group;
    this.memoKind = kind;
    this.memoWindow = window;
    this.memoBlockSize = blockSize;
    this.memoOut = out;
    return out;
  }

  /** Whether classify() replaced a group's class (cleared by classifyStored). */
  private changed = false;

  private classify(
    dpRank: number,
    group: number | null,
    kind: string | null,
    window: number | null,
    blockSize: number,
  ): GroupClass {
    if (kind === null) return this.classifyUnlabelled(dpRank, group);
    let learned: Learned;
    if (MAIN_KINDS.has(kind)) learned = 'main';
    else if (group === null) learned = 'skip';
    else if (WINDOW_KINDS.has(kind) && window !== null && window > 0)
      learned = { idx: group, kind: 'sliding_window', window, blockSize };
    else if (STATE_KINDS.has(kind)) learned = { idx: group, kind: 'mamba', window: 0, blockSize };
    else learned = 'skip';
    if (group !== null) {
      const key = `${dpRank}:${group}`;
      const old = this.kinds.get(key);
      if (old === undefined ? this.kinds.size < MAX_GROUPS : !sameClass(old, learned)) {
        this.kinds.set(key, learned);
        this.names.set(key, kind);
        this.changed = true;
      }
      if (old !== undefined && sameClass(old, learned)) return old;
      // Not remembered (the map is full): its removals would be read as unlabelled, so only what
      // they would drop too is kept (a block kept without its removals goes stale).
      if (old === undefined && this.kinds.get(key) === undefined && this.classifyUnlabelled(dpRank, group) !== learned)
        return 'skip';
    }
    return learned;
  }

  classifyRemoved(dpRank: number, group: number | null): GroupClass {
    return this.classifyUnlabelled(dpRank, group);
  }

  /** Learned kind of a group (diagnostics). */
  kindOf(dpRank: number, group: number): string | undefined {
    return this.names.get(`${dpRank}:${group}`);
  }

  private classifyUnlabelled(dpRank: number, group: number | null): GroupClass {
    if (group === null) return 'main';
    const known = this.kinds.get(`${dpRank}:${group}`);
    if (known !== undefined) return known;
    return group === 0 ? 'main' : 'skip';
  }
}

function sameClass(a: Learned, b: Learned): boolean {
  if (typeof a === 'string' || typeof b === 'string') return a === b;
  return a.idx === b.idx && a.kind === b.kind && a.window === b.window && a.blockSize === b.blockSize;
}
