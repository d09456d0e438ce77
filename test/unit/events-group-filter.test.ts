// The KV-cache group filter's memory is bounded (MAX_GROUPS kinds per publisher): a group it cannot
// remember is not indexed, because its BlockRemoved events (which carry no kind) would be skipped
// and its blocks would stay in the index after the engine evicted them.
import { describe, expect, it } from 'vitest';
import { GroupFilter } from '../../src/events/decode/groups.js';

describe('GroupFilter beyond the groups it can remember', () => {
  it('skips a new sliding-window or full-attention group whose removals it could not classify', () => {
    const f = new GroupFilter();
    for (let r = 0; r < 4096; r++) expect(f.classifyStored(r, 1, 'sliding_window', 128, 16)).not.toBe('skip');
    // Rank 4096's groups come after the map is full.
    expect(f.classifyStored(4096, 1, 'sliding_window', 128, 16)).toBe('skip');
    expect(f.classifyRemoved(4096, 1)).toBe('skip');
    expect(f.classifyStored(4096, 2, 'full_attention', null, 16)).toBe('skip');
    expect(f.classifyRemoved(4096, 2)).toBe('skip');
    // Group 0 full attention is what unlabelled removals are read as: still indexed.
    expect(f.classifyStored(4096, 0, 'full_attention', null, 16)).toBe('main');
    expect(f.classifyRemoved(4096, 0)).toBe('main');
    // What it remembers is unchanged.
    expect(f.classifyStored(7, 1, 'sliding_window', 128, 16)).toEqual({
      idx: 1,
      kind: 'sliding_window',
      window: 128,
      blockSize: 16,
    });
    expect(f.classifyRemoved(7, 1)).toEqual({ idx: 1, kind: 'sliding_window', window: 128, blockSize: 16 });
  });
});
