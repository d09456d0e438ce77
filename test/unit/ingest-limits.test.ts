// A publisher cannot grow the index past its registration: dp ranks and LoRA adapters (namespaces)
// beyond the limits are rejected and counted, and unregistering gives the memory back.
import { encode } from '@msgpack/msgpack';
import { describe, expect, it } from 'vitest';
import { StreamIngest } from '../../src/events/listener-ingest.js';
import { NOOP_METRICS } from '../../src/events/metrics.js';
import type { Registration } from '../../src/events/registry.js';
import { TieredIndexer } from '../../src/indexer/namespaces.js';
import { KvIndexWriter, unregisterFromIndex } from '../../src/indexer/writer.js';

const BS = 4;
const reg: Registration = {
  endpoint: 'tcp://127.0.0.1:1',
  replayEndpoint: null,
  type: 'vLLM',
  model: 'm',
  loraName: null,
  tenant: 'default',
  instanceId: 'e0',
  blockSize: BS,
  dpRank: 0,
  additionalSalt: null,
  topic: '',
  backendId: 'e0',
  shared: false,
  key: 'e0|default|0',
  status: 'active',
  lastError: null,
  registeredAt: 0,
};

/** A vLLM batch (map events) of one stored block, for a rank and an adapter. */
function batch(rank: number, lora: string | null, seed: number): Uint8Array {
  const tokens = Array.from({ length: BS }, (_, i) => seed * 10 + i);
  const ev = {
    type: 'BlockStored',
    block_hashes: [BigInt(seed + 1) * 7919n],
    parent_block_hash: null,
    token_ids: tokens,
    block_size: BS,
    lora_id: null,
    medium: 'GPU',
    lora_name: lora,
    extra_keys: [null],
    group_idx: 0,
    kv_cache_spec_kind: 'full_attention',
  };
  return encode([1757500000.25, [ev], rank], { useBigInt64: true });
}

describe('ingest limits', () => {
  it('rejects ranks and adapters beyond the limits, and /unregister frees what the publisher built', () => {
    const indexer = new TieredIndexer();
    const writer = new KvIndexWriter(indexer);
    const baseline = indexer.stats();
    const ingest = new StreamIngest(reg, {
      writer,
      metrics: NOOP_METRICS,
      now: Date.now,
      limits: { maxDpRanks: 4, maxLoraAdapters: 3 },
    });
    for (let r = 0; r < 10; r++) expect(ingest.applyPayload(batch(r, null, r), false)).toEqual({ ok: true });
    for (let a = 0; a < 10; a++) ingest.applyPayload(batch(0, `adapter-${a}`, 100 + a), false);
    // Ranks 0-3 and adapters 0-2 were indexed; ranks 4-9 and adapters 3-9 were not.
    const ranks = new Set(indexer.namespaces().flatMap((ns) => ns.index.holderInfos().map((h) => h.dpRank)));
    expect([...ranks].sort()).toEqual([0, 1, 2, 3]);
    expect(
      indexer
        .namespaces()
        .map((ns) => ns.id.loraName)
        .sort(),
    ).toEqual(['adapter-0', 'adapter-1', 'adapter-2', null]);
    expect(ingest.counts.applied.rejected).toBe(6 + 7);
    expect(ingest.lastProblem).toMatch(/kv_events\.max_lora_adapters/);
    expect(indexer.stats().bytes).toBeGreaterThan(baseline.bytes);

    // What /unregister does: stop the listener (its purge), then unregister from the index.
    ingest.purge('unregistered');
    unregisterFromIndex(writer, reg, true);
    expect(indexer.stats()).toEqual(baseline);
  });
});
