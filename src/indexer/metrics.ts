// Index gauges read lazily at scrape time: the core stays free of metrics code.
import { Counter, Gauge, type Registry } from 'prom-client';
import type { OverlapResult } from './block-index.js';
import type { TieredIndexer } from './namespaces.js';

export interface IndexMetrics {
  observeQuery(route: string, result: OverlapResult): void;
}

export function registerIndexMetrics(registry: Registry, indexer: TieredIndexer): IndexMetrics {
  const stat = (name: string, help: string, pick: (s: ReturnType<TieredIndexer['stats']>) => number) =>
    new Gauge({
      name,
      help,
      registers: [registry],
      collect() {
        this.set(pick(indexer.stats()));
      },
    });
  stat('kvrouter_index_blocks', 'Distinct seq hashes in the index (all namespaces)', (s) => s.blocks);
  stat('kvrouter_index_block_holders', 'Indexed (block, holder) pairs', (s) => s.records);
  stat('kvrouter_index_bytes', 'Bytes held by the index arrays', (s) => s.bytes);
  stat('kvrouter_index_namespaces', 'Namespaces (model, block size, LoRA, salt, tenant)', (s) => s.namespaces);
  const queries = new Counter({
    name: 'kvrouter_index_queries_total',
    help: 'Index queries by route',
    labelNames: ['route'],
    registers: [registry],
  });
  const matched = new Counter({
    name: 'kvrouter_index_query_matched_blocks_total',
    help: 'Longest matched blocks summed over queries',
    labelNames: ['route'],
    registers: [registry],
  });
  return {
    observeQuery(route, result) {
      queries.inc({ route });
      let best = 0;
      for (const c of result.candidates) best = Math.max(best, c.disk);
      matched.inc({ route }, Math.max(best, result.sharedBlocks));
    },
  };
}
