// Composition root: one engine = one HTTP server over `dpSize` ranks, each an EngineCore driven
// by a RankRunner and publishing on its own ZMQ PUB (+ replay) ports, like a vLLM DP deployment.
import type { AddressInfo } from 'node:net';
import { createServer, type RequestListener, type Server } from 'node:http';
import { listenOn } from '../common/listen.js';
import { EngineCore, type CoreStats } from './core/engine-core.js';
import { Rng } from './core/rng.js';
import type { SimRequestSpec } from './core/request.js';
import { mooncakeEncoder } from './events/mooncake-format.js';
import { sglangEncoder } from './events/sglang-format.js';
import { vllmEncoder } from './events/vllm-format.js';
import type { WireContext, WireEncoder } from './events/wire.js';
import { ENGINE_ROLES, ZmqEventPublisher } from './events/zmq-publisher.js';
import type { EngineBackend } from './http/backend.js';
import { debugCacheView } from './http/debug-cache.js';
import { TransferBoard } from './http/disagg.js';
import { HttpError, sendError } from './http/errors.js';
import { engineRequestListener } from './http/server.js';
import { coreConfig, resolveOptions, type EngineOptions, type ResolvedEngineOptions } from './options.js';
import { EngineMetrics } from './runtime/metrics.js';
import { RankRunner, type RequestSink } from './runtime/rank-runner.js';
import { loadCodec, type TextCodec } from './text/codec.js';

export interface RankEndpoints {
  dpRank: number;
  zmqEndpoint: string | null;
  replayEndpoint: string | null;
}

export interface EngineHandle {
  readonly id: string;
  /** http://host:port */
  readonly url: string;
  readonly port: number;
  /** PUB endpoint of DP rank 0 (tcp://host:port), null when KV events are off. */
  readonly zmqEndpoint: string | null;
  /** ROUTER replay endpoint of DP rank 0, null when replay is off. */
  readonly replayEndpoint: string | null;
  readonly ranks: readonly RankEndpoints[];
  readonly options: ResolvedEngineOptions;
  /** Live counters per DP rank (in-process callers: tests, benchmarks). */
  stats(): CoreStats[];
  /** Stop serving, abort in-flight requests, close every socket. Idempotent. */
  close(): Promise<void>;
}

function wireEncoder(o: ResolvedEngineOptions, ctx: WireContext): WireEncoder {
  switch (o.eventFormat) {
    case 'sglang':
      return sglangEncoder(ctx);
    case 'mooncake':
      return mooncakeEncoder(ctx, o.numCpuBlocks > 0 ? ['GPU', 'CPU'] : ['GPU']);
    default:
      return vllmEncoder(ctx, o.eventFormat);
  }
}

const tcp = (host: string, port: number): string => `tcp://${host.includes(':') ? `[${host}]` : host}:${port}`;

class Engine implements EngineBackend {
  readonly createdAt = Math.floor(Date.now() / 1000);
  private readonly owner = new Map<string, RankRunner>();
  private rr = 0;

  readonly disagg: EngineBackend['disagg'];

  constructor(
    readonly engineId: string,
    readonly opts: ResolvedEngineOptions,
    readonly codec: TextCodec,
    readonly runners: RankRunner[],
    private readonly metricsSink: EngineMetrics,
    port: number,
  ) {
    const o = opts;
    this.disagg = {
      role: o.role,
      board: new TransferBoard(),
      host: o.host,
      port,
      transferMs: (tokens) => (tokens * o.kvBytesPerToken) / (o.kvTransferGbps * 1e6) / o.speedup,
      transferTimeoutMs: o.transferTimeoutMs,
    };
  }

  get blockSize(): number {
    return this.opts.blockSize;
  }

  get model(): string {
    return this.opts.model;
  }
  get loraNames(): readonly string[] {
    return this.opts.loraModules;
  }
  get maxModelLen(): number {
    return this.opts.maxModelLen;
  }
  get defaultMaxTokens(): number {
    return this.opts.defaultMaxTokens;
  }
  get dpSize(): number {
    return this.runners.length;
  }

  submit(spec: SimRequestSpec, sink: RequestSink, dpRank: number | null): void {
    const runner = dpRank !== null ? this.runners[dpRank] : this.leastLoaded();
    const forget = (): void => void this.owner.delete(spec.id);
    this.owner.set(spec.id, runner);
    try {
      runner.submit(spec, {
        onToken: (t) => {
          if (t.finishReason) forget();
          sink.onToken(t);
        },
        onError: (m) => {
          forget();
          sink.onError(m);
        },
      });
    } catch (err) {
      forget();
      throw new HttpError(503, (err as Error).message);
    }
  }

  abort(id: string): void {
    this.owner.get(id)?.abort(id);
    this.owner.delete(id);
  }

  resetPrefixCache(): void {
    for (const r of this.runners) r.resetPrefixCache();
  }

  debugCache(detail: boolean): unknown {
    const signed = this.opts.eventFormat === 'sglang';
    return debugCacheView(
      {
        engineId: this.engineId,
        model: this.opts.model,
        blockSize: this.opts.blockSize,
        hashSeed: this.opts.hashSeed,
        eventFormat: this.opts.eventFormat,
        wireHash: (h) => (signed ? BigInt.asIntN(64, h) : h).toString(),
      },
      this.runners.map((r) => ({
        dpRank: r.rank,
        stats: r.core.stats(),
        ...r.core.snapshot(),
        gpuCapacity: this.opts.numGpuBlocks,
        cpuCapacity: this.opts.numCpuBlocks,
      })),
      detail,
    );
  }

  async metrics(): Promise<{ contentType: string; body: string }> {
    return { contentType: this.metricsSink.contentType, body: await this.metricsSink.text() };
  }

  private leastLoaded(): RankRunner {
    // Ties rotate, so an idle DP group still spreads requests.
    const n = this.runners.length;
    let best = this.runners[this.rr % n];
    for (let k = 1; k < n; k++) {
      const r = this.runners[(this.rr + k) % n];
      if (r.load < best.load) best = r;
    }
    this.rr++;
    return best;
  }
}

/** One DP rank's core (scheduler, caches, timing), seeded per rank. */
function rankCore(o: ResolvedEngineOptions, rank: number, codec: TextCodec): EngineCore {
  return new EngineCore(
    coreConfig(o, {
      perfModel: o.perf,
      seed: o.seed + rank * 7919,
      hashFlavor: o.eventFormat === 'sglang' ? 'sglang' : 'vllm',
      outputVocab: codec.outputVocab,
    }),
  );
}

/** Start one simulated engine (HTTP + ZMQ). Ports set to 0 are picked by the OS. */
export async function startEngine(options: EngineOptions = {}): Promise<EngineHandle> {
  const o = resolveOptions(options);
  const codec = await loadCodec(o.tokenizer);
  const publishers: ZmqEventPublisher[] = [];
  const runners: RankRunner[] = [];
  let server: Server | null = null;
  let listener: RequestListener | null = null;
  const closeAll = async (): Promise<void> => {
    for (const r of runners) r.close();
    if (server) {
      const s = server;
      await new Promise<void>((resolve) => {
        s.close(() => resolve());
        s.closeAllConnections();
      });
    }
    await Promise.all(publishers.map((p) => p.close()));
  };
  try {
    // Listen first (the port names the engine); answer 503 until the ranks exist.
    server = await listen(o, (req, res) =>
      listener ? listener(req, res) : sendError(res, new HttpError(503, 'engine starting')),
    );
    const port = (server.address() as AddressInfo).port;
    const engineId = o.engineId ?? `engine-sim-${port}`;
    const loraIds = new Map(o.loraModules.map((name, i) => [name, i + 1]));
    const cores = Array.from({ length: o.dpSize }, (_, rank) => rankCore(o, rank, codec));
    const metrics = new EngineMetrics(
      o.model,
      cores.map((c) => () => c.stats()),
      o,
    );
    for (let rank = 0; rank < o.dpSize; rank++) {
      let publisher: ZmqEventPublisher | null = null;
      if (o.zmqPort !== null) {
        const dropRng = new Rng(o.seed + rank, 0x0d20);
        publisher = await ZmqEventPublisher.open({
          endpoint: tcp(o.host, o.zmqPort === 0 ? 0 : o.zmqPort + rank),
          replayEndpoint: o.replayPort === null ? null : tcp(o.host, o.replayPort === 0 ? 0 : o.replayPort + rank),
          topic: o.topic,
          replayBuffer: o.replayBuffer,
          replayLayout: o.replayLayout,
          dropRate: o.dropRate,
          random: () => dropRng.nextFloat(),
          onError: (err) => process.stderr.write(`${engineId}: zmq: ${(err as Error)?.message ?? String(err)}\n`),
        });
        publishers.push(publisher);
      }
      const ctx: WireContext = {
        blockSize: o.blockSize,
        modelName: o.model,
        dpRank: rank,
        loraIds,
        tenantId: o.tenantId,
        backendId: o.backendId ?? engineId,
      };
      runners.push(new RankRunner(rank, cores[rank], wireEncoder(o, ctx), publisher, metrics));
    }
    const engine = new Engine(engineId, o, codec, runners, metrics, port);
    listener = engineRequestListener(engine);
    const ranks = runners.map((r) => ({
      dpRank: r.rank,
      zmqEndpoint: r.publisher?.endpoint ?? null,
      replayEndpoint: r.publisher?.replayEndpoint ?? null,
    }));
    const host = o.host.includes(':') ? `[${o.host}]` : o.host;
    let closing: Promise<void> | null = null;
    return {
      id: engineId,
      url: `http://${host}:${port}`,
      port,
      zmqEndpoint: ranks[0].zmqEndpoint,
      replayEndpoint: ranks[0].replayEndpoint,
      ranks,
      options: o,
      stats: () => cores.map((c) => c.stats()),
      close: () => (closing ??= closeAll()),
    };
  } catch (err) {
    await closeAll();
    throw err;
  }
}

async function listen(o: ResolvedEngineOptions, onRequest: RequestListener): Promise<Server> {
  const server = createServer(onRequest);
  server.keepAliveTimeout = 65_000;
  await listenOn(server, o.port, o.host, ENGINE_ROLES.http);
  return server;
}

/**
 * Start `count` engines with consecutive ports: engine i gets HTTP port + i and ZMQ/replay ports
 * + 2·dpSize·i (so PUB and replay ranges never collide). Ports of 0 stay ephemeral.
 */
export async function startEngines(count: number, options: EngineOptions = {}): Promise<EngineHandle[]> {
  if (!Number.isInteger(count) || count < 1) throw new RangeError(`count must be a positive integer, got ${count}`);
  const base = resolveOptions(options);
  const stride = 2 * base.dpSize;
  const shift = (p: number | null, by: number): number | null => (p === null || p === 0 ? p : p + by);
  const handles: EngineHandle[] = [];
  try {
    for (let i = 0; i < count; i++) {
      handles.push(
        await startEngine({
          ...options,
          port: base.port === 0 ? 0 : base.port + i,
          zmqPort: shift(base.zmqPort, stride * i),
          replayPort: shift(base.replayPort, stride * i),
          seed: base.seed + i,
          engineId: options.engineId ? `${options.engineId}-${i}` : undefined,
          backendId: options.backendId ? `${options.backendId}-${i}` : undefined,
        }),
      );
    }
  } catch (err) {
    await Promise.all(handles.map((h) => h.close()));
    throw err;
  }
  return handles;
}
