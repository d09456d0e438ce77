// The `cluster:` section of the router YAML: schema (for ROUTER_SCHEMA), typed shape (for
// RouterConfig) and its mapping to ClusterOptions. Defaults come from CLUSTER_DEFAULTS.
import { arr, bool, type Infer, int, obj, type ObjectSpec, str } from '../common/schema-dsl.js';
import { CLUSTER_DEFAULTS as D, type ClusterOptionsInput } from './options.js';

const URL_RE = /^https?:\/\/[^\s/?#]+(\/[^\s?#]*)?$/;
const NATS_RE = /^(nats|tls|ws|wss):\/\/[^\s,]+(,(nats|tls|ws|wss):\/\/[^\s,]+)*$/;

export const CLUSTER_SCHEMA = obj(
  'Scale-out: router replicas kept in sync over NATS, index recovery from peers, KV events through `kvrouter relay` (docs/scale-out.md). Without nats.url and peers every replica runs alone.',
  {
    router_id: str(
      "This replica's id, unique in the deployment; also names its JetStream durable consumer (keep it stable across restarts). Default: random per process.",
      { optional: true, pattern: /^[\w.-]{1,64}$/, patternDoc: '1-64 characters of [A-Za-z0-9_.-]' },
    ),
    advertise_url: str('URL the other replicas can reach this one at (sent in heartbeats). Default: the listen URL.', {
      optional: true,
      pattern: URL_RE,
      patternDoc: 'http(s)://host:port',
    }),
    nats: obj('NATS connection (replica sync and the JetStream event fan-in).', {
      url: str('NATS server(s), e.g. nats://nats:4222 (comma-separated for several). Unset: no replica sync.', {
        optional: true,
        pattern: NATS_RE,
        patternDoc: 'nats://host:port[,nats://...]',
      }),
      subject_prefix: str(
        'Subjects: <prefix>.sync for booking changes, <prefix>.events for relayed KV events. Replicas of one deployment share it.',
        { default: D.nats.subjectPrefix, pattern: /^[\w-]+(\.[\w-]+)*$/, patternDoc: 'dot-separated tokens' },
      ),
      reconnect_wait_ms: int('Delay between connection attempts while NATS is unreachable.', {
        min: 10,
        max: 60_000,
        default: D.nats.reconnectWaitMs,
      }),
    }),
    sync: obj(
      "Replica sync: every booking change (add, prefill complete, free, speculative insert) is published so each replica sees the others' in-flight load.",
      {
        enabled: bool('Publish and apply booking changes (needs nats.url).', { default: D.sync.enabled }),
        heartbeat_ms: int('Heartbeat interval (liveness and gap detection).', {
          min: 50,
          max: 60_000,
          default: D.sync.heartbeatMs,
        }),
        peer_timeout_ms: int('A replica silent this long is gone: its bookings are freed here.', {
          min: 100,
          max: 3_600_000,
          default: D.sync.peerTimeoutMs,
        }),
      },
    ),
    peers: arr(
      'Peer router (or indexer) URLs: at start the index is restored from GET /dump of the first that answers, then /ready opens. Also managed with POST /register_peer and /deregister_peer.',
      str('A peer base URL.', { pattern: URL_RE, patternDoc: 'http(s)://host:port' }),
      { default: [] },
    ),
    recovery: obj("Index recovery at start (from peers, or from the relay's snapshot).", {
      timeout_ms: int('Per-peer /dump timeout; also the longest /ready waits for recovery before opening anyway.', {
        min: 100,
        max: 3_600_000,
        default: D.recovery.timeoutMs,
      }),
      delay_ms: int(
        'Wait before fetching a peer dump, so it covers events the new listeners may have missed while connecting.',
        { min: 0, max: 60_000, default: D.recovery.delayMs },
      ),
      token: str(
        'Bearer token sent to peers whose /dump is an admin route. Prefer KVROUTER_CLUSTER__RECOVERY__TOKEN.',
        { optional: true },
      ),
    }),
    events: obj('Where the index comes from.', {
      source: str(
        "zmq: this replica subscribes to every engine's KV events; jetstream: it consumes the stream `kvrouter relay` publishes (no ZMQ socket of its own).",
        { enum: ['zmq', 'jetstream'], default: D.events.source },
      ),
      stream: str('JetStream stream of relayed events (`kvrouter relay --stream`).', {
        default: D.events.stream,
        pattern: /^[\w-]+$/,
        patternDoc: 'letters, digits, _ and -',
      }),
      bucket: str('JetStream object store bucket of index snapshots (`kvrouter relay --bucket`).', {
        default: D.events.bucket,
        pattern: /^[\w-]+$/,
        patternDoc: 'letters, digits, _ and -',
      }),
      consumer_inactive_ms: int(
        'The server deletes a durable consumer idle this long (a replica that never came back).',
        { min: 1000, max: 7 * 86_400_000, default: D.events.consumerInactiveMs },
      ),
    }),
  },
) satisfies ObjectSpec;

/** RouterConfig['cluster']: derived from the schema (defaults applied). */
export type ClusterConfig = Infer<typeof CLUSTER_SCHEMA>;

export function clusterOptionsFromConfig(c: ClusterConfig): ClusterOptionsInput {
  return {
    ...(c.router_id !== undefined ? { routerId: c.router_id } : {}),
    ...(c.advertise_url !== undefined ? { advertiseUrl: c.advertise_url } : {}),
    nats: {
      ...(c.nats.url !== undefined ? { url: c.nats.url } : {}),
      subjectPrefix: c.nats.subject_prefix,
      reconnectWaitMs: c.nats.reconnect_wait_ms,
    },
    sync: { enabled: c.sync.enabled, heartbeatMs: c.sync.heartbeat_ms, peerTimeoutMs: c.sync.peer_timeout_ms },
    peers: c.peers,
    recovery: {
      timeoutMs: c.recovery.timeout_ms,
      delayMs: c.recovery.delay_ms,
      ...(c.recovery.token !== undefined ? { token: c.recovery.token } : {}),
    },
    events: {
      source: c.events.source,
      stream: c.events.stream,
      bucket: c.events.bucket,
      consumerInactiveMs: c.events.consumer_inactive_ms,
    },
  };
}

/** True when the section asks for anything (startRouter can skip attachCluster otherwise; with
 * events.source jetstream but no nats.url, attachCluster throws a clear error). */
export const clusterEnabled = (c: ClusterConfig): boolean =>
  c.nats.url !== undefined || c.peers.length > 0 || c.events.source === 'jetstream';
