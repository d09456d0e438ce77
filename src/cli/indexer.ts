// `kvrouter indexer`: the standalone KV indexer service (Mooncake Conductor Indexer API).
import { createIndexerApp } from '../api/indexer-app.js';
import { honoListener, startHttpServer } from '../api/http-server.js';
import { Registry as PromRegistry, collectDefaultMetrics } from 'prom-client';
import { DEFAULT_REGISTER_ALLOWLIST, endpointAllowed } from '../auth/allowlist.js';
import { KvIndexWriter } from '../indexer/writer.js';
import { ListenerPool } from '../events/listener-pool.js';
import { Registry } from '../events/registry.js';
import { TieredIndexer } from '../indexer/tiered-indexer.js';
import { intOption, type OptionTable, parseCommand } from './args.js';
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
  'block-size': { type: 'string', default: '16', arg: 'N', help: 'block size for --workers' },
  type: { type: 'string', default: 'vLLM', arg: 'TYPE', help: 'publisher type for --workers (vLLM, SGLang, LMCache, Mooncake)' },
  tenant: { type: 'string', default: 'default', arg: 'ID', help: 'tenant for --workers' },
  'hash-seed': { type: 'string', default: '1337', arg: 'S', help: 'XXH3 seed of the hashing standard' },
  'register-allowlist': { type: 'string', default: DEFAULT_REGISTER_ALLOWLIST.join(','), arg: 'LIST', help: 'CIDRs or host patterns /register may point listeners at' },
  'max-body-bytes': { type: 'string', default: String(8 * 1024 * 1024), arg: 'N', help: 'largest request body accepted' },
  ...LISTENER_FLAGS,
};

const SUMMARY = 'Standalone KV indexer: POST /register /unregister /query /query_by_hash /events, GET /workers /dump /health /metrics.';

export async function run(argv: string[]): Promise<number> {
  const parsed = parseCommand('indexer', SUMMARY, OPTIONS, argv);
  if ('code' in parsed) return parsed.code;
  const v = parsed.values;
  let seed: bigint;
  try {
    seed = BigInt(String(v['hash-seed']));
  } catch {
    process.stderr.write('kvrouter indexer: --hash-seed must be an integer\n');
    return 2;
  }
  let listenerOptions;
  try {
    listenerOptions = listenerOptionsFromFlags(v);
  } catch (err) {
    process.stderr.write(`kvrouter indexer: ${(err as Error).message}\n`);
    return 2;
  }
  const indexer = new TieredIndexer({ defaultSeed: seed });
  const registry = new Registry();
  const writer = new KvIndexWriter(indexer);
  const metrics = new PromRegistry();
  collectDefaultMetrics({ register: metrics });
  const listeners = new ListenerPool({ registry, writer, metrics, options: listenerOptions });
  const allow = String(v['register-allowlist']).split(',').map((x) => x.trim()).filter(Boolean);
  const adminToken = process.env.KVROUTER_ADMIN_TOKEN || undefined;
  const { app } = createIndexerApp({
    writer,
    registry,
    listeners,
    metrics,
    adminToken,
    allowEndpoint: (e) => endpointAllowed(e, allow),
    limits: { maxBodyBytes: intOption(v, 'max-body-bytes') },
  });
  if (!adminToken) process.stdout.write('kvrouter indexer: no KVROUTER_ADMIN_TOKEN set, /register and /events are open to anyone who can reach this port\n');
  if (typeof v.workers === 'string' && v.workers !== '') {
    try {
      const regs = registerWorkers(registry, parseWorkersFlag(v.workers), {
        model: String(v.model),
        blockSize: intOption(v, 'block-size'),
        type: String(v.type),
        tenant: String(v.tenant),
      });
      for (const r of regs) listeners.add(r);
    } catch (err) {
      process.stderr.write(`kvrouter indexer: ${(err as Error).message}\n`);
      return 2;
    }
  }
  const server = await startHttpServer(honoListener(app), { host: String(v.host), port: intOption(v, 'port'), role: 'indexer HTTP server', hint: '--port' });
  const expirer = setInterval(() => indexer.expire(Date.now()), 1000);
  expirer.unref();
  process.stdout.write(`kvrouter indexer listening on ${server.url}\n`);
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
