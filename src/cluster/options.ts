// Cluster options: the `cluster:` section of the router config, as the cluster module reads it.
// Defaults here are the ones proposed for ROUTER_SCHEMA (see docs/scale-out.md).

export interface ClusterOptions {
  /** Unique per replica; default: random per process. Also names the JetStream durable consumer. */
  routerId?: string;
  /** URL other replicas reach this one at (heartbeats); default: the router's listen URL. */
  advertiseUrl?: string;
  nats: {
    /** nats://host:port[,nats://...]; unset: no replica sync, no JetStream (each replica alone). */
    url?: string;
    /** Subjects: <prefix>.sync (replica sync), <prefix>.events (relayed KV events). */
    subjectPrefix: string;
    reconnectWaitMs: number;
  };
  sync: {
    enabled: boolean;
    heartbeatMs: number;
    peerTimeoutMs: number;
  };
  /** Peer URLs for index recovery at start (GET /dump). */
  peers: string[];
  recovery: {
    timeoutMs: number;
    /** Wait before fetching (ZMQ slow-joiner window, as Dynamo's standalone indexer). */
    delayMs: number;
    /** Bearer token sent to peers whose /dump is an admin route. */
    token?: string;
  };
  events: {
    /** zmq: this router subscribes to every engine; jetstream: it consumes `kvrouter relay`. */
    source: 'zmq' | 'jetstream';
    stream: string;
    bucket: string;
    /** A durable consumer idle this long is deleted by the server (a replica that never came back). */
    consumerInactiveMs: number;
  };
}

export const CLUSTER_DEFAULTS: ClusterOptions = {
  nats: { subjectPrefix: 'kvrouter', reconnectWaitMs: 500 },
  sync: { enabled: true, heartbeatMs: 1000, peerTimeoutMs: 5000 },
  peers: [],
  recovery: { timeoutMs: 10_000, delayMs: 1000 },
  events: { source: 'zmq', stream: 'KVROUTER_EVENTS', bucket: 'kvrouter-snapshots', consumerInactiveMs: 15 * 60_000 },
};

type DeepPartial<T> = {
  [K in keyof T]?: T[K] extends Array<infer _U> ? T[K] : T[K] extends object ? DeepPartial<T[K]> : T[K];
};
export type ClusterOptionsInput = DeepPartial<ClusterOptions>;

export function clusterOptions(o: ClusterOptionsInput = {}): ClusterOptions {
  const d = CLUSTER_DEFAULTS;
  return {
    ...(o.routerId !== undefined ? { routerId: o.routerId } : {}),
    ...(o.advertiseUrl !== undefined ? { advertiseUrl: o.advertiseUrl } : {}),
    nats: { ...d.nats, ...o.nats },
    sync: { ...d.sync, ...o.sync },
    peers: o.peers ?? d.peers,
    recovery: { ...d.recovery, ...o.recovery },
    events: { ...d.events, ...o.events },
  };
}

export const syncSubject = (o: ClusterOptions): string => `${o.nats.subjectPrefix}.sync`;
export const eventsSubject = (o: ClusterOptions): string => `${o.nats.subjectPrefix}.events`;
