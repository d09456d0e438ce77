// `kvrouter indexer`: the standalone KV indexer service (Mooncake Conductor Indexer API).
import { createIndexerApp } from '../api/indexer-app.js';
import { honoListener, startHttpServer } from '../api/http-server.js';
import { Registry as PromRegistry, collectDefaultMetrics } from 'prom-client';
import { DEFAULT_REGISTER_ALLOWLIST, endpointAllowed } from '../auth/allowlist.js';
import { KvIndexWriter } from '../indexer/writer.js';
import { ListenerPool } from '../events/listener-pool.js';
import { Registry } from '../events/registry.js';
import { TieredIndexer } from '../indexer/namespaces.js';
import { PeerList, recoverFromPeers } from '../cluster/peers.js';
import { intOption, type OptionTable, type ParsedOptions, parseCommand } from '../common/args.js';
import { LISTENER_FLAGS, listenerOptionsFromFlags } from './listener-flags.js';
import { parseWorkersFlag, registerWorkers } from './workers-flag.js';

const OPTIONS: OptionTable = {
  host: { type: 'string', default: '127.0.0.1', arg: 'ADDR', help: 'listen address' },
  port: { type: 'string', default: '8090', arg: 'PORT', help: 'HTTP port' },
  workers: {
    type: 'string',
    arg: 'LIST',
    help: 'publishers to subscribe at start: "id[:dp]=tcp://host:port[|replay-endpoint],..."',
  },
  model: { type: 'string', default: 'default', arg: 'NAME', help: 'model name for --workers' },
  'model-name': { type: 'string', arg: 'NAME', help: "same as --model (Dynamo's flag name)" },
  'block-size': { type: 'string', default: '16', arg: 'N', help: 'block size for --workers' },
  type: {
    type: 'string',
    default: 'vLLM',
    arg: 'TYPE',
    help: 'publisher type for --workers (vLLM, SGLang, LMCache, Mooncake)',
  },
  tenant: { type: 'string', default: 'default', arg: 'ID', help: 'tenant for --workers' },
  'tenant-id': { type: 'string', arg: 'ID', help: "same as --tenant (Dynamo's flag name)" },
  peers: {
    type: 'string',
    arg: 'URL,URL',
    help: 'peer indexers to recover the index from at start (GET /dump of the first that answers), before listening',
  },
  'recovery-delay-ms': {
    type: 'string',
    default: '1000',
    arg: 'MS',
    help: 'wait this long before recovering (past the ZMQ slow-joiner window)',
  },
  'recovery-timeout-ms': {
    type: 'string',
    default: '30000',
    arg: 'MS',
    help: 'per-peer time limit of a /dump transfer',
  },
  'min-initial-workers': {
    type: 'string',
    arg: 'N',
    help: '/ready waits for this many registered workers (default $DYN_ROUTER_MIN_INITIAL_WORKERS or 0)',
  },
  threads: {
    type: 'string',
    default: '1',
    arg: 'N',
    help: 'accepted for Dynamo compatibility; the index runs on one event loop (1M block events/s ingest, ~100 us per 32k-token query)',
  },
  'hash-seed': { type: 'string', default: '1337', arg: 'S', help: 'XXH3 seed of the hashing standard' },
  'register-allowlist': {
    type: 'string',
    default: DEFAULT_REGISTER_ALLOWLIST.join(','),
    arg: 'LIST',
    help: 'CIDRs or host patterns /register may point listeners at',
  },
  'max-body-bytes': {
    type: 'string',
    default: String(8 * 1024 * 1024),
    arg: 'N',
    help: 'largest request body accepted',
  },
  ...LISTENER_FLAGS,
};

const SUMMARY =
  'Standalone KV indexer: POST /register /unregister /query /query_by_hash /events /register_peer /deregister_peer, GET /workers /dump /peers /health /ready /metrics.';

function nonNegative(raw: string, flag: string): number {
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 0)
    throw new Error(`${flag} must be a non-negative integer, got ${JSON.stringify(raw)}`);
  return n;
}

/** The flags checked before anything starts (a bad one exits 2 with its message). */
function readSettings(v: ParsedOptions) {
  let seed: bigint;
  try {
    seed = BigInt(String(v['hash-seed']));
  } catch {
    throw new Error('--hash-seed must be an integer');
  }
  const listenerOptions = listenerOptionsFromFlags(v);
  const peers = new PeerList(typeof v.peers === 'string' ? v.peers.split(',').filter(Boolean) : []);
  const minWorkers = nonNegative(
    String(v['min-initial-workers'] ?? process.env.DYN_ROUTER_MIN_INITIAL_WORKERS ?? '0'),
    '--min-initial-workers',
  );
  intOption(v, 'threads');
  return { seed, listenerOptions, peers, minWorkers };
}

/** A copy of a peer's index, after the slow-joiner delay (--recovery-delay-ms). */
async function recoverFirst(
  v: ParsedOptions,
  peers: PeerList,
  writer: KvIndexWriter,
  token: string | undefined,
  self: string,
): Promise<void> {
  await new Promise((r) => setTimeout(r, intOption(v, 'recovery-delay-ms')));
  const log = (l: string) => process.stdout.write(`kvrouter indexer: ${l.replace(/^cluster: /, '')}\n`);
  await recoverFromPeers(peers.list(), writer, Date.now, {
    timeoutMs: intOption(v, 'recovery-timeout-ms'),
    token: token ?? null,
    self,
    log,
  });
}

export async function run(argv: string[]): Promise<number> {
  const parsed = parseCommand('indexer', SUMMARY, OPTIONS, argv);
  if ('code' in parsed) return parsed.code;
  const v = parsed.values;
  let settings: ReturnType<typeof readSettings>;
  try {
    settings = readSettings(v);
  } catch (err) {
    process.stderr.write(`kvrouter indexer: ${(err as Error).message}\n`);
    return 2;
  }
  const { seed, listenerOptions, peers, minWorkers } = settings;
  const indexer = new TieredIndexer({ defaultSeed: seed });
  const registry = new Registry();
  const writer = new KvIndexWriter(indexer);
  const metrics = new PromRegistry();
  collectDefaultMetrics({ register: metrics });
  const listeners = new ListenerPool({ registry, writer, metrics, options: listenerOptions });
  const allow = String(v['register-allowlist'])
    .split(',')
    .map((x) => x.trim())
    .filter(Boolean);
  const adminToken = process.env.KVROUTER_ADMIN_TOKEN || undefined;
  let recovered = false;
  const { app } = createIndexerApp({
    writer,
    registry,
    listeners,
    metrics,
    adminToken,
    peers,
    ready: () => recovered && registry.size >= minWorkers,
    allowEndpoint: (e) => endpointAllowed(e, allow),
    limits: { maxBodyBytes: intOption(v, 'max-body-bytes') },
  });
  if (!adminToken)
    process.stdout.write(
      'kvrouter indexer: no KVROUTER_ADMIN_TOKEN set, /register and /events are open to anyone who can reach this port\n',
    );
  let workers: ReturnType<typeof registerWorkers> = [];
  if (typeof v.workers === 'string' && v.workers !== '') {
    try {
      workers = registerWorkers(registry, parseWorkersFlag(v.workers), {
        model: String(v['model-name'] ?? v.model),
        blockSize: intOption(v, 'block-size'),
        type: String(v.type),
        tenant: String(v['tenant-id'] ?? v.tenant),
      });
    } catch (err) {
      process.stderr.write(`kvrouter indexer: ${(err as Error).message}\n`);
      return 2;
    }
  }
  const server = await startHttpServer(honoListener(app), {
    host: String(v.host),
    port: intOption(v, 'port'),
    role: 'indexer HTTP server',
    hint: '--port',
  });
  const expirer = setInterval(() => indexer.expire(Date.now()), 1000);
  expirer.unref();
  process.stdout.write(`kvrouter indexer listening on ${server.url}\n`);
  // As Dynamo's standalone indexer: recover from a peer first (after the slow-joiner delay), then
  // start the --workers listeners; /ready answers 503 until then. Listeners with a replay endpoint
  // re-read the publisher's buffer from seq 0 on first connect, so nothing published meanwhile is lost.
  if (peers.list().length > 0) await recoverFirst(v, peers, writer, adminToken, server.url);
  for (const r of workers) listeners.add(r);
  recovered = true;
  await new Promise<void>((resolve) => {
    const stop = () => resolve();
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  });
  clearInterval(expirer);
  await server.close();
  await listeners.close();
  return 0;
}
