// Dump and restore of the whole index (GET /dump, peer recovery): a restored index answers every
// query exactly like the original, keeps engine-hash mappings and speculative expiries, and the
// dump survives a JSON round trip with exact u64 values.
import { describe, expect, it } from 'vitest';
import { parseJson, stringifyJson } from '../../src/common/json.js';
import { EventApplier } from '../../src/indexer/apply.js';
import { hashSpace, seqHashes } from '../../src/hashing/index.js';
import { dumpIndex, type IndexSnapshot, restoreIndex } from '../../src/indexer/snapshot.js';
import { TieredIndexer } from '../../src/indexer/namespaces.js';

const tokens = Array.from({ length: 64 }, (_, i) => 1000 + i);
const ns = { model: 'm', blockSize: 4, loraName: null, salt: null, tenant: 'default' };

function populated(): TieredIndexer {
  const idx = new TieredIndexer();
  idx.bindBackend('store', null);
  const ap = new EventApplier(idx);
  const base = {
    event_id: null,
    timestamp: null,
    model_name: 'm',
    block_size: 4,
    additional_salt: null,
    lora_name: null,
    tenant_id: 'default',
    dp_rank: 0,
  };
  // Engine-native hashes with token_ids (dual key), a CPU tier, a second rank, a shared pool.
  ap.apply({
    ...base,
    event_type: 'stored',
    backend_id: 'a',
    medium: 'GPU',
    seq_hashes: [(1n << 64n) - 1n, 77n, 78n],
    base_block_idx: 0,
    parent_hash: null,
    token_ids: tokens.slice(0, 12),
  });
  ap.apply({
    ...base,
    event_type: 'stored',
    backend_id: 'a',
    medium: 'CPU',
    seq_hashes: [79n],
    base_block_idx: 3,
    parent_hash: 78n,
    token_ids: tokens.slice(12, 16),
  });
  ap.apply({
    ...base,
    event_type: 'stored',
    backend_id: 'b',
    medium: 'GPU',
    dp_rank: 1,
    seq_hashes: [...seqHashes(tokens.slice(0, 8), 4, hashSpace())],
    base_block_idx: 0,
    parent_hash: null,
    token_ids: null,
  });
  ap.apply({
    ...base,
    event_type: 'stored',
    backend_id: 'store',
    medium: 'cpu',
    seq_hashes: [...seqHashes(tokens.slice(0, 20), 4, hashSpace())],
    base_block_idx: 0,
    parent_hash: null,
    token_ids: null,
  });
  const n = idx.namespace(ns).index;
  n.store(n.speculativeHolder('c', 0, 2000), seqHashes(tokens.slice(0, 24), 4, hashSpace()), null, 5000);
  return idx;
}

describe('index snapshots', () => {
  it('restore into an empty indexer answers identically, through a JSON round trip', () => {
    const a = populated();
    const snap = dumpIndex(a, 1000);
    const text = stringifyJson(snap);
    expect(text).toContain('18446744073709551615'); // exact u64 on the wire
    const b = new TieredIndexer();
    restoreIndex(b, parseJson(text) as unknown as IndexSnapshot, 1000);
    for (const len of [4, 12, 16, 20, 24, 64]) {
      for (const now of [1000, 4999, 5000]) {
        expect(b.queryTokens(ns, tokens.slice(0, len), now)).toEqual(a.queryTokens(ns, tokens.slice(0, len), now));
      }
    }
    expect(b.stats()).toEqual(a.stats());
  });

  it('keeps engine-hash mappings, so removals by engine hash still apply after a restore', () => {
    const b = new TieredIndexer();
    restoreIndex(b, dumpIndex(populated(), 1000), 1000);
    const ap = new EventApplier(b);
    ap.apply({
      event_id: null,
      timestamp: null,
      model_name: 'm',
      block_size: 4,
      additional_salt: null,
      lora_name: null,
      tenant_id: 'default',
      backend_id: 'a',
      medium: 'GPU',
      dp_rank: 0,
      event_type: 'removed',
      seq_hashes: [77n],
      base_block_idx: null,
    });
    const a = b.queryTokens(ns, tokens.slice(0, 16), 1000).candidates.find((c) => c.instance === 'a');
    expect(a).toEqual({ instance: 'a', dpRank: 0, device: 1, host: 1, disk: 1 });
  });

  it('drops speculative entries that expired before the restore', () => {
    const b = new TieredIndexer();
    restoreIndex(b, dumpIndex(populated(), 1000), 6000);
    expect(b.queryTokens(ns, tokens.slice(0, 24), 6000).candidates.find((c) => c.instance === 'c')).toBeUndefined();
  });
});
