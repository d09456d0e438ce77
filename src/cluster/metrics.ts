// kvrouter_cluster_* metrics, created against a prom-client Registry the caller owns. The cluster
// code calls this small interface; without a registry it is a no-op.
import { Counter, Gauge, type Registry as PromRegistry } from 'prom-client';

export type Link = 'sync' | 'events';
export type DropReason = 'disconnected' | 'decode_error' | 'conflict' | 'stale' | 'publish_failed';

export interface ClusterMetrics {
  published(kind: string, n?: number): void;
  received(kind: string): void;
  dropped(reason: DropReason): void;
  peerReset(reason: string, freed: number): void;
  restored(source: 'peer' | 'jetstream', blocks: number): void;
  /** Gauges read at scrape time. */
  watch(sources: {
    connected?: Partial<Record<Link, () => boolean>>;
    peers?: () => number;
    remoteBookings?: () => number;
    relayLeader?: () => boolean;
  }): void;
}

export const NOOP_CLUSTER_METRICS: ClusterMetrics = {
  published: () => {},
  received: () => {},
  dropped: () => {},
  peerReset: () => {},
  restored: () => {},
  watch: () => {},
};

function getOrCreate<T>(reg: PromRegistry, name: string, make: () => T): T {
  return (reg.getSingleMetric(name) as T | undefined) ?? make();
}

export function createClusterMetrics(reg: PromRegistry | undefined): ClusterMetrics {
  if (!reg) return NOOP_CLUSTER_METRICS;
  const registers = [reg];
  const connected: Partial<Record<Link, () => boolean>> = {};
  let peers: (() => number) | null = null;
  let remote: (() => number) | null = null;
  getOrCreate(
    reg,
    'kvrouter_cluster_connected',
    () =>
      new Gauge({
        name: 'kvrouter_cluster_connected',
        help: '1 while the NATS link is connected (link: sync = replica sync, events = JetStream event fan-in)',
        labelNames: ['link'],
        registers,
        collect() {
          for (const [link, up] of Object.entries(connected)) this.set({ link }, up() ? 1 : 0);
        },
      }),
  );
  getOrCreate(
    reg,
    'kvrouter_cluster_peers',
    () =>
      new Gauge({
        name: 'kvrouter_cluster_peers',
        help: 'Other router replicas heard from within the peer timeout',
        registers,
        collect() {
          if (peers) this.set(peers());
        },
      }),
  );
  getOrCreate(
    reg,
    'kvrouter_cluster_remote_bookings',
    () =>
      new Gauge({
        name: 'kvrouter_cluster_remote_bookings',
        help: "Bookings of other replicas counted in this router's load view",
        registers,
        collect() {
          if (remote) this.set(remote());
        },
      }),
  );
  const pub = getOrCreate(
    reg,
    'kvrouter_cluster_messages_published_total',
    () =>
      new Counter({
        name: 'kvrouter_cluster_messages_published_total',
        help: 'Cluster messages published, by kind',
        labelNames: ['kind'],
        registers,
      }),
  );
  const rec = getOrCreate(
    reg,
    'kvrouter_cluster_messages_received_total',
    () =>
      new Counter({
        name: 'kvrouter_cluster_messages_received_total',
        help: 'Cluster messages received and applied, by kind',
        labelNames: ['kind'],
        registers,
      }),
  );
  const drop = getOrCreate(
    reg,
    'kvrouter_cluster_messages_dropped_total',
    () =>
      new Counter({
        name: 'kvrouter_cluster_messages_dropped_total',
        help: 'Cluster messages not sent or not applied, by reason',
        labelNames: ['reason'],
        registers,
      }),
  );
  const resets = getOrCreate(
    reg,
    'kvrouter_cluster_peer_resets_total',
    () =>
      new Counter({
        name: 'kvrouter_cluster_peer_resets_total',
        help: "Times a peer's remote bookings were all freed (gap, restarted, expired)",
        labelNames: ['reason'],
        registers,
      }),
  );
  const restores = getOrCreate(
    reg,
    'kvrouter_cluster_snapshot_restores_total',
    () =>
      new Counter({
        name: 'kvrouter_cluster_snapshot_restores_total',
        help: 'Index snapshots restored at start or resync, by source',
        labelNames: ['source'],
        registers,
      }),
  );
  return {
    published: (kind, n = 1) => pub.inc({ kind }, n),
    received: (kind) => rec.inc({ kind }),
    dropped: (reason) => drop.inc({ reason }),
    peerReset: (reason) => resets.inc({ reason }),
    restored: (source) => restores.inc({ source }),
    watch(s) {
      Object.assign(connected, s.connected ?? {});
      peers = s.peers ?? peers;
      remote = s.remoteBookings ?? remote;
      const leader = s.relayLeader;
      // Only relays have it: registered on demand, so a router's /metrics does not show a 0.
      if (leader) {
        getOrCreate(
          reg,
          'kvrouter_relay_leader',
          () =>
            new Gauge({
              name: 'kvrouter_relay_leader',
              help: '1 while this relay publishes (holds the --ha lease, or runs without --ha)',
              registers,
              collect() {
                this.set(leader() ? 1 : 0);
              },
            }),
        );
      }
    },
  };
}
