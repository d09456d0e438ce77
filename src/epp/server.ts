// The gateway's endpoint picker over gRPC: envoy.service.ext_proc.v3.ExternalProcessor/Process on
// one port, grpc.health.v1 on another (liveness, readiness, the ext_proc service), both on the
// router's host. Runs in the router's process: one index, one set of bookings, one /metrics.
import * as grpc from '@grpc/grpc-js';
import { HealthImplementation, type ServingStatus } from 'grpc-health-check';
import { asListenError, ListenError } from '../common/listen.js';
import type { RouterRuntime } from '../router/runtime.js';
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

async function writeAll(call: Duplex, out: ProcessingResponse[]): Promise<void> {
  for (const m of out) {
    if (call.write(m)) continue;
    // Backpressure: wait for the gateway to read (or for the stream to go away).
    await new Promise<void>((resolve) => {
      const done = () => {
        call.off('drain', done);
        call.off('close', done);
        call.off('cancelled', done);
        resolve();
      };
      call.on('drain', done);
      call.on('close', done);
      call.on('cancelled', done);
    });
  }
}

export async function startEpp(rt: RouterRuntime, opts: EppOptions): Promise<EppHandle> {
  installGrpcLogger();
  const pool = `${opts.poolNamespace}/${opts.poolName}`;
  const addresses = new EndpointAddresses(rt.now);
  const open = new Set<ExtProcExchange>();
  let draining = false;
  const ready = () => !draining && !rt.shuttingDown && rt.all.some((m) => m.instances.some((i) => i.health.available(rt.now())));
  const metrics = createEppMetrics(rt.prom, pool, { streams: () => open.size, ready });
  let mismatchLoggedAt = -Infinity;
  const ctx: ExchangeContext = {
    rt,
    addresses,
    metrics,
    draining: () => draining || rt.shuttingDown,
    mismatch: (picked, served) => {
      if (rt.now() - mismatchLoggedAt < 60_000) return;
      mismatchLoggedAt = rt.now();
      rt.log(`kvrouter epp: pool ${pool}: the gateway served a request on ${served}, not on the picked ${picked} (counted in kvrouter_epp_served_mismatch_total; logged at most once a minute)`);
    },
  };

  const handleStream = async (call: Duplex): Promise<void> => {
    const x = new ExtProcExchange(ctx);
    open.add(x);
    let graceful = true;
    let failed = false;
    let onCancel = (): void => undefined;
    call.on('cancelled', () => {
      graceful = false;
      x.cancel();
      onCancel();
    });
    try {
      // Leaving the loop must not destroy the call: the status still has to go out (end below).
      for await (const msg of call.iterator({ destroyOnReturn: false }) as AsyncIterable<ProcessingRequest>) {
        const out = await x.onMessage(msg);
        if (out.length > 0) await writeAll(call, out);
        // An ImmediateResponse ends the exchange: Envoy sends nothing more for this request.
        if (out.some((m) => 'immediate_response' in m)) break;
      }
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
      open.delete(x);
      if (!call.cancelled && !call.destroyed) {
        if (failed) call.destroy(Object.assign(new Error('kvrouter epp: internal error'), { code: grpc.status.INTERNAL }));
        else call.end();
      }
    }
  };

  const maxMessage = Math.max(4 << 20, rt.deps.cfg.server.max_body_bytes + (1 << 20));
  const server = new grpc.Server({ 'grpc.max_receive_message_length': maxMessage, 'grpc.max_send_message_length': maxMessage });
  server.addService(loadExtProc()[EXT_PROC_SERVICE] as grpc.ServiceDefinition, {
    // Nothing a stream does may end the process: a bug is logged, not an unhandled rejection.
    Process: (call: Duplex) => void handleStream(call).catch((err: unknown) => process.stderr.write(`kvrouter epp: ${(err as Error).stack ?? String(err)}\n`)),
  });

  const health = new HealthImplementation(Object.fromEntries(HEALTH_SERVICES.map((s) => [s, 'NOT_SERVING' as ServingStatus])));
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

  // Readiness follows the pool: SERVING while not draining and some instance is healthy.
  let last: ServingStatus | null = null;
  const publish = () => {
    const s: ServingStatus = ready() ? 'SERVING' : 'NOT_SERVING';
    if (s === last) return;
    last = s;
    for (const name of HEALTH_SERVICES) if (name !== 'liveness') health.setStatus(name, s);
  };
  publish();
  const timer = setInterval(publish, 250);
  timer.unref();
  const models = rt.all.map((m) => `${m.name} x${m.instances.length}`).join(', ');
  rt.log(`kvrouter epp: ext_proc on ${opts.host}:${grpcPort}, gRPC health on ${opts.host}:${healthPort}, pool ${pool} (models: ${models})`);

  let closing: Promise<void> | null = null;
  return {
    grpcPort,
    healthPort,
    close(graceMs) {
      closing ??= (async () => {
        draining = true;
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
        for (const x of open) x.close(false);
        clearInterval(timer);
        health.setStatus('liveness', 'NOT_SERVING');
        healthServer.forceShutdown();
      })();
      return closing;
    },
  };
}
