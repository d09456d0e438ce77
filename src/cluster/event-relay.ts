// `kvrouter relay` core: the listener path's index changes (recorded by relay-taps.ts) go to a
// JetStream stream as ordered batches, and the relay's index is snapshotted to the object store
// every `snapshotEvery` ops (or `snapshotIntervalMs` when anything changed), with the stream
// sequence it covers. Publishes that fail leave the stream short of the relay's truth: the relay
// then publishes a `resync` epoch with a fresh snapshot, and consumers reload from it.
import type { JetStreamClient, JetStreamManager, ObjectStore, PubAck } from 'nats';
import { dumpIndex } from '../indexer/snapshot.js';
import { encodeBatch, encodeOp, type RelayedOp } from './event-wire.js';
import { deleteSnapshot, ensureStream, snapshotBucket, storeSnapshot } from './jetstream.js';
import { type ClusterMetrics, NOOP_CLUSTER_METRICS } from './metrics.js';
import type { LinkStatus, NatsLink } from './nats-link.js';
import { RelayLease } from './relay-lease.js';
import type { OpSink, RelayTap } from './relay-taps.js';

export interface RelayOptions {
  relayId: string;
  subject: string;
  stream: string;
  bucket: string;
  /** Snapshot after this many ops. */
  snapshotEvery: number;
  /** ...or after this long when any op was relayed since the last snapshot. */
  snapshotIntervalMs: number;
  streamMaxAgeMs: number;
  /** Purge the stream and delete the snapshot before starting. */
  resetState: boolean;
  publishTimeoutMs: number;
  /** A batch is published once its ops reach this size (else at the end of the event-loop turn). */
  maxBatchBytes: number;
  /**
   * High availability: several relays of one stream compete for a lease in this KV bucket and only
   * the holder publishes; standbys keep their own index from the same engines, and a new leader
   * publishes a resync epoch with its snapshot, which every consumer loads. null: always publish.
   */
  ha?: { bucket: string; leaseMs: number } | null;
}

export interface RelayStatus {
  relay_id: string;
  /** `leader` publishes; a `standby` (HA mode) only keeps its index. */
  role: 'leader' | 'standby';
  /** Times this relay became leader (HA mode). */
  leaderships: number;
  nats: LinkStatus;
  stream: string;
  last_seq: number;
  published_batches: number;
  published_ops: number;
  failed_batches: number;
  resyncs: number;
  snapshots: number;
  last_snapshot: { stream_seq: number; bytes: number; at: number } | null;
  last_error: string | null;
}

export class EventRelay implements OpSink {
  private pending: string[] = [];
  private pendingBytes = 0;
  private flushScheduled = false;
  private lastAck: Promise<PubAck> | null = null;
  private opsSinceSnapshot = 0;
  private lastSnapshotAt = Date.now();
  private snapshotting = false;
  private storing: Promise<void> = Promise.resolve();
  private prevSnapshotSeq = 0;
  private dirty = false;
  private resyncing = false;
  private closed = false;
  private readonly inflight = new Set<Promise<unknown>>();
  private readonly timer: NodeJS.Timeout;
  private role: 'leader' | 'standby' = 'leader';
  private lease: RelayLease | null = null;
  private readonly st = {
    leaderships: 0,
    last_seq: 0,
    published_batches: 0,
    published_ops: 0,
    failed_batches: 0,
    resyncs: 0,
    snapshots: 0,
    last_snapshot: null as RelayStatus['last_snapshot'],
    last_error: null as string | null,
  };

  private constructor(
    private readonly link: NatsLink,
    private readonly js: JetStreamClient,
    private readonly jsm: JetStreamManager,
    private readonly os: ObjectStore,
    private readonly tap: RelayTap,
    private readonly opts: RelayOptions,
    private readonly metrics: ClusterMetrics,
    private readonly log: (l: string) => void,
  ) {
    this.timer = setInterval(() => this.tick(), Math.min(1000, opts.snapshotIntervalMs));
    this.timer.unref();
  }

  /**
   * Wait for NATS, set up the stream and bucket (purged with resetState), and open a new epoch:
   * consumers drop what earlier relay runs published. The relay attaches itself to the tap, which
   * every listener must write through.
   */
  static async start(
    link: NatsLink,
    tap: RelayTap,
    opts: RelayOptions,
    deps: { metrics?: ClusterMetrics; log?: (l: string) => void } = {},
  ): Promise<EventRelay> {
    const nc = await link.firstConnect;
    const jsm = await nc.jetstreamManager();
    await ensureStream(jsm, { stream: opts.stream, subject: opts.subject, maxAgeMs: opts.streamMaxAgeMs });
    const os = await snapshotBucket(nc, opts.bucket);
    if (opts.resetState) {
      await jsm.streams.purge(opts.stream);
      await deleteSnapshot(os);
    }
    const relay = new EventRelay(
      link,
      nc.jetstream(),
      jsm,
      os,
      tap,
      opts,
      deps.metrics ?? NOOP_CLUSTER_METRICS,
      deps.log ?? (() => {}),
    );
    tap.sink = relay;
    if (opts.ha) {
      relay.role = 'standby';
      // KV requests time out well inside the lease: a renewal stuck for the default 5 s would
      // keep a stale leader believing it leads.
      const js = nc.jetstream({ timeout: Math.max(200, Math.floor(opts.ha.leaseMs / 3)) });
      const kv = await js.views.kv(opts.ha.bucket, { ttl: opts.ha.leaseMs, history: 1 });
      // The bucket keeps the TTL of whoever created it: that is the lease the server enforces.
      const ttl = (await kv.status()).ttl || opts.ha.leaseMs;
      if (ttl !== opts.ha.leaseMs)
        relay.log(
          `relay ${opts.relayId}: lease bucket ${opts.ha.bucket} has a TTL of ${ttl} ms (set when it was created), not --lease-ms ${opts.ha.leaseMs}: using ${ttl}`,
        );
      relay.lease = new RelayLease(kv, opts.stream, opts.relayId, ttl, {
        changed: (leader) => relay.leadership(leader),
      });
      return relay; // competes once startLease() is called (after its listeners are up)
    }
    const seq = await relay.epoch(opts.resetState ? 'reset' : 'start');
    if (seq === null) throw new Error(`could not publish the start epoch to ${opts.stream}: ${relay.st.last_error}`);
    return relay;
  }

  /** HA: start competing for the lease. Call once the listeners run, so a new leader's index is whole. */
  startLease(): void {
    this.lease?.start();
  }

  /** Leader with a lease inside its validity (or no HA): publishing and snapshot writes are safe. */
  get publishing(): boolean {
    return !this.closed && this.role === 'leader' && (this.lease === null || this.lease.valid);
  }

  record(op: RelayedOp): void {
    if (this.closed || this.role !== 'leader') return;
    if (!this.publishing) {
      // A late renewal: drop rather than risk publishing next to a new leader; if we keep the
      // lease, the resync epoch brings the consumers back to our index.
      this.dirty = true;
      return;
    }
    const text = encodeOp(op);
    this.pending.push(text);
    this.pendingBytes += text.length + 1;
    this.opsSinceSnapshot++;
    if (this.pendingBytes >= this.opts.maxBatchBytes) this.flush();
    if (!this.flushScheduled) {
      this.flushScheduled = true;
      // End of the turn: the listener finished its payload (including its own follow-ups), so a
      // snapshot taken now matches the ops flushed so far.
      setImmediate(() => {
        this.flushScheduled = false;
        this.flush();
        this.maybeSnapshot();
      });
    }
  }

  status(): RelayStatus {
    return {
      relay_id: this.opts.relayId,
      role: this.role,
      nats: this.link.status(),
      stream: this.opts.stream,
      ...this.st,
    };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    if (this.role === 'leader') this.flush();
    this.closed = true;
    clearInterval(this.timer);
    this.tap.sink = null;
    await Promise.race([
      Promise.allSettled([...this.inflight, this.storing]),
      new Promise((r) => setTimeout(r, this.opts.publishTimeoutMs)),
    ]);
    // After the last publish: the standby that takes over next publishes after ours.
    await this.lease?.release();
    this.role = 'standby';
  }

  /** HA: the lease was won or lost. A new leader's consumers reload from its snapshot. */
  private leadership(leader: boolean): void {
    if (this.closed) return;
    this.pending = [];
    this.pendingBytes = 0;
    if (leader) {
      this.role = 'leader';
      this.st.leaderships++;
      this.opsSinceSnapshot = 0;
      this.lastAck = null;
      this.log(`relay ${this.opts.relayId}: took the lease, now leader of ${this.opts.stream}`);
      this.dirty = true; // publish a resync epoch with our snapshot at once
      this.tick();
    } else {
      this.role = 'standby';
      this.log(`relay ${this.opts.relayId}: lost the lease, standby for ${this.opts.stream}`);
    }
  }

  private publish(ops: string[]): Promise<PubAck> | null {
    if (!this.publishing) {
      this.dirty = true;
      return null;
    }
    if (!this.link.connected) {
      this.failed('NATS disconnected');
      return null;
    }
    const p = this.js.publish(this.opts.subject, encodeBatch(this.opts.relayId, ops), {
      timeout: this.opts.publishTimeoutMs,
    });
    this.lastAck = p;
    this.inflight.add(p);
    p.then(
      (ack) => {
        this.st.last_seq = Math.max(this.st.last_seq, ack.seq);
        this.st.published_batches++;
        this.st.published_ops += ops.length;
        this.metrics.published('relay_ops', ops.length);
      },
      (err: unknown) => this.failed((err as Error).message),
    ).finally(() => this.inflight.delete(p));
    return p;
  }

  private failed(why: string): void {
    this.st.failed_batches++;
    this.st.last_error = `publish: ${why}`;
    this.metrics.dropped('publish_failed');
    if (!this.dirty) this.log(`relay: a batch was not stored (${why}); consumers will resync from a snapshot`);
    this.dirty = true;
  }

  private flush(): void {
    if (this.pending.length === 0) return;
    const ops = this.pending;
    this.pending = [];
    this.pendingBytes = 0;
    this.publish(ops);
  }

  /** Publish an epoch with a snapshot of the current index under its sequence. */
  private async epoch(reason: 'start' | 'reset' | 'resync'): Promise<number | null> {
    this.flush();
    const snap = this.capture();
    this.opsSinceSnapshot = 0;
    const p = this.publish([encodeOp({ op: 'epoch', reason })]);
    const ack = p ? await p.catch(() => null) : null;
    if (!ack) return null;
    await this.store(snap, p!, true);
    return ack.seq;
  }

  private capture() {
    return {
      index: dumpIndex(this.tap.indexer, Date.now()),
      bindings: [...this.tap.indexer.bindings().entries()],
      at: Date.now(),
    };
  }

  /** Stores run one at a time and never replace a snapshot with an older one. */
  private store(snap: ReturnType<EventRelay['capture']>, ack: Promise<PubAck>, purgeAll: boolean): Promise<void> {
    const run = async () => {
      let seq = 0;
      try {
        seq = (await ack).seq;
        if (seq <= this.prevSnapshotSeq) return;
        // Snapshot and purge are shared with the other relays: only a valid leader writes them.
        if (!this.publishing) return;
        const bytes = await storeSnapshot(this.os, {
          version: 1,
          relay: this.opts.relayId,
          stream_seq: seq,
          created_at: snap.at,
          bindings: snap.bindings,
          index: snap.index,
        });
        this.st.snapshots++;
        this.st.last_snapshot = { stream_seq: seq, bytes, at: snap.at };
        this.lastSnapshotAt = Date.now();
        // Keep everything after the previous snapshot: a replica that just loaded it still finds its tail.
        const keepFrom = purgeAll ? seq : this.prevSnapshotSeq + 1;
        this.prevSnapshotSeq = seq;
        if (keepFrom > 1 && this.publishing) await this.jsm.streams.purge(this.opts.stream, { seq: keepFrom });
      } catch (err) {
        // A failed publish is handled by the resync; a failed store leaves the previous snapshot.
        if (seq > 0) {
          this.st.last_error = `snapshot: ${(err as Error).message}`;
          this.log(`relay: snapshot at ${seq} failed: ${(err as Error).message}`);
        }
      }
    };
    this.storing = this.storing.then(run);
    return this.storing;
  }

  private maybeSnapshot(): void {
    if (this.snapshotting || this.dirty || !this.publishing || this.opsSinceSnapshot === 0 || !this.lastAck) return;
    if (
      this.opsSinceSnapshot < this.opts.snapshotEvery &&
      Date.now() - this.lastSnapshotAt < this.opts.snapshotIntervalMs
    )
      return;
    const snap = this.capture();
    this.opsSinceSnapshot = 0;
    this.snapshotting = true;
    void this.store(snap, this.lastAck, false).finally(() => (this.snapshotting = false));
  }

  private tick(): void {
    if (!this.publishing) return;
    if (this.dirty && this.link.connected && !this.resyncing) {
      this.resyncing = true;
      this.dirty = false;
      this.st.resyncs++;
      void this.epoch('resync')
        .then((seq) => {
          if (seq !== null) this.log(`relay ${this.opts.relayId}: resync epoch at stream seq ${seq}`);
          else this.dirty = true;
        })
        .finally(() => (this.resyncing = false));
      return;
    }
    this.maybeSnapshot();
  }
}
