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

function counter(reg: PromRegistry, name: string, help: string, label: string): Counter<string> {
  return getOrCreate(reg, name, () => new Counter({ name, help, labelNames: [label], registers: [reg] }));
}

/** A gauge set by `collect` at scrape time. */
function gauge(
  reg: PromRegistry,
  name: string,
  help: string,
  collect: (g: Gauge<string>) => void,
  labelNames: string[] = [],
): void {
  getOrCreate(
    reg,
    name,
    () =>
      new Gauge({
        name,
        help,
        labelNames,
        registers: [reg],
        collect() {
          collect(this);
        },
      }),
  );
}

export function createClusterMetrics(reg: PromRegistry | undefined): ClusterMetrics {
  if (!reg) return NOOP_CLUSTER_METRICS;
  const connected: Partial<Record<Link, () => boolean>> = {};
  let peers: (() => number) | null = null;
  let remote: (() => number) | null = null;
  gauge(
    reg,
    'kvrouter_cluster_connected',
    '1 while the NATS link is connected (link: sync = replica sync, events = JetStream event fan-in)',
    (g) => {
      for (const [link, up] of Object.entries(connected)) g.set({ link }, up() ? 1 : 0);
    },
    ['link'],
  );
  gauge(reg, 'kvrouter_cluster_peers', 'Other router replicas heard from within the peer timeout', (g) => {
    if (peers) g.set(peers());
  });
  gauge(
    reg,
    'kvrouter_cluster_remote_bookings',
    "Bookings of other replicas counted in this router's load view",
    (g) => {
      if (remote) g.set(remote());
    },
  );
  const pub = counter(reg, 'kvrouter_cluster_messages_published_total', 'Cluster messages published, by kind', 'kind');
  const rec = counter(
    reg,
    'kvrouter_cluster_messages_received_total',
    'Cluster messages received and applied, by kind',
    'kind',
  );
  const drop = counter(
    reg,
    'kvrouter_cluster_messages_dropped_total',
    'Cluster messages not sent or not applied, by reason',
    'reason',
  );
  const resets = counter(
    reg,
    'kvrouter_cluster_peer_resets_total',
    "Times a peer's remote bookings were all freed (gap, restarted, expired)",
    'reason',
  );
  const restores = counter(
    reg,
    'kvrouter_cluster_snapshot_restores_total',
    'Index snapshots restored at start or resync, by source',
    'source',
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
      if (leader)
        gauge(
          reg,
          'kvrouter_relay_leader',
          '1 while this relay publishes (holds the --ha lease, or runs without --ha)',
          (g) => g.set(leader() ? 1 : 0),
        );
    },
  };
}
