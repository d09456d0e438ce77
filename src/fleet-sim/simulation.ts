// The fleet simulation: client arrivals, router replicas, engines, KV-event and replica-sync
// delivery as events on one virtual clock. A request's life follows the proxy path
// (src/proxy/forward.ts): decide (or wait for capacity, bounded), book, send to the engine; its
// first token completes the booking's prefill; its last token carries the usage that the hit check
// reads before the booking is freed. Pure: no sockets, no timers, no wall clock (the optional
// stopwatch only measures decisions).
import type { TokenOutput } from '../engine-sim/core/engine-core.js';
import type { CoreKvEvent } from '../engine-sim/core/kv-events.js';
import { vllmEncoder } from '../engine-sim/events/vllm-format.js';
import { loadGaugeSamples } from '../engine-sim/runtime/load-gauges.js';
import { loadsFromSamples } from '../engine-load/load-view.js';
import { encodeBatch, type WireEncoder } from '../engine-sim/events/wire.js';
import type { RouteFields } from '../router/route-input.js';
import type { Decision } from '../scheduler/scheduler.js';
import { EngineNode } from './engine-node.js';
import { EventQueue } from './event-queue.js';
import { RouterNode } from './router-node.js';
import type { FleetInput, FleetOutput, FleetRecord } from './types.js';

type SimEvent =
  | { kind: 'send'; i: number }
  | { kind: 'step'; engine: number }
  | { kind: 'enqueue'; i: number }
  | { kind: 'kv'; engine: number; payload: Uint8Array | null; value: unknown }
  | { kind: 'sync'; from: number; bytes: Uint8Array }
  | { kind: 'wake'; i: number; epoch: number }
  | { kind: 'scrape'; engine: number }
  | { kind: 'deadline' };

/** A request between its send and its end. */
interface InFlight {
  i: number;
  router: number;
  receivedAt: number;
  tokens: Uint32Array;
  fields: RouteFields & { ttlMs: number };
  /** Capacity-queue waits: a wake carrying an older epoch is stale. */
  epoch: number;
  deadline: number;
  queued: boolean;
  decision: Decision | null;
  bookingId: string | null;
  engine: number;
  engineId: string | null;
}

const RUN_DEADLINE = 'timeout (run deadline)';

export function simulateFleet(input: FleetInput): FleetOutput {
  const q = new EventQueue<SimEvent>();
  const now = () => q.now;
  const n = input.requests.length;
  const engines = input.engines.map((core, k) => new EngineNode(k, input.ids[k], core));
  const engineIndex = new Map(input.ids.map((id, k) => [id, k] as const));
  const R = input.routers;
  const sync = input.syncDelayMs !== null && R > 1 ? input.syncDelayMs : null;
  const routers: RouterNode[] = [];
  for (let r = 0; r < R; r++) {
    const publish =
      sync === null ? null : (bytes: Uint8Array) => q.push(q.now + sync, { kind: 'sync', from: r, bytes });
    routers.push(new RouterNode(r, `r${r}`, input.router, input.ids, input.seed + r, now, publish));
  }
  const subscribed = input.router.kvEvents;
  // Each engine renders its events as engine-sim's vLLM publisher does (map layout, dp rank 0).
  const encoders: WireEncoder[] = engines.map(() =>
    vllmEncoder(
      {
        blockSize: input.blockSize,
        modelName: input.model,
        dpRank: 0,
        loraIds: new Map(),
        tenantId: 'default',
        backendId: '',
      },
      'map',
    ),
  );

  const records: FleetRecord[] = new Array(n);
  const inflight = new Map<string, InFlight>();
  const waiting: InFlight[][] = routers.map(() => []);
  const followers = new Map<number, number[]>();
  for (let i = 0; i < n; i++) {
    const a = input.requests[i].after;
    if (a) followers.set(a.index, [...(followers.get(a.index) ?? []), i]);
  }
  const sw = input.stopwatch;
  const wallUs = new Float64Array(sw ? n : 0);
  const wallIsl = new Uint32Array(sw ? n : 0);
  const wallCand = new Uint32Array(sw ? n : 0);
  let timed = 0;
  let done = 0;
  let lastEnd = 0;
  let pastDeadline = false;
  let events = 0;
  let scrapes = 0;

  const finish = (rec: FleetRecord): void => {
    records[rec.index] = rec;
    lastEnd = Math.max(lastEnd, rec.sentAt + rec.e2eMs);
    done++;
    input.onDone?.(done);
    for (const f of followers.get(rec.index) ?? [])
      q.push(q.now + input.requests[f].after!.thinkMs, { kind: 'send', i: f });
  };
  const fail = (f: InFlight, status: number, error: string): void => {
    inflight.delete(reqId(f.i));
    finish({
      index: f.i,
      router: f.router,
      sentAt: f.receivedAt,
      ttftMs: null,
      e2eMs: q.now - f.receivedAt,
      status,
      instance: f.engineId,
      promptTokens: f.tokens.length,
      cachedTokens: 0,
      completionTokens: 0,
      error,
    });
  };
  const reqId = (i: number) => `q${i}`;

  /** CapacityQueue.notify(k): wake the oldest waiters of a router, each to decide again now. */
  const notify = (r: number, k: number): void => {
    const w = waiting[r];
    for (const f of w.splice(0, Math.min(k, w.length))) {
      f.queued = false;
      q.push(q.now, { kind: 'wake', i: f.i, epoch: ++f.epoch });
    }
  };

  const route = (f: InFlight): void => {
    const router = routers[f.router];
    const t0 = sw ? sw() : 0;
    const d = router.decide(f.fields, q.now);
    if (sw) {
      wallUs[timed] = (sw() - t0) * 1000;
      wallIsl[timed] = f.tokens.length;
      wallCand[timed++] = d.candidates.length;
    }
    input.onDecision?.(f.i, d, q.now);
    if (!d.chosen) {
      // All busy: wait for capacity (queue.turn), at most a second per turn, until the deadline.
      const cfgBusy = input.router.cfg.routing.busy;
      if (q.now >= f.deadline || waiting[f.router].length >= cfgBusy.queue_size) {
        router.tally.refused++;
        fail(f, 503, `every instance is over its busy threshold; retry later`);
        return;
      }
      f.queued = true;
      waiting[f.router].push(f);
      q.push(Math.min(f.deadline, q.now + 1000), { kind: 'wake', i: f.i, epoch: ++f.epoch });
      return;
    }
    const k = engineIndex.get(d.chosen.instance)!;
    f.decision = d;
    f.bookingId = `${router.id}-${reqId(f.i)}`;
    f.engine = k;
    f.engineId = d.chosen.instance;
    router.book(d, f.fields.ns, f.bookingId, f.fields.ttlMs, q.now);
    if (input.requestLatencyMs > 0) q.push(q.now + input.requestLatencyMs, { kind: 'enqueue', i: f.i });
    else enqueue(f);
  };

  /** The request reaches its engine. */
  const enqueue = (f: InFlight): void => {
    const e = engines[f.engine];
    e.core.add({ id: reqId(f.i), prompt: f.tokens, maxTokens: input.requests[f.i].maxTokens }, q.now);
    // As RankRunner.submit: an idle engine starts a pass after the requests of this instant.
    if (!e.scheduled) {
      e.scheduled = true;
      q.push(q.now, { kind: 'step', engine: f.engine });
    }
  };

  const send = (i: number): void => {
    const r = i % R;
    const tokens = input.prompt(i);
    if (pastDeadline) {
      finish({
        index: i,
        router: r,
        sentAt: q.now,
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
    const fields = routers[r].route(tokens, input.requests[i].sessionKey);
    const f: InFlight = {
      i,
      router: r,
      receivedAt: q.now,
      tokens,
      fields,
      epoch: 0,
      deadline: q.now + input.router.cfg.routing.busy.queue_timeout_ms,
      queued: false,
      decision: null,
      bookingId: null,
      engine: -1,
      engineId: null,
    };
    inflight.set(reqId(i), f);
    route(f);
  };

  const ttfts = new Float64Array(n).fill(NaN);
  const onToken = (t: TokenOutput): void => {
    const f = inflight.get(t.requestId);
    if (!f) return;
    const router = routers[f.router];
    if (t.index === 0) {
      ttfts[f.i] = q.now - f.receivedAt;
      router.firstToken(f.bookingId!, q.now);
      notify(f.router, 1);
    }
    if (!t.finishReason) return;
    inflight.delete(t.requestId);
    router.finished(f.bookingId!, f.decision!, { promptTokens: f.tokens.length, cachedTokens: t.cachedTokens });
    notify(f.router, 1);
    finish({
      index: f.i,
      router: f.router,
      sentAt: f.receivedAt,
      ttftMs: ttfts[f.i],
      e2eMs: q.now - f.receivedAt,
      status: 200,
      instance: f.engineId,
      promptTokens: f.tokens.length,
      cachedTokens: t.cachedTokens,
      completionTokens: t.index + 1,
      error: null,
    });
  };

  const publish = (k: number, evs: readonly CoreKvEvent[]): void => {
    if (!subscribed || evs.length === 0) return;
    const values = encoders[k].render(evs, q.now);
    // The ZMQ payload, or (`values`) the batch it would decode to, [ts, events, dp_rank].
    const ev: SimEvent =
      input.eventWire === 'bytes'
        ? { kind: 'kv', engine: k, payload: encodeBatch(q.now / 1000, values, 0), value: null }
        : { kind: 'kv', engine: k, payload: null, value: [q.now / 1000, values, 0] };
    q.push(q.now + input.kvEventDelayMs, ev);
  };

  const step = (k: number): void => {
    const e = engines[k];
    const out = e.takeOutput();
    if (out) {
      for (const t of out.tokens) onToken(t);
      for (const id of out.rejected) {
        const f = inflight.get(id);
        if (!f) continue;
        routers[f.router].abandoned(f.bookingId!);
        notify(f.router, 1);
        fail(f, 0, `request ${id} needs more KV blocks than this engine has`);
      }
    }
    const pass = e.startPass(q.now);
    if (!pass) {
      e.scheduled = false;
      return;
    }
    publish(k, pass.events);
    q.push(pass.endMs, { kind: 'step', engine: k });
  };

  // Open-loop sends in time order (stable for equal times), then the run deadline.
  const open = input.requests
    .map((r, i) => ({ i, at: r.atMs }))
    .filter((x) => input.requests[x.i].after === null)
    .sort((a, b) => a.at - b.at || a.i - b.i);
  for (const o of open) q.push(o.at, { kind: 'send', i: o.i });
  const lastOpen = open.length ? open[open.length - 1].at : 0;
  q.push(lastOpen + input.drainTimeoutMs, { kind: 'deadline' });
  // Each engine's scrape loop runs at its own phase (k/N of the interval), as a scraper that
  // started its per-endpoint loops one after another.
  const every = input.scrapeIntervalMs;
  if (every !== null)
    for (let k = 0; k < engines.length; k++) q.push((k * every) / engines.length, { kind: 'scrape', engine: k });

  // Until nothing is left: after the last response, the KV events and sync messages in flight land.
  for (let item = q.pop(); item !== null; item = q.pop()) {
    events++;
    const ev = item.ev;
    switch (ev.kind) {
      case 'send':
        send(ev.i);
        break;
      case 'step':
        step(ev.engine);
        break;
      case 'enqueue': {
        const f = inflight.get(reqId(ev.i));
        if (f) enqueue(f);
        break;
      }
      case 'kv':
        for (const r of routers) {
          if (ev.payload) r.ingests[ev.engine].applyPayload(ev.payload, false);
          else r.ingests[ev.engine].applyValue(ev.value);
        }
        break;
      case 'sync':
        for (let r = 0; r < R; r++) if (r !== ev.from && routers[r].receiveSync(ev.bytes)) notify(r, Infinity);
        break;
      case 'wake': {
        const f = inflight.get(reqId(ev.i));
        if (!f || f.epoch !== ev.epoch || f.decision) break;
        if (f.queued) {
          const w = waiting[f.router];
          w.splice(w.indexOf(f), 1);
          f.queued = false;
        }
        route(f);
        break;
      }
      case 'scrape': {
        // The router's reader (loadsFromSamples) over the engine's gauges (vLLM names) as they stand now.
        const k = ev.engine;
        scrapes++;
        const loads = loadsFromSamples(loadGaugeSamples(input.model, 0, engines[k].core.stats()), q.now);
        if (loads) for (const r of routers) r.engineLoads.set(input.ids[k], loads);
        if (done < n) q.push(q.now + every!, ev);
        break;
      }
      case 'deadline': {
        // The client's run deadline: whatever is still running or queued is cut.
        if (done === n) break;
        pastDeadline = true;
        for (const f of [...inflight.values()].sort((a, b) => a.i - b.i)) {
          if (f.decision) {
            engines[f.engine].core.abort(reqId(f.i));
            routers[f.router].abandoned(f.bookingId!);
          }
          fail(f, 0, RUN_DEADLINE);
        }
        for (const w of waiting) w.length = 0;
        break;
      }
    }
  }
  const first = records.reduce((a, r) => Math.min(a, r.sentAt), Infinity);
  return {
    records,
    engines: engines.map((e) => e.tally),
    routers: routers.map((r) => r.close()),
    spanMs: n ? lastEnd - first : 0,
    events,
    scrapes,
    wallDecisions: {
      us: wallUs.subarray(0, timed),
      isl: wallIsl.subarray(0, timed),
      candidates: wallCand.subarray(0, timed),
    },
  };
}
