// A share of bench fleet's router replicas on a worker thread (router-threads.ts): their plan is
// rebuilt from the policy's name, their calls read from the ring in the simulation's order as soon
// as they come (KV batches decoded, ring space freed) and run on LazyReplicas over InlineReplicas: a
// decision runs its replica's queued calls first, the others run while the ring is empty; each
// replica gets its calls in the inline run's order. A failure is reported on the port and in the
// control block (the main thread waits on it, never on this thread's events).
import { type MessagePort, workerData } from 'node:worker_threads';
import type { EngineLoad } from '../../engine-load/load-view.js';
import type { LazyReplicas as Lazy } from '../../fleet-sim/lazy-replicas.js';
import type { InlineReplicas as Replicas } from '../../fleet-sim/replicas.js';
import type { variant as Variant } from '../cluster/policies.js';
import type { routerPlan as RouterPlanOf } from '../fleet.js';
import { lowerThreadPriority } from './priority.js';
import { Ctl, HEADER, Op, RingViews, STATUS_FAILED } from './replica-ring.js';

export interface RouterWorkerData {
  sab: SharedArrayBuffer;
  port: MessagePort;
  /** Its replicas: `count` from replica `first` of the fleet. */
  first: number;
  count: number;
  policy: string;
  ids: string[];
  blockSize: number;
  seed: number;
  reserveRecords: number;
  timed: boolean;
  /**
   * Run queued calls while the ring is empty (true), or only when a decision or the tallies need
   * them (false: a test's way to make every decision catch its replica up).
   */
  catchUp: boolean;
  /** Run this much below the simulation's thread's scheduling priority (nice; 0: the same). */
  nice: number;
}

/**
 * Test hook (test/integration/bench-fleet-threads.test.ts): a worker fails at the n-th record it
 * runs, so that the test sees a worker's failure end the run. Not for anything else.
 */
const FAIL_AT = Number(process.env.KVROUTER_TEST_ROUTER_WORKER_FAIL_AT ?? 0);

const d = workerData as RouterWorkerData;
const v = new RingViews(d.sab);
const ctl = v.ctl;

/** The router's modules, imported inside the try below: a module that fails to load is reported too. */
interface Modules {
  InlineReplicas: typeof Replicas;
  LazyReplicas: typeof Lazy;
  variant: typeof Variant;
  routerPlan: typeof RouterPlanOf;
}

function run({ InlineReplicas, LazyReplicas, variant, routerPlan }: Modules): void {
  // A decision runs only its replica's queued calls first; the others catch up while the ring is empty.
  const replicas = new LazyReplicas(
    new InlineReplicas({
      plan: routerPlan(variant(d.policy), d.ids, d.blockSize),
      ids: d.ids,
      first: d.first,
      count: d.count,
      seed: d.seed,
      reserveRecords: d.reserveRecords,
      publish: null,
      stopwatch: d.timed ? () => performance.now() : undefined,
    }),
  );
  // KV payloads are copied out of the ring before decoding (decoders may not read shared memory).
  let payload = new Uint8Array(1 << 16);
  lowerThreadPriority(d.nice);
  let answers = 0;
  let ran = 0;
  let head = 0;
  for (;;) {
    const tail = Atomics.load(ctl, Ctl.tail);
    if (head === tail) {
      if (!(d.catchUp && replicas.step())) Atomics.wait(ctl, Ctl.tail, tail, 1000);
      continue;
    }
    const op = v.i32[head >> 2];
    const len = v.i32[(head >> 2) + 1];
    const f = (head + HEADER) >> 3;
    const f64 = v.f64;
    if (++ran === FAIL_AT) throw new Error(`test hook: failing at record ${FAIL_AT}`);
    switch (op) {
      case Op.wrap:
        break;
      case Op.arrive: {
        const n = f64[f + 3];
        const keyLen = f64[f + 4];
        const at = head + HEADER + 40;
        const tokens = v.u32.slice(at >> 2, (at >> 2) + n);
        const k0 = (at + n * 4) >> 1;
        const key = keyLen < 0 ? null : String.fromCharCode(...v.u16.subarray(k0, k0 + keyLen));
        replicas.arrive(f64[f], f64[f + 1], tokens, key, f64[f + 2]);
        break;
      }
      case Op.decide: {
        const r = replicas.decide(f64[f], f64[f + 1], f64[f + 2], f64[f + 3] === 1);
        const a = v.answer;
        a[0] = r.engine;
        a[1] = r.ttftMs;
        a[2] = r.candidates;
        a[3] = r.anyFree ? 1 : 0;
        a[4] = r.holder;
        a[5] = r.holderRank;
        a[6] = r.wallMs;
        Atomics.store(ctl, Ctl.answers, ++answers);
        Atomics.notify(ctl, Ctl.answers);
        break;
      }
      case Op.book:
        replicas.book(f64[f], f64[f + 1], f64[f + 2]);
        break;
      case Op.firstToken:
        replicas.firstToken(f64[f], f64[f + 1], f64[f + 2]);
        break;
      case Op.finished:
        replicas.finished(f64[f], f64[f + 1], f64[f + 3], f64[f + 4] < 0 ? null : f64[f + 4], f64[f + 2]);
        break;
      case Op.abandoned:
        replicas.abandoned(f64[f], f64[f + 1], f64[f + 2]);
        break;
      case Op.dropped:
        replicas.dropped(f64[f], f64[f + 1], f64[f + 2], f64[f + 3] === 1);
        break;
      case Op.kv: {
        const n = f64[f + 2];
        if (payload.length < n) payload = new Uint8Array(Math.max(n, 2 * payload.length));
        const at = head + HEADER + 24;
        payload.set(v.u8.subarray(at, at + n));
        replicas.kvBatch(f64[f], payload.subarray(0, n), null, f64[f + 1]);
        break;
      }
      case Op.scrape: {
        const loads = new Map<number, EngineLoad>();
        let g = f + 3;
        for (let c = 0; c < f64[f + 2]; c++, g += 5)
          loads.set(f64[g], {
            running: f64[g + 1],
            waiting: f64[g + 2],
            kvUsage: Number.isNaN(f64[g + 3]) ? null : f64[g + 3],
            at: f64[g + 4],
          });
        replicas.scrape(f64[f], loads, f64[f + 1]);
        break;
      }
      case Op.expire:
        replicas.expire(f64[f]);
        break;
      case Op.close:
        d.port.postMessage(replicas.close());
        Atomics.store(ctl, Ctl.answers, ++answers);
        Atomics.notify(ctl, Ctl.answers);
        return;
      default:
        throw new Error(`unknown call ${op} at ring offset ${head}`);
    }
    head = op === Op.wrap ? 0 : head + len;
    Atomics.store(ctl, Ctl.head, head);
    Atomics.notify(ctl, Ctl.head);
    Atomics.store(ctl, Ctl.beat, ran);
  }
}

try {
  const [r, l, p, f] = await Promise.all([
    import('../../fleet-sim/replicas.js'),
    import('../../fleet-sim/lazy-replicas.js'),
    import('../cluster/policies.js'),
    import('../fleet.js'),
  ]);
  run({ InlineReplicas: r.InlineReplicas, LazyReplicas: l.LazyReplicas, variant: p.variant, routerPlan: f.routerPlan });
} catch (e) {
  // One line: the message and where it was thrown.
  const where =
    e instanceof Error
      ? (e.stack
          ?.split('\n')
          .find((l) => l.trim().startsWith('at '))
          ?.trim() ?? '')
      : '';
  d.port.postMessage(`${e instanceof Error ? e.message : String(e)}${where ? ` (${where})` : ''}`);
  Atomics.store(ctl, Ctl.status, STATUS_FAILED);
  Atomics.notify(ctl, Ctl.answers);
  Atomics.notify(ctl, Ctl.head);
}
