// The workload's infinite-cache bound and working set, at the engines' block granularity: every
// prompt is hashed into chained blocks; a prompt hits the longest prefix of blocks any earlier
// prompt produced, capped like the engine (the last prompt token is always recomputed).
import { hashSpace, seqHashes } from '../../hashing/index.js';
import { U64Table } from '../../indexer/u64-table.js';
import type { Workload } from './types.js';

export interface OracleStats {
  requests: number;
  promptTokens: number;
  /** Tokens an infinite prefix cache would serve. */
  hitTokens: number;
  /** hitTokens / promptTokens: no router or cache size can do better. */
  hitRate: number;
  /** Distinct full blocks over all prompts: the working set. */
  distinctBlocks: number;
  maxPromptTokens: number;
  /** Most tokens of any prompt + its max_tokens. */
  maxSequence: number;
}

export async function oracle(
  w: Workload,
  blockSize: number,
  onProgress?: (done: number) => void,
  /** Each request's prompt length and the tokens the infinite cache serves it (in workload order). */
  onRequest?: (i: number, promptTokens: number, hitTokens: number) => void,
): Promise<OracleStats> {
  const space = hashSpace();
  // A u64 set in typed arrays, read through the hashes' lo/hi words: tens of millions of blocks
  // (bench fleet's scale runs) fit without a bigint per block.
  const seen = new U64Table(3, 1 << 16);
  let promptTokens = 0;
  let hitTokens = 0;
  let maxPrompt = 0;
  let maxSeq = 0;
  for (let i = 0; i < w.requests.length; i++) {
    const tokens = await w.promptTokens(i);
    const seq = seqHashes(tokens, blockSize, space);
    const words = new Int32Array(seq.buffer, seq.byteOffset, 2 * seq.length);
    const cap = Math.floor((tokens.length - 1) / blockSize);
    let hit = 0;
    while (hit < seq.length && hit < cap && seen.find(words[2 * hit], words[2 * hit + 1]) >= 0) hit++;
    for (let j = 0; j < seq.length; j++) seen.insert(words[2 * j], words[2 * j + 1]);
    promptTokens += tokens.length;
    hitTokens += hit * blockSize;
    onRequest?.(i, tokens.length, hit * blockSize);
    maxPrompt = Math.max(maxPrompt, tokens.length);
    maxSeq = Math.max(maxSeq, tokens.length + w.requests[i].maxTokens);
    if (onProgress && i % 64 === 0) onProgress(i);
  }
  return {
    requests: w.requests.length,
    promptTokens,
    hitTokens,
    hitRate: promptTokens === 0 ? 0 : hitTokens / promptTokens,
    distinctBlocks: seen.size,
    maxPromptTokens: maxPrompt,
    maxSequence: maxSeq,
  };
}
