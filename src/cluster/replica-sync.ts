// Replica sync adapter: publishes this router's booking changes on NATS core and applies the other
// replicas' through RemoteBookings. Heartbeats carry liveness (and the sender's URL); a peer silent
// for peerTimeoutMs has its bookings freed. A replica that joins late or sees a gap asks the sender
// to re-announce its in-flight bookings (`resend`), so its load view converges instead of waiting
// for those requests to finish. Routing never waits on NATS: hooks publish or drop.
import { randomBytes } from 'node:crypto';
import type { TenantUsage } from '../auth/tenant-usage.js';
import type { NamespaceId } from '../indexer/namespace.js';
import type { TieredIndexer } from '../indexer/namespaces.js';
import type { Scheduler } from '../scheduler/scheduler.js';
import { type ClusterMetrics, NOOP_CLUSTER_METRICS } from './metrics.js';
import type { LinkStatus, SyncLink } from './nats-link.js';
import { type PeerView, RemoteBookings } from './remote-bookings.js';
import { bookingSyncHooks } from './sync-hooks.js';
import { decodeSync, encodeSync, encodeSyncBinary, isBinaryKind, type SyncBody } from './sync-wire.js';

export interface ReplicaSyncDeps {
  scheduler: Scheduler;
  indexer: TieredIndexer;
  now?: () => number;
  /**
   * Remote load went down (prefill done, freed, peer reset): re-check the capacity queue. `instance`:
   * the one whose load did, when one booking's did (absent: a reset, a peer gone, sync closed).
   */
  onReleased?: (instance?: string) => void;
  metrics?: ClusterMetrics;
  log?: (line: string) => void;
  /** Tenant limits' use: this router's is published (once per event-loop turn with changes, and with each heartbeat), the peers' applied. */
  tenants?: TenantUsage;
}

export interface ReplicaSyncOptions {
  /** Unique per replica (misconfigured duplicates are ignored and counted as `conflict`). */
  routerId: string;
  /** NATS subject every replica of the deployment publishes to and subscribes on. */
  subject: string;
  heartbeatMs: number;
  /** A peer silent this long is gone: its bookings are freed. */
  peerTimeoutMs: number;
  /** This router's HTTP base URL, advertised in heartbeats (null: not advertised). */
  advertiseUrl: string | null;
}

export interface ReplicaSyncStatus {
  router_id: string;
  incarnation: string;
  nats: LinkStatus;
  peers: PeerView[];
  remote_bookings: number;
  published: number;
  received: number;
  dropped: number;
}

export class ReplicaSync {
  readonly incarnation = randomBytes(4).toString('hex');
  private readonly remote: RemoteBookings;
  private readonly now: () => number;
  private readonly metrics: ClusterMetrics;
  private readonly timer: NodeJS.Timeout;
  private seq = 0;
  private closed = false;
  /** This router's own in-flight bookings and their namespaces (for re-announcing them). */
  private readonly local = new Map<string, NamespaceId>();
  /** When we last asked each peer to re-announce (at most once per heartbeat interval). */
  private readonly asked = new Map<string, number>();
  private announceTimer: NodeJS.Timeout | null = null;
  private lastAnnounceAt = -Infinity;
  private tenantsPending = false;
  /** A turn's report names the tenants changed in it; a heartbeat's names every tenant admitted so far. */
  private readonly sendTenants = (full = false) => {
    if (!full) this.tenantsPending = false;
    const uses = this.deps.tenants?.report(full) ?? [];
    if (uses.length > 0) this.send({ kind: 'tenants', uses, full });
  };
  private published = 0;
  private received = 0;
  private dropped = 0;

  constructor(
    private readonly link: SyncLink,
    private readonly deps: ReplicaSyncDeps,
    private readonly opts: ReplicaSyncOptions,
  ) {
    this.now = deps.now ?? Date.now;
    this.metrics = deps.metrics ?? NOOP_CLUSTER_METRICS;
    this.remote = new RemoteBookings(
      {
        active: deps.scheduler.active,
        rates: deps.scheduler.rates,
        indexer: deps.indexer,
        ...(deps.tenants ? { tenants: deps.tenants } : {}),
      },
      { router: opts.routerId, incarnation: this.incarnation },
    );
    deps.tenants?.onChange(() => {
      if (this.tenantsPending || this.closed) return;
      this.tenantsPending = true;
      setImmediate(() => this.sendTenants());
    });
    deps.scheduler.addHooks(bookingSyncHooks((body) => this.send(body), this.local));
    link.subscribe(opts.subject, (data) => this.onMessage(data));
    this.metrics.watch({
      connected: { sync: () => link.connected },
      peers: () => this.remote.list().length,
      remoteBookings: () => this.remote.size,
    });
    this.timer = setInterval(() => this.tick(), opts.heartbeatMs);
    this.timer.unref();
  }

  status(): ReplicaSyncStatus {
    return {
      router_id: this.opts.routerId,
      incarnation: this.incarnation,
      nats: this.link.status(),
      peers: this.remote.list(),
      remote_bookings: this.remote.size,
      published: this.published,
      received: this.received,
      dropped: this.dropped,
    };
  }

  /** Stop publishing and free every remote booking (the link is closed by its owner). */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.timer);
    if (this.announceTimer) clearTimeout(this.announceTimer);
    if (this.remote.clear() > 0) this.deps.onReleased?.();
  }

  private send(body: SyncBody): void {
    if (this.closed) return;
    // Every message takes a sequence number, sent or not: receivers see the hole and reset us.
    const msg = { router: this.opts.routerId, incarnation: this.incarnation, seq: ++this.seq, ...body };
    let sent: boolean;
    try {
      sent = this.link.publish(
        this.opts.subject,
        (this.link.binaryWire && isBinaryKind(msg.kind) ? encodeSyncBinary(msg) : null) ?? encodeSync(msg),
      );
    } catch (err) {
      // Hooks never throw into the request path (its booking would stay held): a message that
      // cannot go is dropped and counted. Its sequence number is spent, so the receivers see a gap,
      // drop this router's bookings and ask for a re-announce (a message that failed every time
      // would repeat that at each announce; nothing known fails since long strings go as JSON).
      this.dropped++;
      this.metrics.dropped('publish_failed');
      this.deps.log?.(`cluster: a ${body.kind} message could not be sent: ${(err as Error).message}`);
      return;
    }
    if (sent) {
      this.published++;
      this.metrics.published(body.kind);
    } else {
      this.dropped++;
      this.metrics.dropped('disconnected');
    }
  }

  private onMessage(data: Uint8Array): void {
    if (this.closed) return;
    let msg: ReturnType<typeof decodeSync>;
    try {
      msg = decodeSync(data);
    } catch (err) {
      this.dropped++;
      this.metrics.dropped('decode_error');
      this.deps.log?.(`cluster: undecodable sync message: ${(err as Error).message}`);
      return;
    }
    const r = this.remote.handle(msg, this.now());
    if (r.reset) this.metrics.peerReset(r.reset, r.freed);
    if (r.outcome === 'applied') {
      this.received++;
      this.metrics.received(msg.kind);
      if (r.missed) this.askResend(msg.router, this.opts.heartbeatMs);
      // A heartbeat says how many bookings the peer holds, after everything it sent before: a
      // different count here means something was lost (a resend request or its answer included).
      else if (msg.kind === 'heartbeat' && msg.bookings !== this.remote.heldFor(msg.router))
        this.askResend(msg.router, 5 * this.opts.heartbeatMs);
      if (msg.kind === 'resend' && msg.target === this.opts.routerId) this.scheduleAnnounce();
    } else if (r.outcome !== 'own') {
      this.dropped++;
      this.metrics.dropped(r.outcome);
      if (r.outcome === 'conflict')
        this.deps.log?.(`cluster: another replica uses router id ${msg.router}; its bookings are ignored`);
    }
    if (r.released) this.deps.onReleased?.(r.instance ?? undefined);
  }

  /** Our own in-flight bookings (pruning ids freed without the hook, e.g. by an instance removal). */
  private localBookings(): number {
    for (const id of this.local.keys()) if (!this.deps.scheduler.active.get(id)) this.local.delete(id);
    return this.local.size;
  }

  private askResend(router: string, minGapMs: number): void {
    const now = this.now();
    const last = this.asked.get(router);
    if (last !== undefined && now - last < minGapMs) return;
    this.asked.set(router, now);
    this.send({ kind: 'resend', target: router });
  }

  /**
   * Re-announce every in-flight booking once, shortly, and at most once per heartbeat interval:
   * requests from several joiners (or from every peer after a NATS restart) share one announce.
   */
  private scheduleAnnounce(): void {
    if (this.announceTimer || this.closed) return;
    const delay = Math.max(20, this.lastAnnounceAt + this.opts.heartbeatMs - this.now());
    this.announceTimer = setTimeout(() => {
      this.announceTimer = null;
      this.lastAnnounceAt = this.now();
      for (const [id, ns] of this.local) {
        const b = this.deps.scheduler.active.get(id);
        if (!b) {
          this.local.delete(id);
          continue;
        }
        // No speculative insert this time: the blocks are either cached by now or not coming.
        this.send({
          kind: 'add',
          id,
          instance: b.instance,
          dpRank: b.dpRank,
          ns,
          blocks: b.blocks,
          prefillTokens: b.prefillTokens,
          contextTokens: b.contextTokens,
          speculativeTtlMs: 0,
        });
        if (b.prefillDone) this.send({ kind: 'prefill', id });
      }
    }, delay);
    this.announceTimer.unref();
  }

  private tick(): void {
    this.send({ kind: 'heartbeat', url: this.opts.advertiseUrl, bookings: this.localBookings() });
    // Reports are absolute: a full one with each heartbeat repairs a lost one and informs a joiner.
    this.sendTenants(true);
    const gone = this.remote.expire(this.now(), this.opts.peerTimeoutMs);
    for (const g of gone) {
      this.metrics.peerReset('expired', g.freed);
      this.deps.log?.(
        `cluster: replica ${g.router} silent for ${this.opts.peerTimeoutMs} ms, freed ${g.freed} of its bookings`,
      );
    }
    if (gone.some((g) => g.freed > 0)) this.deps.onReleased?.();
  }
}
