// The fleet simulation: client arrivals, router replicas, engines, KV-event and replica-sync
// delivery and the engines' metrics scrapes as events on one virtual clock. A request's life
// follows the proxy path (src/proxy/forward.ts): decide (or wait for capacity, bounded), book, send
// to the engine; its first token completes the booking's prefill; its last token carries the usage
// that the hit check reads before the booking is freed. Pure: no sockets, no timers, no wall clock
// (the optional stopwatch only measures decisions).
import { loadsFromSamples } from '../engine-load/load-view.js';
import type { TokenOutput } from '../engine-sim/core/engine-core.js';
import type { CoreKvEvent } from '../engine-sim/core/kv-events.js';
import { vllmEncoder } from '../engine-sim/events/vllm-format.js';
import { encodeMapBatch } from '../engine-sim/events/vllm-map-writer.js';
import { encodeBatch, type WireEncoder } from '../engine-sim/events/wire.js';
import { loadGaugeSamples } from '../engine-sim/runtime/load-gauges.js';
import { type HoldTry, HoldQueue } from '../scheduler/hold.js';
import { EngineNode, TALLY_FIELDS } from './engine-node.js';
import { EventQueue, type Recurrence } from './event-queue.js';
import { type PayloadChunk, payloadArena } from './payload-arena.js';
import { InlineReplicas, type RouterReplicas } from './replicas.js';
import type { FleetInput, FleetOutput, FleetRecord } from './types.js';

type SimEvent =
  | { kind: 'send'; i: number }
  | { kind: 'step'; engine: number; window: Recurrence }
  | { kind: 'enqueue'; i: number }
  | { kind: 'kv'; engine: number; payload: Uint8Array | null; chunk: PayloadChunk | null; value: unknown }
  | { kind: 'sync'; from: number; bytes: Uint8Array }
  | { kind: 'wake'; i: number; epoch: number }
  | { kind: 'scrape'; engine: number }
  | { kind: 'expire' }
  | { kind: 'deadline' };

/** A request between its send and its end. */
interface InFlight {
  i: number;
  router: number;
  receivedAt: number;
  /** The prompt until the engine has it (it copies it): a prompt held for the request's life was promoted, with its buffer. */
  tokens: Uint32Array | null;
  promptLen: number;
  /** Capacity-queue waits: a wake carrying an older epoch is stale. */
  epoch: number;
  deadline: number;
  queued: boolean;
  /**
   * Booked (its replica keeps the closed loop's prediction): the decision's predicted TTFT. Not the
   * decision: its 1,024 candidates' scores per request in flight (at 1,024 x 3,000, dropping them
   * took the peak RSS from 1.56 to 1.18 GB and the CPU from 33.6 to 29.1 s).
   */
  booked: boolean;
  predictedTtftMs: number;
  engine: number;
  engineId: string | null;
}

const RUN_DEADLINE = 'timeout (run deadline)';
/** The server sweeps expired speculative entries from its index every second (src/router/app.ts). */
const EXPIRE_EVERY_MS = 1000;
const EXPIRE: SimEvent = { kind: 'expire' };
const reqId = (i: number) => `q${i}`;
const GO: HoldTry = { go: true };

/**
 * Record rows a router's index reserves (TieredIndexerOptions.reserveRecords): one confirmed record
 * per engine block, GPU and host, at the router's block size, + 1/8 for the bookings' speculative
 * records (swept every virtual second: 1,024 x 100,000 ended with 5.12 M records for 5.12 M engine
 * blocks in round six); 0 for routers that read no KV events. Rows never written cost no memory; a
 * run past the reservation grows the rows as usual.
 */
export function recordReserve(input: Pick<FleetInput, 'engines' | 'router'>): number {
  if (!input.router.kvEvents) return 0;
  const routerBlock = input.router.cfg.models[0].block_size;
  let tokens = 0;
  for (const e of input.engines) tokens += (e.cfg.numGpuBlocks + e.cfg.numCpuBlocks) * e.cfg.blockSize;
  return Math.ceil((tokens / routerBlock) * 1.125);
}

export function simulateFleet(input: FleetInput): FleetOutput {
  return new Simulation(input).run();
}

/** Real-clock decision times (the stopwatch's readings), kept apart from the simulation. */
class DecisionTimes {
  private readonly us: Float64Array;
  private readonly isl: Uint32Array;
  private readonly candidates: Uint32Array;
  private n = 0;

  constructor(capacity: number) {
    this.us = new Float64Array(capacity);
    this.isl = new Uint32Array(capacity);
    this.candidates = new Uint32Array(capacity);
  }

  add(ms: number, isl: number, candidates: number): void {
    this.us[this.n] = ms * 1000;
    this.isl[this.n] = isl;
    this.candidates[this.n++] = candidates;
  }

  output(): FleetOutput['wallDecisions'] {
    const n = this.n;
    return { us: this.us.subarray(0, n), isl: this.isl.subarray(0, n), candidates: this.candidates.subarray(0, n) };
  }
}

class Simulation {
  /** An engine's step event recurs through the engine's quiet window (EngineNode.window). */
  private readonly q = new EventQueue<SimEvent>((ev) => (ev.kind === 'step' ? ev.window : null));
  private readonly n: number;
  private readonly engines: EngineNode[];
  /** The R replicas (request i goes to replica i mod R). */
  private readonly R: number;
  private readonly routers: RouterReplicas;
  /** Each engine renders its events as engine-sim's vLLM publisher does (map layout, dp rank 0). */
  private readonly encoders: WireEncoder[];
  /** KV-event payloads in flight, cut from recycled chunks (payload-arena.ts). */
  private readonly payloads = payloadArena();
  /** The chunk of the payload `allocPayload` cut last (one allocator for every publish, no closure each). */
  private payloadChunk: PayloadChunk | null = null;
  private readonly allocPayload = (n: number): Uint8Array => {
    const a = this.payloads.alloc(n);
    this.payloadChunk = a.chunk;
    return a.array;
  };
  /** Each engine's step event (one object per engine, pushed once per pass). */
  private readonly stepEvents: SimEvent[];
  private readonly records: FleetRecord[];
  private readonly inflight = new Map<string, InFlight>();
  /** Per router, the requests waiting for capacity, oldest first. */
  private readonly holds: HoldQueue<InFlight>[];
  /** Follow-up turns of each request. */
  private readonly followers = new Map<number, number[]>();
  private readonly ttfts: Float64Array;
  private readonly times: DecisionTimes;
  private done = 0;
  private lastEnd = 0;
  private pastDeadline = false;
  private events = 0;
  private scrapes = 0;

  constructor(private readonly input: FleetInput) {
    const n = (this.n = input.requests.length);
    const counts = new Float64Array(input.engines.length * TALLY_FIELDS);
    this.engines = input.engines.map(
      (core, k) => new EngineNode(k, input.ids[k], core, counts, input.quietWindows ?? true),
    );
    const R = (this.R = input.routers);
    const sync = input.syncDelayMs !== null && R > 1 ? input.syncDelayMs : null;
    if (input.replicas && sync !== null) throw new Error('replica sync runs only with the inline replicas');
    this.routers =
      input.replicas ??
      new InlineReplicas({
        plan: input.router,
        ids: input.ids,
        count: R,
        seed: input.seed,
        reserveRecords: recordReserve(input),
        publish: sync === null ? null : (from, bytes) => this.q.push(this.q.now + sync, { kind: 'sync', from, bytes }),
        stopwatch: input.stopwatch,
        onDecision: input.onDecision,
      });
    const wire = {
      blockSize: input.blockSize,
      modelName: input.model,
      dpRank: 0,
      loraIds: new Map(),
      tenantId: 'default',
      backendId: '',
    };
    this.encoders = this.engines.map(() => vllmEncoder(wire, 'map'));
    this.stepEvents = this.engines.map((e, engine) => ({ kind: 'step', engine, window: e.window }));
    this.records = new Array(n);
    this.holds = Array.from({ length: R }, () => new HoldQueue<InFlight>(input.router.cfg.routing.busy.queue_size));
    for (let i = 0; i < n; i++) {
      const a = input.requests[i].after;
      if (a) this.followers.set(a.index, [...(this.followers.get(a.index) ?? []), i]);
    }
    this.ttfts = new Float64Array(n).fill(Number.NaN);
    this.times = new DecisionTimes(input.stopwatch ? n : 0);
  }

  run(): FleetOutput {
    this.scheduleSends();
    this.scheduleScrapes();
    this.q.push(EXPIRE_EVERY_MS, EXPIRE);
    // Until nothing is left: after the last response, the KV events and sync messages in flight land.
    for (let ev = this.q.pop(); ev !== null; ev = this.q.pop()) {
      // (The index's expiry sweeps are the server's timer, not simulated traffic: not counted.)
      if (ev !== EXPIRE) this.events++;
      this.dispatch(ev);
    }
    // The passes of quiet windows the queue let pass: each was a step event.
    this.events += this.q.silent;
    return this.output();
  }

  /** Open-loop sends in time order (stable for equal times), then the run deadline. */
  private scheduleSends(): void {
    const reqs = this.input.requests;
    const open = reqs
      .map((r, i) => ({ i, at: r.atMs }))
      .filter((x) => reqs[x.i].after === null)
      .sort((a, b) => a.at - b.at || a.i - b.i);
    for (const o of open) this.q.push(o.at, { kind: 'send', i: o.i });
    const lastOpen = open.length ? open[open.length - 1].at : 0;
    this.q.push(lastOpen + this.input.drainTimeoutMs, { kind: 'deadline' });
  }

  /**
   * Each engine's scrape loop runs at its own phase (k/N of the interval), as a scraper that
   * started its per-endpoint loops one after another.
   */
  private scheduleScrapes(): void {
    const every = this.input.scrapeIntervalMs;
    if (every === null) return;
    const N = this.engines.length;
    for (let k = 0; k < N; k++) this.q.push((k * every) / N, { kind: 'scrape', engine: k });
  }

  private dispatch(ev: SimEvent): void {
    switch (ev.kind) {
      case 'send':
        return this.send(ev.i);
      case 'step':
        return this.step(ev.engine);
      case 'enqueue': {
        const f = this.inflight.get(reqId(ev.i));
        if (f) this.enqueue(f);
        return;
      }
      case 'kv':
        // (Read during the call only: its chunk is free again after.)
        this.routers.kvBatch(ev.engine, ev.payload, ev.value, this.q.now);
        this.payloads.release(ev.chunk);
        return;
      case 'sync':
        for (let r = 0; r < this.R; r++) {
          if (r === ev.from) continue;
          const freed = this.routers.receiveSync(r, ev.bytes, this.q.now);
          if (freed === false) continue;
          // As the server's onReleased (CapacityQueue.notify(instance)): a peer's booking freed room
          // on `freed`, whose waiters are tried; naming none (a peer's reset), every waiter is due.
          if (freed === null) this.holds[r].dueAll();
          this.pump(r, freed);
        }
        return;
      case 'wake':
        return this.wake(ev.i, ev.epoch);
      case 'scrape':
        return this.scrape(ev);
      case 'expire':
        // As the server's timer (src/router/app.ts): expired bookings leave each replica's index.
        this.routers.expire(this.q.now);
        if (this.done < this.n) this.q.push(this.q.now + EXPIRE_EVERY_MS, EXPIRE);
        return;
      case 'deadline':
        return this.deadline();
    }
  }

  /** The client sends request i to replica i mod R. */
  private send(i: number): void {
    const r = i % this.R;
    const tokens = this.input.prompt(i);
    const now = this.q.now;
    if (this.pastDeadline) {
      this.finish({
        index: i,
        router: r,
        sentAt: now,
        ttftMs: null,
        e2eMs: 0,
        status: 0,
        instance: null,
        promptTokens: tokens.length,
        cachedTokens: 0,
        completionTokens: 0,
        error: RUN_DEADLINE,
      });
      return;
    }
    const f: InFlight = {
      i,
      router: r,
      receivedAt: now,
      tokens,
      promptLen: tokens.length,
      epoch: 0,
      deadline: now + this.input.router.cfg.routing.busy.queue_timeout_ms,
      queued: false,
      booked: false,
      predictedTtftMs: 0,
      engine: -1,
      engineId: null,
    };
    this.inflight.set(reqId(i), f);
    this.routers.arrive(r, i, tokens, this.input.requests[i].sessionKey, now);
    this.route(f);
  }

  /**
   * Decide; book and send, or wait for capacity. With requests waiting at this router (the
   * capacity queue, src/proxy/capacity.ts), it joins their tail and the queue is tried in order.
   */
  private route(f: InFlight): void {
    const q = this.holds[f.router];
    if (q.depth > 0) {
      if (!q.add(f, '')) return this.refuse(f);
      this.queued(f);
      return this.pump(f.router);
    }
    // As the server: only a request that can queue may wait for a busy holder of its prefix.
    const t = this.tryRoute(f, q.depth < q.maxSize && this.q.now < f.deadline);
    if ('go' in t) return;
    if (this.q.now >= f.deadline || !q.add(f, '', t.holder)) return this.refuse(f);
    this.queued(f);
  }

  /** One decision: booked and sent ('go'), or it waits. */
  private tryRoute(f: InFlight, mayHold: boolean): HoldTry {
    const d = this.routers.decide(f.router, f.i, this.q.now, mayHold);
    if (this.input.stopwatch) this.times.add(d.wallMs, f.promptLen, d.candidates);
    if (d.engine < 0)
      return {
        anyFree: d.anyFree,
        holder: d.holder < 0 ? null : { instance: this.input.ids[d.holder], dpRank: d.holderRank },
      };
    const k = d.engine;
    f.booked = true;
    f.predictedTtftMs = d.ttftMs;
    f.engine = k;
    f.engineId = this.input.ids[k];
    this.routers.book(f.router, f.i, this.q.now);
    const latency = this.input.requestLatencyMs;
    if (latency > 0) this.q.push(this.q.now + latency, { kind: 'enqueue', i: f.i });
    else this.enqueue(f);
    return GO;
  }

  /** Waiting: its own timer tries the queue again at most a second later (the server's missed-wake-up bound). */
  private queued(f: InFlight): void {
    f.queued = true;
    this.q.push(Math.min(f.deadline, this.q.now + 1000), { kind: 'wake', i: f.i, epoch: ++f.epoch });
  }

  private refuse(f: InFlight): void {
    this.routers.dropped(f.router, f.i, this.q.now, true);
    this.fail(f, 503, `every instance is over its busy threshold; retry later`);
  }

  /** A waiter's timer: the queue is tried again; past its deadline it leaves with a 503. */
  private wake(i: number, epoch: number): void {
    const f = this.inflight.get(reqId(i));
    if (!f || f.epoch !== epoch || !f.queued) return;
    this.holds[f.router].due(f);
    this.pump(f.router);
    if (!f.queued) return;
    if (this.q.now < f.deadline) return this.queued(f);
    // Its time is up: a last try that takes a free candidate rather than wait for a holder.
    this.holds[f.router].remove(f);
    f.queued = false;
    if (!('go' in this.tryRoute(f, false))) this.refuse(f);
  }

  /** CapacityQueue.notify: capacity may have freed (on engine `freed`); the router's waiters it may let go are tried in arrival order. */
  private pump(r: number, freed: string | null = null): void {
    const q = this.holds[r];
    if (q.depth === 0) return;
    for (const f of q.pass((w) => this.tryRoute(w, true), freed)) f.queued = false;
  }

  /** The request reaches its engine. */
  private enqueue(f: InFlight): void {
    const e = this.engines[f.engine];
    e.add({ id: reqId(f.i), prompt: f.tokens!, maxTokens: this.input.requests[f.i].maxTokens }, this.q.now);
    f.tokens = null;
    // As RankRunner.submit: an idle engine starts a pass after the requests of this instant.
    if (!e.scheduled) {
      e.scheduled = true;
      this.q.push(this.q.now, this.stepEvents[f.engine]);
    }
  }

  /** Engine k's pass ends: deliver its output, then start the next (or idle). */
  private step(k: number): void {
    const e = this.engines[k];
    const out = e.takeOutput();
    if (out) {
      // Only a request's first and last tokens move the proxy's state (most are neither).
      for (const t of out.visible) this.onToken(t);
      for (const id of out.rejected) {
        const f = this.inflight.get(id);
        if (!f) continue;
        this.routers.abandoned(f.router, f.i, this.q.now);
        this.pump(f.router, f.engineId);
        this.fail(f, 0, `request ${id} needs more KV blocks than this engine has`);
      }
    }
    const pass = e.startPass(this.q.now);
    if (!pass) {
      e.scheduled = false;
      return;
    }
    this.publish(k, pass.events);
    this.q.push(pass.endMs, this.stepEvents[k]);
  }

  private onToken(t: TokenOutput): void {
    const f = this.inflight.get(t.requestId);
    if (!f) return;
    const now = this.q.now;
    if (t.index === 0) {
      this.ttfts[f.i] = now - f.receivedAt;
      this.routers.firstToken(f.router, f.i, now);
      this.pump(f.router, f.engineId);
    }
    if (!t.finishReason) return;
    this.inflight.delete(t.requestId);
    this.routers.finished(f.router, f.i, f.promptLen, t.cachedTokens, now);
    this.pump(f.router, f.engineId);
    this.finish({
      index: f.i,
      router: f.router,
      sentAt: f.receivedAt,
      ttftMs: this.ttfts[f.i],
      e2eMs: now - f.receivedAt,
      status: 200,
      instance: f.engineId,
      predictedTtftMs: f.predictedTtftMs,
      promptTokens: f.promptLen,
      cachedTokens: t.cachedTokens,
      completionTokens: t.index + 1,
      error: null,
    });
  }

  /** A pass's KV events leave engine k for every replica (when the routers subscribe). */
  private publish(k: number, evs: readonly CoreKvEvent[]): void {
    if (!this.input.router.kvEvents || evs.length === 0) return;
    const now = this.q.now;
    // The ZMQ payload, or (`values`) the batch it would decode to, [ts, events, dp_rank].
    let ev: SimEvent;
    if (this.input.eventWire === 'bytes') {
      this.payloadChunk = null;
      // Written straight from the events (the same bytes) unless one needs the generic renderer.
      const payload =
        encodeMapBatch(now / 1000, evs, this.input.blockSize, 0, this.allocPayload) ??
        encodeBatch(now / 1000, this.encoders[k].render(evs, now), 0, this.allocPayload);
      ev = { kind: 'kv', engine: k, payload, chunk: this.payloadChunk, value: null };
    } else {
      const values = this.encoders[k].render(evs, now);
      ev = { kind: 'kv', engine: k, payload: null, chunk: null, value: [now / 1000, values, 0] };
    }
    this.q.push(now + this.input.kvEventDelayMs, ev);
  }

  /** The router's reader (loadsFromSamples) over the engine's gauges (vLLM names) as they stand now. */
  private scrape(ev: { kind: 'scrape'; engine: number }): void {
    const k = ev.engine;
    this.scrapes++;
    const loads = loadsFromSamples(loadGaugeSamples(this.input.model, 0, this.engines[k].stats()), this.q.now);
    if (loads) this.routers.scrape(k, loads, this.q.now);
    if (this.done < this.n) this.q.push(this.q.now + this.input.scrapeIntervalMs!, ev);
  }

  /** The client's run deadline: whatever is still running or queued is cut. */
  private deadline(): void {
    if (this.done === this.n) return;
    this.pastDeadline = true;
    for (const f of [...this.inflight.values()].sort((a, b) => a.i - b.i)) {
      if (f.booked) {
        this.engines[f.engine].abort(reqId(f.i));
        this.routers.abandoned(f.router, f.i, this.q.now);
      } else this.routers.dropped(f.router, f.i, this.q.now, false);
      this.fail(f, 0, RUN_DEADLINE);
    }
    for (const q of this.holds) q.clear();
  }

  private fail(f: InFlight, status: number, error: string): void {
    this.inflight.delete(reqId(f.i));
    this.finish({
      index: f.i,
      router: f.router,
      sentAt: f.receivedAt,
      ttftMs: null,
      e2eMs: this.q.now - f.receivedAt,
      status,
      instance: f.engineId,
      promptTokens: f.promptLen,
      cachedTokens: 0,
      completionTokens: 0,
      error,
    });
  }

  /** A request ended (ok, failed or refused): record it and send its follow-up turns. */
  private finish(rec: FleetRecord): void {
    this.records[rec.index] = rec;
    this.lastEnd = Math.max(this.lastEnd, rec.sentAt + rec.e2eMs);
    this.done++;
    this.input.onDone?.(this.done);
    for (const f of this.followers.get(rec.index) ?? [])
      this.q.push(this.q.now + this.input.requests[f].after!.thinkMs, { kind: 'send', i: f });
  }

  private output(): FleetOutput {
    const first = this.records.reduce((a, r) => Math.min(a, r.sentAt), Infinity);
    return {
      records: this.records,
      engines: this.engines.map((e) => e.tally),
      routers: this.routers.close(),
      spanMs: this.n ? this.lastEnd - first : 0,
      events: this.events,
      scrapes: this.scrapes,
      wallDecisions: this.times.output(),
    };
  }
}
