// One router replica in virtual time, assembled from the server's own parts the way
// src/router/runtime.ts assembles them: TieredIndexer + KvIndexWriter, one StreamIngest per engine
// registration (the listener's decode -> apply path), the Scheduler with its bookings and rate
// learner, the closed-loop FeedbackLoop, and RemoteBookings + the sync hooks for replica sync.
// What it adds is only the proxy's sequence of calls (src/proxy/forward.ts): decide, book, first
// token -> prefillComplete, usage -> reportUncached and the hit check, free.
import { mulberry32 } from '../common/prng.js';
import { RemoteBookings } from '../cluster/remote-bookings.js';
import { bookingSyncHooks } from '../cluster/sync-hooks.js';
import { decodeSync, encodeSync, type SyncBody } from '../cluster/sync-wire.js';
import { EngineLoadView } from '../engine-load/load-view.js';
import { StreamIngest } from '../events/listener-ingest.js';
import { NOOP_METRICS } from '../events/metrics.js';
import { Registry } from '../events/registry.js';
import { FeedbackLoop, type Prediction } from '../feedback/loop.js';
import type { EngineUsage } from '../feedback/usage-tail.js';
import type { NamespaceId } from '../indexer/namespace.js';
import { TieredIndexer } from '../indexer/namespaces.js';
import { KvIndexWriter, registerInIndex } from '../indexer/writer.js';
import { desiredRegistrations, modelSeeds } from '../router/registrations.js';
import { routeFields, type RouteFields, speculativeTtl } from '../router/route-input.js';
import { type Candidate, type Decision, Scheduler } from '../scheduler/scheduler.js';
import type { RouterPlan, RouterTally } from './types.js';

const NOTHING_TRIED: ReadonlySet<string> = new Set();

export class RouterNode {
  readonly indexer: TieredIndexer;
  readonly writer: KvIndexWriter;
  readonly scheduler: Scheduler;
  readonly feedback: FeedbackLoop;
  readonly tally: RouterTally;
  /** The engines' scraped gauges as this replica last read them (engine_metrics.scrape; see simulation.ts). */
  readonly engineLoads = new EngineLoadView();
  /** KV-event ingest per engine (by engine index), empty when the router ignores KV events. */
  readonly ingests: StreamIngest[] = [];
  private readonly candidates: readonly Candidate[];
  private readonly remote: RemoteBookings | null = null;
  private syncSeq = 0;

  constructor(
    readonly index: number,
    readonly id: string,
    private readonly plan: RouterPlan,
    engineIds: readonly string[],
    seed: number,
    /** Virtual now (ms). */
    private readonly now: () => number,
    /** Publish one encoded sync message to the other replicas (null: no replica sync). */
    publish: ((bytes: Uint8Array) => void) | null,
    /** Record rows the index reserves (simulation.ts recordReserve). */
    reserveRecords = 0,
  ) {
    const cfg = plan.cfg;
    this.indexer = new TieredIndexer({
      defaultSeed: BigInt(cfg.hashing.seed),
      modelSeeds: modelSeeds(cfg),
      kvCacheGroups: cfg.kv_events.kv_cache_groups,
      reserveRecords,
      // Each engine's share (one (backend, dp rank) group per engine): its engine map never grows.
      reserveEngineHashes: engineIds.length > 0 ? Math.ceil(reserveRecords / engineIds.length) : 0,
    });
    this.writer = new KvIndexWriter(this.indexer);
    this.scheduler = new Scheduler(this.indexer, mulberry32(cfg.routing.seed ?? seed));
    this.tally = {
      id,
      decisions: 0,
      refused: 0,
      applied: {},
      hitCheck: { agree: 0, over: 0, under: 0, unverified: 0, alarms: 0 },
      sync: { sent: 0, received: 0 },
      openBookings: 0,
      index: { namespaces: 0, blocks: 0, records: 0, bytes: 0 },
    };
    const hc = this.tally.hitCheck;
    this.feedback = new FeedbackLoop(plan.feedback, {
      writer: this.writer,
      distrusted: this.scheduler.distrusted,
      log: () => undefined,
      now,
      judged: (_i, verdict) => void hc[verdict]++,
    });
    // As indexInstances: every configured instance counts in its model's namespace.
    for (const m of cfg.models)
      for (const i of m.instances) this.writer.enroll({ model: m.name, blockSize: m.block_size }, i.id);
    if (plan.kvEvents) {
      // The config's registrations, through the registry as ListenerPool.add takes them.
      const registry = new Registry();
      const byInstance = new Map<string, StreamIngest>();
      for (const spec of desiredRegistrations(cfg)) {
        const r = registry.register(spec, 0);
        if (r.kind === 'conflict') throw new Error(`registration conflict: ${r.reason}`);
        registerInIndex(this.writer, r.registration);
        byInstance.set(
          spec.instanceId,
          new StreamIngest(r.registration, { writer: this.writer, metrics: NOOP_METRICS, now }),
        );
      }
      for (const e of engineIds) {
        const ingest = byInstance.get(e);
        if (!ingest) throw new Error(`instance ${e} has no kv_events registration`);
        this.ingests.push(ingest);
      }
    }
    // Frozen, list and candidates: the scheduler's id caches know it by identity (CandidateIds).
    this.candidates = Object.freeze(engineIds.map((instance) => Object.freeze({ instance, dpRank: 0 })));
    if (publish) {
      const incarnation = 'sim';
      this.remote = new RemoteBookings(
        { active: this.scheduler.active, rates: this.scheduler.rates, indexer: this.indexer },
        { router: id, incarnation },
      );
      // ReplicaSync.send: every message takes the next sequence number of this incarnation.
      const send = (body: SyncBody) => {
        this.tally.sync.sent++;
        publish(encodeSync({ router: id, incarnation, seq: ++this.syncSeq, ...body }));
      };
      this.scheduler.addHooks(bookingSyncHooks(send));
    }
  }

  /** The RouteInput fields of a prompt, built as the proxy path builds them. */
  route(tokens: Uint32Array, sessionKey: string | null): RouteFields & { ttlMs: number } {
    const src = {
      model: { name: this.plan.cfg.models[0].name, cfg: { block_size: this.plan.cfg.models[0].block_size } },
      adapter: null,
      tokens,
      routing: this.plan.routing,
      cacheSalt: null,
      sessionKey,
      text: { kind: 'tokens' as const, symbols: tokens },
    };
    // (No request text in the simulation: policies that route on text read the token ids, as SMG does over gRPC.)
    const f = routeFields(src, this.plan.cfg, { engineLoads: this.engineLoads, now: this.now });
    return { ns: f.ns, route: f.route, ttlMs: speculativeTtl(src, f.route) };
  }

  /**
   * As the proxy decides; `hold`: the request can wait in the capacity queue for a busy holder of its
   * prefix; `scores`: what the caller reads of the candidates' scores (RouteInput.scores).
   */
  decide(f: RouteFields, now: number, hold: boolean, scores: 'all' | 'decision' = 'all'): Decision {
    this.tally.decisions++;
    return this.scheduler.decide(
      { ns: f.ns, candidates: this.candidates, exclude: NOTHING_TRIED, hold, ...f.route, scores },
      now,
    );
  }

  book(d: Decision, ns: NamespaceId, bookingId: string, ttlMs: number, now: number): void {
    this.scheduler.book(d, ns, { requestId: bookingId, now, speculativeTtlMs: ttlMs });
  }

  /** The first streamed token passed through: the booking's prefill is done (a rate sample). */
  firstToken(bookingId: string, now: number): void {
    this.scheduler.prefillComplete(bookingId, now);
  }

  /** The response ended with the engine's usage: closed-loop check, then the booking is freed. */
  finished(bookingId: string, prediction: Prediction | null, usage: EngineUsage | null): void {
    if (usage !== null && usage.cachedTokens !== null)
      this.scheduler.reportUncached(bookingId, usage.promptTokens - usage.cachedTokens);
    // (The proxy's `reported` hook: judgedPrediction at booking, this at the end.)
    if (prediction) this.feedback.check(prediction, usage);
    this.scheduler.free(bookingId);
  }

  /** The request failed or was cut: the booking is freed without a report. */
  abandoned(bookingId: string): void {
    this.scheduler.free(bookingId);
  }

  /**
   * Another replica's sync message arrived. When load went down here (wake queued requests): the
   * instance whose load did, or null when it names none (a peer's reset); false: nothing freed.
   */
  receiveSync(bytes: Uint8Array): string | null | false {
    if (!this.remote) return false;
    const r = this.remote.handle(decodeSync(bytes), this.now());
    if (r.outcome === 'applied') this.tally.sync.received++;
    return r.released ? r.instance : false;
  }

  /** Final figures: KV-event outcomes, open alarms and index size. */
  close(): RouterTally {
    const applied: Record<string, number> = {};
    for (const ing of this.ingests)
      for (const [k, v] of Object.entries(ing.counts.applied)) applied[k] = (applied[k] ?? 0) + v;
    this.tally.applied = applied;
    this.tally.hitCheck.alarms = this.feedback.verifier.alarms().length;
    this.tally.index = this.indexer.stats();
    this.tally.openBookings = this.scheduler.active.size;
    return this.tally;
  }
}
