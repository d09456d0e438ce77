export { xxh3_64, U64_MASK } from './xxh3.js';
export {
  DEFAULT_HASH_SEED,
  hashingBackend,
  hashSpace,
  localBlockHashes,
  seqHashes,
  seqHashesTransient,
  chainHash,
  chainLocals,
  completeBlocks,
  type HashSpace,
  type HashSpaceOptions,
} from './seq-hash.js';
