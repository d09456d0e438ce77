// The normalized KV event: every engine adapter (vLLM, SGLang, LMCache, Mooncake, JSON /events)
// turns its wire format into these, and only these reach the indexer.
// Field names follow the Mooncake Conductor "KV Events API" (RFC #1527).

/**
 * u64 hashes and u32 tokens: plain arrays, or typed arrays straight from the wire decoder (which
 * spares a bigint per hash and a copy per list). Consumers read them by index and length only.
 */
export type U64List = readonly bigint[] | BigUint64Array;
export type U32List = readonly number[] | Uint32Array;

/**
 * Identity of one ordered event stream (event_id is consecutive within it). A type, not an
 * interface: its copy (streamIdentityOf) is also a wire object (cluster/event-wire.ts's Obj).
 */
export type StreamIdentity = {
  model_name: string;
  block_size: number;
  additional_salt: string | null;
  lora_name: string | null;
  tenant_id: string;
  backend_id: string;
  /** Raw medium name as the engine sent it (canonicalized by the applier); null = device. */
  medium: string | null;
  dp_rank: number;
};

/**
 * A stream's identity fields copied out of an event (a kept identity must not keep the event and
 * its hash and token lists alive; a wire form must not carry the event's other fields).
 */
export function streamIdentityOf(s: StreamIdentity): StreamIdentity {
  return {
    model_name: s.model_name,
    block_size: s.block_size,
    additional_salt: s.additional_salt,
    lora_name: s.lora_name,
    tenant_id: s.tenant_id,
    backend_id: s.backend_id,
    medium: s.medium,
    dp_rank: s.dp_rank,
  };
}

interface EventBase extends StreamIdentity {
  /** Monotonic per stream; null when the transport orders events itself (ZMQ seq covers a batch). */
  event_id: bigint | null;
  /** Unix ms, informational. */
  timestamp: number | null;
}

/**
 * A KV-cache group of a hybrid model that is not full attention (vLLM's `group_idx` with its
 * `kv_cache_spec_kind`): its blocks do not extend the prefix, they decide where a hit may end
 * (src/indexer/groups.ts). Events without one belong to the full-attention group(s).
 */
export interface KvCacheGroup {
  /** The engine's group_idx. */
  idx: number;
  kind: 'sliding_window' | 'mamba';
  /** Sliding window in tokens (sliding_window only; 0 for mamba). */
  window: number;
  /** The group's own block size in tokens as the engine publishes it (before any split). */
  blockSize: number;
}

export interface StoredEvent extends EventBase {
  event_type: 'stored';
  /** Absent: a full-attention block (the prefix index). */
  group?: KvCacheGroup;
  /** Hashes of consecutive blocks as the publisher computed them (router seq hashes or engine-native). */
  seq_hashes: U64List;
  /** Zero-based depth of the first block, when known. */
  base_block_idx: number | null;
  /** Hash (same space as seq_hashes) of the block before the first one; null = root. */
  parent_hash: bigint | null;
  /** Tokens of all blocks; present when the publisher's hashes are not the router standard. */
  token_ids: U32List | null;
}

export interface RemovedEvent extends EventBase {
  event_type: 'removed';
  /** Absent: a full-attention block. */
  group?: KvCacheGroup;
  seq_hashes: U64List;
  base_block_idx: number | null;
}

export interface ClearedEvent extends EventBase {
  event_type: 'cleared';
}

export type KvEvent = StoredEvent | RemovedEvent | ClearedEvent;

/** Outcome counters, labels of `kv_events_applied_total{status}`. */
export type ApplyStatus = 'ok' | 'gap' | 'replayed' | 'orphan' | 'decode_error' | 'purged' | 'rejected';
