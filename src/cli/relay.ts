// `kvrouter relay`: subscribe to the engines' KV events once and publish the normalized index
// changes to a JetStream stream that every router replica consumes (cluster.events.source =
// jetstream), with periodic index snapshots in the JetStream object store.
import { randomBytes } from 'node:crypto';
import { Registry as PromRegistry, collectDefaultMetrics } from 'prom-client';
import { createIndexerApp } from '../api/indexer-app.js';
import { honoListener, type RunningServer, startHttpServer } from '../api/http-server.js';
import { json } from '../api/indexer-routes.js';
import { EventRelay } from '../cluster/event-relay.js';
import { DEFAULT_STREAM_MAX_AGE_MS } from '../cluster/jetstream.js';
import { createClusterMetrics } from '../cluster/metrics.js';
import { NatsLink } from '../cluster/nats-link.js';
import type { ClusterConfig } from '../cluster/config.js';
import { CLUSTER_DEFAULTS } from '../cluster/options.js';
import { desiredRegistrations, modelSeeds } from '../router/registrations.js';
import { RelayTap } from '../cluster/relay-taps.js';
import { TieredIndexer } from '../indexer/namespaces.js';
import { KvIndexWriter } from '../indexer/writer.js';
import { ConfigInvalidError, loadConfigFile } from '../config/load.js';
import { listenerOptionsFromConfig } from '../events/config.js';
import type { ListenerOptions } from '../events/zmq-listener.js';
import { LISTENER_FLAGS, listenerOptionsFromFlags } from './listener-flags.js';
import { ListenerPool } from '../events/listener-pool.js';
import { Registry, type RegistrationSpec } from '../events/registry.js';
import { intOption, type OptionTable, type ParsedOptions, parseCommand } from '../common/args.js';
import { parseWorkersFlag, registerWorkers } from './workers-flag.js';

const D = CLUSTER_DEFAULTS;
const OPTIONS: OptionTable = {
  nats: {
    type: 'string',
    arg: 'URL',
    help: 'NATS server(s), nats://host:port[,...] (default: cluster.nats.url of --config, or $KVROUTER_NATS_URL)',
  },
  config: {
    type: 'string',
    short: 'c',
    arg: 'FILE',
    help: "router YAML: subscribe to every instance's kv_events, with its hash seeds",
  },
  workers: {
    type: 'string',
    arg: 'LIST',
    help: 'publishers as in `kvrouter indexer`: "id[:dp]=tcp://host:port[|replay-endpoint],..."',
  },
  model: { type: 'string', default: 'default', arg: 'NAME', help: 'model name for --workers' },
  'block-size': { type: 'string', default: '16', arg: 'N', help: 'block size for --workers' },
  type: { type: 'string', default: 'vLLM', arg: 'TYPE', help: 'publisher type for --workers' },
  tenant: { type: 'string', default: 'default', arg: 'ID', help: 'tenant for --workers' },
  'hash-seed': { type: 'string', default: '1337', arg: 'S', help: 'XXH3 seed (without --config)' },
  'subject-prefix': {
    type: 'string',
    arg: 'P',
    help: `publish on <P>.events (default: cluster.nats.subject_prefix of --config, else ${D.nats.subjectPrefix})`,
  },
  stream: {
    type: 'string',
    arg: 'NAME',
    help: `JetStream stream (default: cluster.events.stream of --config, else ${D.events.stream})`,
  },
  bucket: {
    type: 'string',
    arg: 'NAME',
    help: `object store bucket for snapshots (default: cluster.events.bucket of --config, else ${D.events.bucket})`,
  },
  'snapshot-every': {
    type: 'string',
    default: '10000',
    arg: 'N',
    help: 'snapshot the index every N relayed operations',
  },
  'snapshot-interval-ms': {
    type: 'string',
    default: '30000',
    arg: 'MS',
    help: '...or this often when anything changed',
  },
  'max-age-ms': {
    type: 'string',
    default: String(DEFAULT_STREAM_MAX_AGE_MS),
    arg: 'MS',
    help: 'stream retention (keep well above the snapshot interval)',
  },
  'reset-state': {
    type: 'boolean',
    help: 'purge the stream and delete the snapshot before starting (routers reload from empty)',
  },
  'relay-id': { type: 'string', arg: 'ID', help: 'relay name in messages and logs (default: random)' },
  ha: {
    type: 'boolean',
    help: 'high availability: run several relays of one stream; the lease holder publishes, the others stand by with a full index and take over',
  },
  'lease-ms': {
    type: 'string',
    default: '3000',
    arg: 'MS',
    help: 'with --ha: lease lifetime (a dead leader is replaced within about this long)',
  },
  'lease-bucket': {
    type: 'string',
    default: 'kvrouter-relay-lease',
    arg: 'NAME',
    help: 'with --ha: NATS KV bucket of the lease (one key per stream)',
  },
  host: {
    type: 'string',
    default: '127.0.0.1',
    arg: 'ADDR',
    help: "HTTP listen address (indexer API over the relay's index, /relay status)",
  },
  port: { type: 'string', default: '8092', arg: 'PORT', help: 'HTTP port ("none": no HTTP)' },
  ...LISTENER_FLAGS,
};

const SUMMARY =
  'KV-event fan-in: one set of ZMQ subscriptions, normalized index changes to JetStream for every router replica.';

interface Sources {
  specs: RegistrationSpec[];
  seed: bigint;
  seeds: Map<string, bigint>;
  workers: string | null;
  /** The config's `cluster:` section, once the router schema has one. */
  cluster: Partial<ClusterConfig> | null;
  /** Listener options: the config's kv_events under the command-line flags. */
  listener: ListenerOptions;
}

function sources(v: ParsedOptions): Sources {
  const workers = typeof v.workers === 'string' ? v.workers : null;
  if (typeof v.config === 'string') {
    const cfg = loadConfigFile(v.config, { env: process.env });
    const cluster = (cfg as { cluster?: Partial<ClusterConfig> }).cluster ?? null;
    const listener = listenerOptionsFromFlags(v, listenerOptionsFromConfig(cfg.kv_events));
    return {
      specs: desiredRegistrations(cfg),
      seed: BigInt(cfg.hashing.seed),
      seeds: modelSeeds(cfg),
      workers,
      cluster,
      listener,
    };
  }
  return {
    specs: [],
    seed: BigInt(String(v['hash-seed'])),
    seeds: new Map(),
    workers,
    cluster: null,
    listener: listenerOptionsFromFlags(v),
  };
}

const pick = (
  flag: string | boolean | string[] | undefined,
  fromConfig: string | undefined,
  fallback: string,
): string => (typeof flag === 'string' ? flag : (fromConfig ?? fallback));

type RelayOptions = Parameters<typeof EventRelay.start>[2];

/** The relay's settings: flags over the config's cluster section over the defaults; a bad combination throws. */
function relayOptions(v: ParsedOptions, src: Sources): RelayOptions {
  const opts: RelayOptions = {
    relayId: typeof v['relay-id'] === 'string' ? v['relay-id'] : `relay-${randomBytes(3).toString('hex')}`,
    subject: `${pick(v['subject-prefix'], src.cluster?.nats?.subject_prefix, D.nats.subjectPrefix)}.events`,
    stream: pick(v.stream, src.cluster?.events?.stream, D.events.stream),
    bucket: pick(v.bucket, src.cluster?.events?.bucket, D.events.bucket),
    snapshotEvery: intOption(v, 'snapshot-every'),
    snapshotIntervalMs: intOption(v, 'snapshot-interval-ms'),
    streamMaxAgeMs: intOption(v, 'max-age-ms'),
    resetState: v['reset-state'] === true,
    publishTimeoutMs: 5000,
    maxBatchBytes: 256 * 1024,
    ha: v.ha === true ? { bucket: String(v['lease-bucket']), leaseMs: intOption(v, 'lease-ms') } : null,
  };
  if (opts.ha && opts.resetState)
    throw new Error("--reset-state cannot be combined with --ha (a restarting standby would wipe the leader's stream)");
  if (opts.ha && (opts.ha.leaseMs < 300 || opts.ha.leaseMs > 600_000))
    throw new Error('--lease-ms must be between 300 and 600000');
  if (opts.ha && !/^[\w-]+$/.test(opts.ha.bucket)) throw new Error('--lease-bucket takes letters, digits, _ and -');
  return opts;
}

export async function run(argv: string[]): Promise<number> {
  const parsed = parseCommand('relay', SUMMARY, OPTIONS, argv);
  if ('code' in parsed) return parsed.code;
  const v = parsed.values;
  const fail = (msg: string) => (process.stderr.write(`kvrouter relay: ${msg}\n`), 2);
  let src: Sources;
  let opts: RelayOptions;
  let url: string | undefined;
  try {
    src = sources(v);
    url = (v.nats as string | undefined) ?? src.cluster?.nats?.url ?? process.env.KVROUTER_NATS_URL;
    if (!url) return fail('--nats (or cluster.nats.url in --config, or $KVROUTER_NATS_URL) is required');
    if (src.specs.length === 0 && !src.workers)
      return fail('nothing to relay: give --config (instances with kv_events) or --workers');
    opts = relayOptions(v, src);
  } catch (err) {
    return fail(err instanceof ConfigInvalidError ? err.message : (err as Error).message);
  }
  const log = (l: string) => process.stdout.write(`${l}\n`);
  const prom = new PromRegistry();
  collectDefaultMetrics({ register: prom });
  const metrics = createClusterMetrics(prom);
  const indexer = new TieredIndexer({ defaultSeed: src.seed, modelSeeds: src.seeds });
  const tap = new RelayTap(new KvIndexWriter(indexer));
  const link = new NatsLink({ url, name: `kvrouter ${opts.relayId}`, log });
  metrics.watch({ connected: { events: () => link.connected } });
  log(`kvrouter relay ${opts.relayId}: waiting for NATS at ${url}`);
  const relay = await EventRelay.start(link, tap, opts, { metrics, log });
  metrics.watch({ relayLeader: () => relay.publishing });
  const registry = new Registry();
  const listeners = new ListenerPool({ registry, writer: tap, metrics: prom, options: src.listener });
  try {
    for (const spec of src.specs) {
      const r = registry.register(spec, Date.now());
      if (r.kind === 'conflict') throw new Error(r.reason);
      listeners.add(r.registration);
    }
    if (src.workers) {
      const ctx = {
        model: String(v.model),
        blockSize: intOption(v, 'block-size'),
        type: String(v.type),
        tenant: String(v.tenant),
      };
      for (const r of registerWorkers(registry, parseWorkersFlag(src.workers), ctx)) listeners.add(r);
    }
  } catch (err) {
    await Promise.all([listeners.close(), relay.close()]);
    await link.close();
    return fail((err as Error).message);
  }
  relay.startLease(); // HA: compete only now that the listeners run
  let server: RunningServer | null = null;
  if (v.port !== 'none') {
    const { app } = createIndexerApp({ writer: tap, registry, listeners, metrics: prom });
    app.get('/relay', (c) => json(c, relay.status()));
    server = await startHttpServer(honoListener(app), {
      host: String(v.host),
      port: intOption(v, 'port'),
      role: 'relay HTTP server',
      hint: '--port',
    });
  }
  const role = opts.ha ? ` (ha: ${relay.status().role}, lease ${opts.ha.bucket}/${opts.stream})` : '';
  log(
    `kvrouter relay ${opts.relayId} publishing to ${opts.stream} (${opts.subject})${role}, ${registry.size} publishers${server ? `, http ${server.url}` : ''}`,
  );
  await new Promise<void>((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
  });
  // Detach the relay first: the listeners' closing purges must not reach the routers, which keep
  // their last index until a relay starts again (its start epoch replaces it).
  await server?.close();
  await relay.close();
  await listeners.close();
  await link.close();
  return 0;
}
