// The one call that wires scale-out into a router: replica sync over NATS, index recovery from
// peers (or from the relay's JetStream snapshot + stream), and the status /ready and metrics need.
// Nothing here blocks routing: NATS may be down at start and come back later.
import { randomBytes } from 'node:crypto';
import type { Registry as PromRegistry } from 'prom-client';
import type { TenantUsage } from '../auth/tenant-usage.js';
import type { IndexWriter } from '../indexer/writer.js';
import type { Scheduler } from '../scheduler/scheduler.js';
import { DEFAULT_STREAM_MAX_AGE_MS } from './jetstream.js';
import { EventConsumer, type EventConsumerStatus } from './event-consumer.js';
import { type ClusterMetrics, createClusterMetrics } from './metrics.js';
import { NatsLink, type SyncLink } from './nats-link.js';
import {
  type ClusterOptions,
  type ClusterOptionsInput,
  clusterOptions,
  eventsSubject,
  syncSubject,
} from './options.js';
import { PeerList, type RecoveryResult, recoverFromPeers } from './peers.js';
import { ReplicaSync, type ReplicaSyncStatus } from './replica-sync.js';

export interface ClusterDeps {
  scheduler: Scheduler;
  /** The router's index writer (relayed events and peer recovery write through it). */
  writer: IndexWriter;
  /** This router's listen URL: skipped in the peer list, advertised unless advertiseUrl is set. */
  url: string;
  /** The list mountPeerRoutes serves (created from options.peers when absent). */
  peers?: PeerList;
  /** prom-client registry for kvrouter_cluster_* metrics. */
  metrics?: PromRegistry;
  now?: () => number;
  /** Remote load went down (on `instance`, when one booking's did): re-check the capacity queue. */
  onReleased?: (instance?: string) => void;
  log?: (line: string) => void;
  /**
   * Replica sync without NATS: the machine-local channel between `serve --workers` processes (same
   * protocol). With cluster.nats.url set, every process is a NATS replica instead.
   */
  localLink?: SyncLink;
  /** Tenant limits' use, shared with the other replicas (each enforces the whole router's). */
  tenants?: TenantUsage;
}

export interface ClusterStatus {
  router_id: string;
  ready: boolean;
  peers: string[];
  sync: ReplicaSyncStatus | null;
  recovery: { state: 'pending' | 'done' | 'timed_out' | 'none'; result: RecoveryResult | null };
  events: EventConsumerStatus | null;
}

export interface ClusterHandle {
  readonly routerId: string;
  readonly peers: PeerList;
  /** Resolves once the index is recovered (peer dump, or JetStream snapshot + tail) or recovery timed out. */
  readonly ready: Promise<void>;
  isReady(): boolean;
  status(): ClusterStatus;
  close(): Promise<void>;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms).unref());

/** What the parts below share: the caller's deps with the defaults filled in. */
type Wiring = Omit<ClusterDeps, 'metrics'> & {
  now: () => number;
  log: (line: string) => void;
  metrics: ClusterMetrics;
};

function startSync(link: SyncLink, o: ClusterOptions, w: Wiring & { routerId: string }): ReplicaSync {
  return new ReplicaSync(
    link,
    {
      scheduler: w.scheduler,
      indexer: w.writer.indexer,
      now: w.now,
      metrics: w.metrics,
      log: w.log,
      ...(w.onReleased ? { onReleased: w.onReleased } : {}),
      ...(w.tenants ? { tenants: w.tenants } : {}),
    },
    {
      routerId: w.routerId,
      subject: syncSubject(o),
      heartbeatMs: o.sync.heartbeatMs,
      peerTimeoutMs: o.sync.peerTimeoutMs,
      advertiseUrl: o.advertiseUrl ?? w.url,
    },
  );
}

/** Index recovery: the relay's snapshot and stream when events come through JetStream, else a peer's dump (if any peer). */
function startRecovery(
  recovery: ClusterStatus['recovery'],
  o: ClusterOptions,
  events: EventConsumer | null,
  peers: PeerList,
  w: Wiring,
): Promise<void> {
  if (events) {
    recovery.state = 'pending';
    return events.ready;
  }
  if (peers.list().length === 0) return Promise.resolve();
  recovery.state = 'pending';
  return (async () => {
    if (o.recovery.delayMs > 0) await sleep(o.recovery.delayMs);
    recovery.result = await recoverFromPeers(peers.list(), w.writer, w.now, {
      timeoutMs: o.recovery.timeoutMs,
      token: o.recovery.token ?? null,
      self: w.url,
      log: w.log,
    });
    if (recovery.result.peer) w.metrics.restored('peer', recovery.result.blocks);
  })();
}

export function attachCluster(deps: ClusterDeps, input: ClusterOptionsInput = {}): ClusterHandle {
  const o = clusterOptions(input);
  const routerId = o.routerId ?? `r-${randomBytes(3).toString('hex')}`;
  const log = deps.log ?? (() => {});
  const now = deps.now ?? Date.now;
  const metrics = createClusterMetrics(deps.metrics);
  const peers = deps.peers ?? new PeerList(o.peers);
  if (deps.peers) for (const p of o.peers) peers.add(p);

  const link = o.nats.url
    ? new NatsLink({ url: o.nats.url, name: `kvrouter ${routerId}`, reconnectWaitMs: o.nats.reconnectWaitMs, log })
    : null;
  const syncLink: SyncLink | null = link ?? deps.localLink ?? null;
  const sync = syncLink && o.sync.enabled ? startSync(syncLink, o, { ...deps, routerId, now, log, metrics }) : null;
  if (o.events.source === 'jetstream' && !link)
    throw new Error('cluster.events.source=jetstream needs cluster.nats.url');
  const events =
    link && o.events.source === 'jetstream'
      ? new EventConsumer(
          link,
          { writer: deps.writer, now, metrics, log },
          {
            routerId,
            subject: eventsSubject(o),
            stream: o.events.stream,
            bucket: o.events.bucket,
            streamMaxAgeMs: DEFAULT_STREAM_MAX_AGE_MS,
            consumerInactiveMs: o.events.consumerInactiveMs,
            resyncWaitMs: o.recovery.timeoutMs,
          },
        )
      : null;

  const recovery: ClusterStatus['recovery'] = { state: 'none', result: null };
  const recovered = startRecovery(recovery, o, events, peers, { ...deps, now, log, metrics });

  let isReady = false;
  const ready = Promise.race([
    recovered.then(() => 'done' as const),
    sleep(o.recovery.delayMs + o.recovery.timeoutMs * Math.max(1, peers.list().length)).then(
      () => 'timed_out' as const,
    ),
  ]).then((how) => {
    if (recovery.state === 'pending') recovery.state = how;
    if (how === 'timed_out') log('cluster: index recovery did not finish in time; ready with what we have');
    isReady = true;
  });

  return {
    routerId,
    peers,
    ready,
    isReady: () => isReady,
    status: () => ({
      router_id: routerId,
      ready: isReady,
      peers: peers.list(),
      sync: sync?.status() ?? null,
      recovery,
      events: events?.status() ?? null,
    }),
    async close() {
      sync?.close();
      await events?.close();
      await link?.close();
    },
  };
}
