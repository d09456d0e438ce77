// aibrix: AIBrix's `prefix-cache` router (vllm-project/aibrix pkg/plugins/gateway/algorithms/
// prefix_cache.go, least_request.go, util.go and pkg/utils/prefixcacheindexer/hash.go at e3e10f9),
// with its code's thresholds (its docs say 16 and 2; the code says 8 and 1):
//   running(pod) = the gateway's own count of requests running there
//   if max - min running > 8: only the pods at the minimum are matched (load imbalance)
//   match: the text in blocks of 4 characters against the pool's prefix table (parts/prefix-table.ts):
//          per pod, the percent of the prompt's blocks matched from the start
//   if any pod matched: shuffle them, sort by percent descending then running ascending (stable),
//          take the first with running <= mean + 1 x standard deviation (sample) of all pods' running
//   else, or if none qualifies: the pod with the fewest running requests, uniformly among equals
// then the prompt's blocks name the chosen pod. Text is characters (its default "character"
// tokenizer; AIBrix counts UTF-8 bytes, here code points) or token ids where the router has none.
import { hashSpace } from '../../hashing/index.js';
import { PrefixTable, tableBlockHashes } from './parts/prefix-table.js';
import { argminRandomTies, ofInstance, workerKey } from './parts/workers.js';
import { definePolicy } from './types.js';

export const AIBRIX = {
  imbalanceAbsCount: 8,
  stdDevFactor: 1,
} as const;

interface AibrixMemo {
  hashes: BigUint64Array;
}

export const aibrix = definePolicy({
  name: 'aibrix',
  summary: "AIBrix's prefix-cache router: 4-character block table, imbalance gate 8, mean + 1 sd; a peer baseline",
  needs: {
    tokens: false,
    index: false,
    predictions: false,
    sessionKey: false,
    target: false,
    text: true,
    engineMetrics: false,
  },
  fallback: null,
  busyFilter: true,
  adminOnly: false,
  predictionTtlKey: 'speculative_ttl_ms',
  predictionTtlMs: 0,
  peer: {
    source:
      'vllm-project/aibrix pkg/plugins/gateway/algorithms/prefix_cache.go (+ least_request.go, util.go), pkg/utils/prefixcacheindexer/hash.go',
    version: 'e3e10f9 (2026-08-22)',
    defaults:
      'imbalance gate max - min running > 8, mean + 1 sd; blocks of 4 characters, table of 200,000 blocks, 20 min idle expiry',
  },
  createState: () => new PrefixTable(),
  pick(c, ctx) {
    if (c.length === 0) return -1;
    const running = c.map((x) => x.load.activeRequests);
    const min = Math.min(...running);
    const max = Math.max(...running);
    const ready = max - min > AIBRIX.imbalanceAbsCount ? c.filter((_, i) => running[i] === min) : c;
    const hashes = ctx.text
      ? tableBlockHashes(ctx.text.symbols, hashSpace({ loraName: ctx.ns.loraName, salt: ctx.ns.salt }))
      : new BigUint64Array(0);
    const matched = ctx.state.match(hashes, ready.map(workerKey), ctx.now);
    ctx.memo = { hashes } satisfies AibrixMemo;
    if (matched.size > 0) {
      const mean = running.reduce((a, b) => a + b, 0) / running.length;
      const sd = sampleStdDev(running, mean);
      const idx = c.map((x, i) => [i, matched.get(workerKey(x))] as const).filter(([, pct]) => pct !== undefined);
      shuffle(idx, ctx.rand);
      idx.sort((a, b) => (a[1] === b[1] ? running[a[0]] - running[b[0]] : b[1]! - a[1]!));
      for (const [i] of idx) if (running[i] <= mean + AIBRIX.stdDevFactor * sd) return i;
    }
    return argminRandomTies(running, ctx.rand);
  },
  booked(table, e) {
    const m = e.memo as AibrixMemo | null;
    if (m && m.hashes.length > 0) table.add(m.hashes, workerKey(e.chosen), e.now);
  },
  dropInstance(table, instance) {
    table.removePod((p) => ofInstance(p, instance));
  },
});

/** AIBrix's standardDeviation: the sample deviation (n - 1), 0 for one value. */
function sampleStdDev(xs: readonly number[], mean: number): number {
  if (xs.length <= 1) return 0;
  let ss = 0;
  for (const x of xs) ss += (x - mean) ** 2;
  return Math.sqrt(ss / (xs.length - 1));
}

function shuffle<T>(a: T[], rand: () => number): void {
  for (let i = a.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [a[i], a[j]] = [a[j], a[i]];
  }
}
