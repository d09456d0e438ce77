// The `kv_events:` section of the router YAML (listener behaviour for every KV-event subscription)
// and the matching `kvrouter indexer` / `relay` flags, mapped to ListenerOptions.
import { bool, type Infer, int, obj, type ObjectSpec, str } from '../common/schema-dsl.js';
import { ZMQ_CLIENTS, type ZmqClient } from './sub-transport.js';
import { DEFAULT_INGEST_LIMITS, type IngestLimits } from './listener-ingest.js';
import { DEFAULT_LISTENER_OPTIONS as D, type ListenerOptions } from './zmq-listener.js';

export const KV_EVENTS_SCHEMA = obj(
  'How KV-event listeners subscribe, recover and give up (docs/events.md). Applies to YAML instances, /register and relays alike.',
  {
    zmq_client: str(
      'SUB implementation: builtin (ZMTP in Node, tcp:// and ipc://, several times cheaper per message), libzmq (the zeromq binding: any transport or security mechanism), auto (builtin where it can).',
      { enum: ZMQ_CLIENTS, default: D.zmqClient },
    ),
    reconnect_ms: int('First reconnect delay after a failed connection attempt (doubles up to reconnect_max_ms).', {
      min: 1,
      max: 600_000,
      default: D.reconnectMs,
    }),
    reconnect_max_ms: int('Longest reconnect delay.', { min: 1, max: 3_600_000, default: D.reconnectMaxMs }),
    heartbeat_ms: int(
      'ZMTP heartbeat: PING the publisher this often and drop the connection after 3x without data (0: off). At most 20 s: libzmq cannot hold a longer PING TTL (3x). Publishers on libzmq < 4.2 do not answer PINGs: set 0 for them.',
      { min: 0, max: 20_000, default: D.heartbeatMs },
    ),
    disconnect_purge_ms: int('Purge a stream disconnected this long: its blocks can no longer be trusted (0: never).', {
      min: 0,
      max: 86_400_000,
      default: D.disconnectPurgeMs,
    }),
    silence_purge_ms: int('Purge a connected stream silent this long (0: never; idle engines publish nothing).', {
      min: 0,
      max: 86_400_000,
      default: D.silencePurgeMs,
    }),
    replay_timeout_ms: int(
      'Longest silence between replay replies before the replay counts as failed (the stream is purged).',
      { min: 10, max: 600_000, default: D.replayTimeoutMs },
    ),
    max_replay_batches: int('Most batches one replay may return.', {
      min: 1,
      max: 10_000_000,
      default: D.maxReplayBatches,
    }),
    max_held: int('Live batches held while a replay runs; beyond it the replay is abandoned and the stream purged.', {
      min: 1,
      max: 10_000_000,
      default: D.maxHeld,
    }),
    bootstrap_replay: bool(
      'On first connect, replay what the publisher still buffers (a late router rebuilds without waiting for new traffic).',
      { default: D.bootstrapReplay },
    ),
    tail_check_ms: int(
      'With a replay endpoint, this long after the last live batch re-read it once, to catch a batch dropped at the end of a burst (0: off).',
      { min: 0, max: 3_600_000, default: D.tailCheckMs },
    ),
    receive_hwm: int(
      'libzmq client: messages queued in the socket before it drops (the builtin client is flow-controlled by TCP).',
      { min: 0, max: 100_000_000, default: D.receiveHwm },
    ),
    max_message_bytes: int('Largest accepted message; a larger one drops the connection.', {
      min: 1024,
      max: 2 ** 31 - 1,
      default: D.maxMessageBytes,
    }),
    on_decode_error: str('An undecodable batch is skipped and counted (skip) or also purges the stream (purge).', {
      enum: ['skip', 'purge'],
      default: D.onDecodeError,
    }),
    kv_cache_groups: str(
      "KV-cache groups of hybrid models (docs/events.md, KV-cache groups): all keeps each instance's sliding-window and Mamba groups beside the prefix index and ends a predicted hit where every group accepts it, as the engine does; full_attention indexes the full-attention groups only (the behaviour before hybrid support, which over-claims hits on hybrid engines; kept to measure that).",
      { enum: ['all', 'full_attention'], default: 'all' },
    ),
    max_dp_ranks: int(
      "Distinct dp ranks one publisher's batches may name (a batch's data_parallel_rank overrides the registration's); events beyond are rejected and counted. Each rank costs index memory.",
      { min: 1, max: 65_536, default: DEFAULT_INGEST_LIMITS.maxDpRanks },
    ),
    max_lora_adapters: int(
      'Distinct LoRA adapters one publisher may name; each is a namespace of the index. Events beyond are rejected and counted.',
      { min: 1, max: 100_000, default: DEFAULT_INGEST_LIMITS.maxLoraAdapters },
    ),
  },
) satisfies ObjectSpec;

/** RouterConfig['kv_events']: derived from the schema (defaults applied). */
export type KvEventsConfig = Infer<typeof KV_EVENTS_SCHEMA>;

export function ingestLimitsFromConfig(c: KvEventsConfig): IngestLimits {
  return { maxDpRanks: c.max_dp_ranks, maxLoraAdapters: c.max_lora_adapters };
}

export function listenerOptionsFromConfig(c: KvEventsConfig): ListenerOptions {
  return {
    zmqClient: c.zmq_client,
    reconnectMs: c.reconnect_ms,
    reconnectMaxMs: Math.max(c.reconnect_ms, c.reconnect_max_ms),
    heartbeatMs: c.heartbeat_ms,
    disconnectPurgeMs: c.disconnect_purge_ms,
    silencePurgeMs: c.silence_purge_ms,
    replayTimeoutMs: c.replay_timeout_ms,
    maxReplayBatches: c.max_replay_batches,
    maxHeld: c.max_held,
    maxReplayRounds: D.maxReplayRounds,
    bootstrapReplay: c.bootstrap_replay,
    tailCheckMs: c.tail_check_ms,
    receiveHwm: c.receive_hwm,
    maxMessageBytes: c.max_message_bytes,
    onDecodeError: c.on_decode_error,
  };
}
