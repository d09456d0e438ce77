// Router side of the event fan-in: restores the relay's latest snapshot, then consumes the stream
// from the sequence after it through a durable JetStream consumer (named by the router id), and
// applies every batch through RelayedIndex. The durable keeps this router's position across NATS
// outages; after a restart the router starts again from snapshot + tail, never from the start.
import {
  AckPolicy,
  ConsumerEvents,
  type ConsumerMessages,
  DeliverPolicy,
  type JetStreamManager,
  type NatsConnection,
  nanos,
  type ObjectStore,
} from 'nats';
import type { IndexWriter } from '../indexer/writer.js';
import { decodeBatch } from './event-wire.js';
import { consumerName, ensureStream, isNotFound, loadSnapshot, snapshotBucket } from './jetstream.js';
import { type ClusterMetrics, NOOP_CLUSTER_METRICS } from './metrics.js';
import type { LinkStatus, NatsLink } from './nats-link.js';
import { type RelayedCounts, RelayedIndex } from './relayed-index.js';
import type { RelaySnapshot } from './relay-snapshot.js';

export interface EventConsumerOptions {
  routerId: string;
  subject: string;
  stream: string;
  bucket: string;
  streamMaxAgeMs: number;
  consumerInactiveMs: number;
  /** How long to wait for the snapshot of a `resync` epoch. */
  resyncWaitMs: number;
}

export interface EventConsumerDeps {
  writer: IndexWriter;
  now?: () => number;
  metrics?: ClusterMetrics;
  log?: (line: string) => void;
}

export type ConsumerState = 'connecting' | 'restoring' | 'catching_up' | 'live' | 'closed';

export interface EventConsumerStatus {
  state: ConsumerState;
  nats: LinkStatus;
  stream: string;
  consumer: string;
  /** Snapshot restored at start (or at the last full reload). */
  restored: { stream_seq: number; blocks: number } | null;
  /** First stream sequence this process consumed from. */
  started_at_seq: number | null;
  last_seq: number;
  messages: number;
  gaps: number;
  resyncs: number;
  decode_errors: number;
  applied: RelayedCounts;
  last_error: string | null;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export class EventConsumer {
  private readonly relayed: RelayedIndex;
  private readonly now: () => number;
  private readonly metrics: ClusterMetrics;
  private readonly name: string;
  private readonly log: (l: string) => void;
  private state: ConsumerState = 'connecting';
  private lastSeq = 0;
  /** Load the snapshot before consuming (first start, or our position is gone). */
  private needFull = true;
  private msgs: ConsumerMessages | null = null;
  private closed = false;
  private stop!: () => void;
  private readonly stopped = new Promise<null>((r) => (this.stop = () => r(null)));
  private readyResolve!: () => void;
  /** Resolves once the snapshot is restored and the stream tail present at start is applied. */
  readonly ready: Promise<void>;
  private readonly loop: Promise<void>;
  private readonly st = {
    restored: null as EventConsumerStatus['restored'],
    started_at_seq: null as number | null,
    messages: 0,
    gaps: 0,
    resyncs: 0,
    decode_errors: 0,
    last_error: null as string | null,
  };

  constructor(
    private readonly link: NatsLink,
    deps: EventConsumerDeps,
    private readonly opts: EventConsumerOptions,
  ) {
    this.relayed = new RelayedIndex(deps.writer);
    this.now = deps.now ?? Date.now;
    this.metrics = deps.metrics ?? NOOP_CLUSTER_METRICS;
    this.log = deps.log ?? (() => {});
    this.name = consumerName(opts.routerId);
    this.ready = new Promise((r) => (this.readyResolve = r));
    this.metrics.watch({ connected: { events: () => link.connected } });
    this.loop = this.run();
  }

  status(): EventConsumerStatus {
    return {
      state: this.state,
      nats: this.link.status(),
      stream: this.opts.stream,
      consumer: this.name,
      last_seq: this.lastSeq,
      applied: { ...this.relayed.counts },
      ...this.st,
    };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.state = 'closed';
    this.stop();
    this.msgs?.stop();
    await this.loop;
    // A clean stop removes the durable; a crashed router's durable expires after consumerInactiveMs.
    const nc = this.link.connection;
    if (nc) await (await nc.jetstreamManager()).consumers.delete(this.opts.stream, this.name).catch(() => undefined);
  }

  private async run(): Promise<void> {
    while (!this.closed) {
      try {
        const nc = await Promise.race([this.link.firstConnect, this.stopped]);
        if (!nc || this.closed) break;
        await this.consume(nc, await this.setup(nc));
      } catch (err) {
        if (this.closed) break;
        this.st.last_error = (err as Error).message;
        this.log(`cluster: event consumer: ${this.st.last_error}; retrying`);
        await sleep(1000);
      }
    }
  }

  /** Restore if needed, check our position is still in the stream, (re)create the durable there. */
  private async setup(nc: NatsConnection): Promise<ObjectStore> {
    const jsm = await nc.jetstreamManager();
    let info = await ensureStream(jsm, {
      stream: this.opts.stream,
      subject: this.opts.subject,
      maxAgeMs: this.opts.streamMaxAgeMs,
    });
    const os = await snapshotBucket(nc, this.opts.bucket);
    const { first_seq: first, last_seq: last } = info.state;
    // Our position vanished: the stream was reset (last < ours) or purged past us.
    if (!this.needFull && (this.lastSeq > last || (this.lastSeq + 1 < first && last >= first))) {
      this.log(
        `cluster: stream position ${this.lastSeq} is gone (stream holds ${first}..${last}); reloading the snapshot`,
      );
      this.needFull = true;
    }
    if (this.needFull) {
      this.state = 'restoring';
      const snap = await withTimeout(loadSnapshot(os), this.opts.resyncWaitMs);
      if (snap && snap.stream_seq <= last) this.restore(snap);
      else {
        this.relayed.clear();
        this.lastSeq = 0;
      }
      this.needFull = false;
      info = await jsm.streams.info(this.opts.stream);
      const f = info.state.first_seq;
      if (this.lastSeq + 1 < f && info.state.messages > 0) {
        // Neither the snapshot nor the stream holds these any more (retention): accept the hole
        // rather than reload forever; the relay's next epoch or resync makes the index whole again.
        this.st.gaps++;
        this.st.last_error = `stream messages ${this.lastSeq + 1}..${f - 1} are gone and not in the snapshot`;
        this.log(`cluster: ${this.st.last_error}`);
        this.lastSeq = f - 1;
      }
    }
    await this.recreate(jsm);
    this.st.started_at_seq ??= this.lastSeq + 1;
    const target = info.state.last_seq;
    this.state = this.lastSeq >= target ? 'live' : 'catching_up';
    if (this.state === 'live') this.readyResolve();
    this.catchUpTo = target;
    return os;
  }

  private catchUpTo = 0;

  private async recreate(jsm: JetStreamManager): Promise<void> {
    await jsm.consumers.delete(this.opts.stream, this.name).catch((err: unknown) => {
      if (!isNotFound(err)) throw err;
    });
    await jsm.consumers.add(this.opts.stream, {
      durable_name: this.name,
      ack_policy: AckPolicy.Explicit,
      deliver_policy: DeliverPolicy.StartSequence,
      opt_start_seq: this.lastSeq + 1,
      inactive_threshold: nanos(this.opts.consumerInactiveMs),
      max_ack_pending: 1024,
    });
  }

  private restore(snap: RelaySnapshot): void {
    const blocks = this.relayed.restore(snap, this.now());
    this.lastSeq = snap.stream_seq;
    this.st.restored = { stream_seq: snap.stream_seq, blocks };
    this.metrics.restored('jetstream', blocks);
    this.log(`cluster: restored ${blocks} blocks from the relay snapshot at stream seq ${snap.stream_seq}`);
  }

  private async consume(nc: NatsConnection, os: ObjectStore): Promise<void> {
    const c = await nc.jetstream().consumers.get(this.opts.stream, this.name);
    const msgs = await c.consume({ max_messages: 256, expires: 10_000 });
    this.msgs = msgs;
    // close() may have run while the subscription was being made: it could not stop this one, and
    // the loop below would then wait for messages forever (an afterAll hung on a loaded machine).
    if (this.closed) msgs.stop();
    void (async () => {
      for await (const s of await msgs.status()) {
        const gone =
          s.type === ConsumerEvents.ConsumerDeleted ||
          s.type === ConsumerEvents.StreamNotFound ||
          (s.type === ConsumerEvents.ConsumerNotFound && Number(s.data) >= 2);
        if (gone && !this.closed) {
          this.st.last_error = `consumer ${this.name}: ${s.type}`;
          msgs.stop();
        }
      }
    })().catch(() => undefined);
    // Watchdog: after a NATS restart under load the pull can stall with messages pending (seen in
    // tests on a loaded 2-core machine), either undelivered or delivered-but-never-surfaced (ack
    // pending), or the consumer's info stops answering. Two checks in a row like that with no
    // progress end this subscription; run() then recreates the durable from the last applied seq.
    let seen = this.lastSeq;
    let stalls = 0;
    const stalled = (why: string) => {
      if (this.lastSeq !== seen) {
        stalls = 0;
      } else if (++stalls >= 2) {
        this.st.last_error = `consumer ${this.name} stalled (${why}); re-subscribing`;
        this.log(`cluster: ${this.st.last_error}`);
        msgs.stop();
      }
      seen = this.lastSeq;
    };
    const watchdog = setInterval(() => {
      if (this.closed) return;
      c.info()
        .then((info) => {
          const waiting = info.num_pending + info.num_ack_pending;
          if (waiting > 0) stalled(`${info.num_pending} pending, ${info.num_ack_pending} unacknowledged`);
          else {
            stalls = 0;
            seen = this.lastSeq;
          }
        })
        .catch((err: unknown) => stalled(`consumer info: ${(err as Error).message}`));
    }, 2000);
    watchdog.unref();
    try {
      await this.drain(msgs, os);
    } finally {
      clearInterval(watchdog);
    }
    msgs.stop();
    this.msgs = null;
  }

  private async drain(msgs: ConsumerMessages, os: ObjectStore): Promise<void> {
    for await (const m of msgs) {
      if (this.closed) break;
      if (m.seq <= this.lastSeq) {
        m.ack(); // already in the snapshot, or redelivered
        continue;
      }
      if (m.seq > this.lastSeq + 1 && this.lastSeq > 0) {
        // Messages we never saw were purged (we fell behind by more than two snapshots).
        this.st.gaps++;
        this.needFull = true;
        this.log(`cluster: event stream gap ${this.lastSeq + 1}..${m.seq - 1}; reloading the snapshot`);
        break;
      }
      await this.applyMessage(m.data, m.seq, os);
      this.lastSeq = Math.max(this.lastSeq, m.seq); // a resync may have restored a later snapshot
      this.st.messages++;
      this.metrics.received('relay_batch');
      m.ack();
      if (this.state === 'catching_up' && this.lastSeq >= this.catchUpTo) {
        this.state = 'live';
        this.readyResolve();
      }
    }
  }

  private async applyMessage(data: Uint8Array, seq: number, os: ObjectStore): Promise<void> {
    let batch: ReturnType<typeof decodeBatch>;
    try {
      batch = decodeBatch(data);
    } catch (err) {
      this.st.decode_errors++;
      this.metrics.dropped('decode_error');
      this.st.last_error = `message ${seq}: ${(err as Error).message}`;
      return;
    }
    for (const op of batch.ops) {
      this.relayed.apply(op);
      if (op.op === 'epoch' && op.reason === 'resync') await this.resync(os, seq);
    }
  }

  /** The relay lost publishes and stored its index under this epoch's sequence: load it. */
  private async resync(os: ObjectStore, seq: number): Promise<void> {
    this.st.resyncs++;
    const deadline = Date.now() + this.opts.resyncWaitMs;
    while (!this.closed && Date.now() < deadline) {
      // Bounded per attempt: right after a NATS restart an object-store read can hang for good,
      // and this runs inside the message loop (seen: a router stuck here, its consumer idle).
      const snap = await withTimeout(loadSnapshot(os), Math.max(100, Math.min(2_000, deadline - Date.now()))).catch(
        () => null,
      );
      if (snap && snap.stream_seq >= seq) {
        this.restore(snap);
        return;
      }
      await sleep(100);
    }
    this.st.last_error = `no snapshot for the resync epoch at ${seq} within ${this.opts.resyncWaitMs} ms; continuing from the events`;
    this.log(`cluster: ${this.st.last_error}`);
  }
}

/** `p`, or a rejection after `ms` (the underlying operation is abandoned, not cancelled). */
function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms`)), ms);
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}
