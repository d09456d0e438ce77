// The gateway's endpoint picker over gRPC: envoy.service.ext_proc.v3.ExternalProcessor/Process on
// one port, grpc.health.v1 on another (liveness, readiness, the ext_proc service), both on the
// router's host. Runs in the router's process: one index, one set of bookings, one /metrics.
import * as grpc from '@grpc/grpc-js';
import { HealthImplementation, type ServingStatus } from 'grpc-health-check';
import { asListenError, ListenError } from '../common/listen.js';
import type { RouterRuntime } from '../router/runtime.js';
import { BodyBudget } from './body-budget.js';
import { EndpointAddresses } from './endpoints.js';
import { type ExchangeContext, ExtProcExchange } from './exchange.js';
import { createEppMetrics } from './metrics.js';
import { EXT_PROC_SERVICE, loadExtProc, type ProcessingRequest, type ProcessingResponse } from './wire.js';

export interface EppOptions {
  host: string;
  /** ext_proc port (GIE: 9002; 0 = any free port). */
  grpcPort: number;
  /** gRPC health port (GIE: 9003; 0 = any free port). */
  healthPort: number;
  poolName: string;
  poolNamespace: string;
}

export interface EppHandle {
  readonly grpcPort: number;
  readonly healthPort: number;
  /** Readiness NOT_SERVING, refuse new requests, let open streams finish (up to graceMs), then cut them. */
  close(graceMs: number): Promise<void>;
}

/** The health service names GIE's picker serves ('' is the server as a whole: same as readiness). */
export const HEALTH_SERVICES = ['', 'liveness', 'readiness', EXT_PROC_SERVICE] as const;

type Duplex = grpc.ServerDuplexStream<ProcessingRequest, ProcessingResponse>;

let loggerInstalled = false;

/** grpc-js logs a failed bind itself: the ListenError below says it once, in kvrouter's words. */
function installGrpcLogger(): void {
  if (loggerInstalled) return;
  loggerInstalled = true;
  grpc.setLogger({
    error: (...args: unknown[]) => {
      const line = args.map(String).join(' ');
      if (!/No address added out of total/.test(line)) process.stderr.write(`kvrouter epp: grpc: ${line}\n`);
    },
  });
}

/** Bind a gRPC server; a taken port is a ListenError naming the flag that moves it. */
function bind(server: grpc.Server, host: string, port: number, role: string, flag: string): Promise<number> {
  const address = `${host.includes(':') ? `[${host}]` : host}:${port}`;
  return new Promise((resolve, reject) => {
    server.bindAsync(address, grpc.ServerCredentials.createInsecure(), (err, bound) => {
      if (!err) return resolve(bound);
      const code = /\b(EADDRINUSE|EACCES|EADDRNOTAVAIL)\b/.exec(err.message)?.[1];
      const e = code ? asListenError({ code }, address, role) : err;
      reject(e instanceof ListenError ? e.withHint(flag) : e);
    });
  });
}

type Bound = 'idle_timeout' | 'stream_timeout';

/**
 * A stream's two clocks (epp.idle_timeout_ms, epp.stream_timeout_ms): the gateway's silence while
 * the picker waits for its next message, and the stream's whole life. The picker's own work on a
 * message (a pick waiting for capacity) has its own bound (routing.busy.queue_timeout_ms).
 */
class StreamClock {
  private readonly endsAt: number;

  constructor(
    private readonly idleMs: number,
    totalMs: number,
  ) {
    this.endsAt = Date.now() + totalMs;
  }

  /** `p`, or the bound that ran out first while waiting for it (`idle`: the gateway's silence counts). */
  async race<T>(p: Promise<T>, idle: boolean): Promise<T | Bound> {
    p.catch(() => undefined); // a read left behind by a bound ends with the call
    const left = Math.max(0, this.endsAt - Date.now());
    const bound: Bound = idle && this.idleMs < left ? 'idle_timeout' : 'stream_timeout';
    let timer: NodeJS.Timeout | undefined;
    const out = new Promise<Bound>(
      (resolve) => (timer = setTimeout(resolve, bound === 'idle_timeout' ? this.idleMs : left, bound)),
    );
    try {
      return await Promise.race([p, out]);
    } finally {
      clearTimeout(timer);
    }
  }
}

/** Send `out` in order; false when the stream's life ran out while the gateway was not reading. */
async function writeAll(call: Duplex, out: ProcessingResponse[], clock: StreamClock): Promise<boolean> {
  for (const m of out) {
    if (call.write(m)) continue;
    // Backpressure: wait for the gateway to read (or for the stream to go away).
    let done = (): void => undefined;
    const drained = new Promise<void>((resolve) => {
      done = () => {
        call.off('drain', done);
        call.off('close', done);
        call.off('cancelled', done);
        resolve();
      };
      call.on('drain', done);
      call.on('close', done);
      call.on('cancelled', done);
    });
    const r = await clock.race(drained, false);
    if (r === 'stream_timeout') {
      done();
      return false;
    }
  }
  return true;
}

/** What the picker's streams share: the open exchanges, the body budget, the metrics, draining. */
class Picker {
  readonly open = new Set<ExtProcExchange>();
  readonly bodies: BodyBudget;
  readonly metrics: ReturnType<typeof createEppMetrics>;
  readonly ctx: ExchangeContext;
  draining = false;
  private mismatchLoggedAt = -Infinity;

  constructor(
    private readonly rt: RouterRuntime,
    readonly pool: string,
  ) {
    const addresses = new EndpointAddresses(rt.now);
    // One body of the largest size always fits, whatever the cap says.
    this.bodies = new BodyBudget(() => Math.max(rt.deps.cfg.epp.max_buffered_bytes, rt.deps.cfg.server.max_body_bytes));
    this.metrics = createEppMetrics(rt.prom, pool, {
      streams: () => this.open.size,
      buffered: () => this.bodies.bytes,
      ready: this.ready,
    });
    this.ctx = {
      rt,
      addresses,
      metrics: this.metrics,
      bodies: this.bodies,
      draining: () => this.draining || rt.shuttingDown,
      mismatch: (picked, served) => {
        if (rt.now() - this.mismatchLoggedAt < 60_000) return;
        this.mismatchLoggedAt = rt.now();
        rt.log(
          `kvrouter epp: pool ${pool}: the gateway served a request on ${served}, not on the picked ${picked} (counted in kvrouter_epp_served_mismatch_total; logged at most once a minute)`,
        );
      },
    };
  }

  /** Ready while not draining and some instance of the pool is healthy. */
  readonly ready = (): boolean =>
    !this.draining &&
    !this.rt.shuttingDown &&
    this.rt.all.some((m) => m.instances.some((i) => i.health.available(this.rt.now())));

  /** One ext_proc stream, from admission to its status. */
  async handleStream(call: Duplex): Promise<void> {
    const limits = this.rt.deps.cfg.epp;
    if (this.open.size >= limits.max_streams) {
      this.metrics.limited('max_streams');
      // The status a server-streaming handler reports an error with (grpc-js ends the call with it).
      call.emit('error', {
        code: grpc.status.RESOURCE_EXHAUSTED,
        details: `kvrouter epp: ${this.open.size} ext_proc streams are open, the most epp.max_streams allows; retry later`,
      });
      return;
    }
    const x = new ExtProcExchange(this.ctx);
    this.open.add(x);
    const clock = new StreamClock(limits.idle_timeout_ms, limits.stream_timeout_ms);
    let graceful = true;
    let failed = false;
    let onCancel = (): void => undefined;
    call.on('cancelled', () => {
      graceful = false;
      x.cancel();
      onCancel();
    });
    // Leaving the loop must not destroy the call: the status still has to go out (end below).
    const messages = (call.iterator({ destroyOnReturn: false }) as AsyncIterable<ProcessingRequest>)[
      Symbol.asyncIterator
    ]();
    try {
      const expired = await exchangeMessages(call, messages, x, clock);
      if (expired !== null && !call.cancelled) this.expire(call, x, expired);
    } catch (err) {
      graceful = false; // the gateway reset the stream (or a bug: say so, and end the call with INTERNAL)
      if ((err as { code?: unknown }).code === undefined) {
        process.stderr.write(`kvrouter epp: ${(err as Error).stack ?? String(err)}\n`);
        failed = true;
      }
    } finally {
      // grpc-js ends the reading side of a cancelled call just before it says 'cancelled': a stream
      // that ends before its response did gets a moment to say which it was (499 or a plain end).
      if (graceful && !x.done) {
        await new Promise<void>((resolve) => {
          const t = setTimeout(resolve, 100);
          onCancel = () => {
            clearTimeout(t);
            resolve();
          };
        });
      }
      x.close(graceful);
      this.open.delete(x);
      // Stop listening; a read still pending (a bound ran out) settles when the call ends.
      void messages.return?.().catch(() => undefined);
      if (!call.cancelled && !call.destroyed && !call.writableEnded) {
        if (failed)
          call.destroy(Object.assign(new Error('kvrouter epp: internal error'), { code: grpc.status.INTERNAL }));
        else call.end();
      }
    }
  }

  /** A stream whose bound ran out: counted, and answered as far as it still can be. */
  private expire(call: Duplex, x: ExtProcExchange, expired: Bound): void {
    const limits = this.rt.deps.cfg.epp;
    this.metrics.limited(expired);
    const ms = expired === 'idle_timeout' ? limits.idle_timeout_ms : limits.stream_timeout_ms;
    const why =
      expired === 'idle_timeout'
        ? `the gateway sent nothing on this stream for ${ms} ms (epp.idle_timeout_ms)`
        : `the stream was open for ${ms} ms (epp.stream_timeout_ms)`;
    // A request not yet picked gets its 408; a picked one is released, and the stream ends with
    // OK: the gateway carries on without the picker (its request may still be running). A
    // stream that never said anything ends with DEADLINE_EXCEEDED.
    const silent = x.silent;
    for (const m of x.expire(why)) call.write(m);
    if (silent) call.emit('error', { code: grpc.status.DEADLINE_EXCEEDED, details: `kvrouter epp: ${why}` });
  }
}

/** Feed the gateway's messages to the exchange and write its answers; the bound that ran out, if one did. */
async function exchangeMessages(
  call: Duplex,
  messages: AsyncIterator<ProcessingRequest>,
  x: ExtProcExchange,
  clock: StreamClock,
): Promise<Bound | null> {
  for (;;) {
    const next = await clock.race(messages.next(), true);
    if (typeof next === 'string') return next;
    if (next.done) return null;
    const out = await x.onMessage(next.value);
    if (out.length > 0 && !(await writeAll(call, out, clock))) return 'stream_timeout';
    // An ImmediateResponse ends the exchange: Envoy sends nothing more for this request.
    if (out.some((m) => 'immediate_response' in m)) return null;
  }
}

/** The ext_proc server (not yet bound) serving the picker's streams. */
function createExtProcServer(rt: RouterRuntime, picker: Picker): grpc.Server {
  const maxMessage = Math.max(4 << 20, rt.deps.cfg.server.max_body_bytes + (1 << 20));
  const server = new grpc.Server({
    'grpc.max_receive_message_length': maxMessage,
    'grpc.max_send_message_length': maxMessage,
  });
  server.addService(loadExtProc()[EXT_PROC_SERVICE] as grpc.ServiceDefinition, {
    // Nothing a stream does may end the process: a bug is logged, not an unhandled rejection.
    Process: (call: Duplex) =>
      void picker
        .handleStream(call)
        .catch((err: unknown) => process.stderr.write(`kvrouter epp: ${(err as Error).stack ?? String(err)}\n`)),
  });
  return server;
}

/** Readiness follows the pool: SERVING while not draining and some instance is healthy. */
function readinessPublisher(health: HealthImplementation, ready: () => boolean): () => void {
  let last: ServingStatus | null = null;
  return () => {
    const s: ServingStatus = ready() ? 'SERVING' : 'NOT_SERVING';
    if (s === last) return;
    last = s;
    for (const name of HEALTH_SERVICES) if (name !== 'liveness') health.setStatus(name, s);
  };
}

export async function startEpp(rt: RouterRuntime, opts: EppOptions): Promise<EppHandle> {
  installGrpcLogger();
  const pool = `${opts.poolNamespace}/${opts.poolName}`;
  const picker = new Picker(rt, pool);
  const server = createExtProcServer(rt, picker);

  const health = new HealthImplementation(
    Object.fromEntries(HEALTH_SERVICES.map((s) => [s, 'NOT_SERVING' as ServingStatus])),
  );
  health.setStatus('liveness', 'SERVING');
  const healthServer = new grpc.Server();
  health.addToServer(healthServer);

  let grpcPort: number;
  let healthPort: number;
  try {
    grpcPort = await bind(server, opts.host, opts.grpcPort, 'EPP ext_proc gRPC server', '--grpc-port');
    healthPort = await bind(healthServer, opts.host, opts.healthPort, 'EPP gRPC health server', '--grpc-health-port');
  } catch (err) {
    server.forceShutdown();
    healthServer.forceShutdown();
    throw err;
  }

  const publish = readinessPublisher(health, picker.ready);
  publish();
  const timer = setInterval(publish, 250);
  timer.unref();
  const models = rt.all.map((m) => `${m.name} x${m.instances.length}`).join(', ');
  rt.log(
    `kvrouter epp: ext_proc on ${opts.host}:${grpcPort}, gRPC health on ${opts.host}:${healthPort}, pool ${pool} (models: ${models})`,
  );
  if (rt.deps.access.enabled && rt.deps.cfg.epp.keyless === 'refuse')
    rt.log(
      'kvrouter epp: auth is on: gateway requests without a kvrouter key get 401 (epp.keyless: refuse); set epp.keyless: trusted when the gateway authenticates its clients',
    );

  let closing: Promise<void> | null = null;
  return {
    grpcPort,
    healthPort,
    close(graceMs) {
      closing ??= (async () => {
        picker.draining = true;
        publish();
        // New streams are refused by the server; open ones finish, or are cut at the deadline
        // (a cut stream releases its booking in its finally).
        await new Promise<void>((resolve) => {
          const cut = setTimeout(() => server.forceShutdown(), graceMs);
          server.tryShutdown(() => {
            clearTimeout(cut);
            resolve();
          });
        });
        for (const x of picker.open) x.close(false);
        clearInterval(timer);
        health.setStatus('liveness', 'NOT_SERVING');
        healthServer.forceShutdown();
      })();
      return closing;
    },
  };
}
