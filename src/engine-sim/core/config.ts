// Knobs of one engine core (one DP rank). Defaults follow vLLM / Dynamo's mocker where they exist.
import type { HashFlavor } from './engine-hash.js';
import type { HybridSpec } from './hybrid-cache.js';
import { mockerModel } from './mocker-model.js';
import type { PerfModel } from './perf-model.js';

export interface CoreConfig {
  blockSize: number;
  numGpuBlocks: number;
  /** Host-tier capacity in blocks; 0 disables the tier. */
  numCpuBlocks: number;
  maxNumSeqs: number;
  maxNumBatchedTokens: number;
  enableChunkedPrefill: boolean;
  enablePrefixCaching: boolean;
  /** Time of a pass from its contents (default: the Dynamo mocker's polynomials). */
  perfModel: PerfModel;
  speedup: number;
  decodeSpeedup: number;
  cpuLoadFraction: number;
  seed: number;
  hashFlavor: HashFlavor;
  /** vLLM's PYTHONHASHSEED, the root of the sha256_cbor chain. */
  pythonHashSeed: string;
  /** Router-standard XXH3 seed, used only for /debug/cache. */
  routerHashSeed: bigint;
  /** Token ids random output is drawn from (ordinary ids, so decode is clean). */
  outputVocab: Uint32Array;
  /** A second KV-cache group (hybrid model, hybrid-cache.ts); null: full attention only. */
  hybrid: HybridSpec | null;
  /** Blocks of the second group's pool (0: numGpuBlocks). */
  hybridBlocks: number;
}

export const CORE_DEFAULTS: Omit<CoreConfig, 'outputVocab'> = {
  blockSize: 16,
  numGpuBlocks: 2048,
  numCpuBlocks: 0,
  maxNumSeqs: 256,
  maxNumBatchedTokens: 8192,
  enableChunkedPrefill: true,
  enablePrefixCaching: true,
  perfModel: mockerModel,
  speedup: 1,
  decodeSpeedup: 1,
  cpuLoadFraction: 0.2,
  seed: 0,
  hashFlavor: 'vllm',
  pythonHashSeed: '0',
  routerHashSeed: 1337n,
  hybrid: null,
  hybridBlocks: 0,
};

/** Default output vocabulary: a contiguous range of ordinary ids. */
export function rangeVocab(from: number, to: number): Uint32Array {
  const out = new Uint32Array(Math.max(1, to - from));
  for (let i = 0; i < out.length; i++) out[i] = from + i;
  return out;
}

export function validateCoreConfig(c: CoreConfig): string[] {
  const errs: string[] = [];
  const posInt = (name: string, v: number): void => {
    if (!Number.isInteger(v) || v <= 0) errs.push(`${name} must be a positive integer, got ${v}`);
  };
  posInt('block-size', c.blockSize);
  posInt('num-gpu-blocks', c.numGpuBlocks);
  posInt('max-num-seqs', c.maxNumSeqs);
  posInt('max-num-batched-tokens', c.maxNumBatchedTokens);
  if (!Number.isInteger(c.numCpuBlocks) || c.numCpuBlocks < 0)
    errs.push(`num-cpu-blocks must be >= 0, got ${c.numCpuBlocks}`);
  if (!(c.speedup > 0)) errs.push(`speedup must be > 0, got ${c.speedup}`);
  if (!(c.decodeSpeedup > 0)) errs.push(`decode-speedup must be > 0, got ${c.decodeSpeedup}`);
  if (!(c.cpuLoadFraction >= 0)) errs.push(`cpu-load-fraction must be >= 0, got ${c.cpuLoadFraction}`);
  if (c.outputVocab.length === 0) errs.push('output vocabulary is empty');
  if (!Number.isInteger(c.hybridBlocks) || c.hybridBlocks < 0)
    errs.push(`hybrid-blocks must be >= 0, got ${c.hybridBlocks}`);
  return errs;
}
