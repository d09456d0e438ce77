// `kvrouter serve`: the router (OpenAI API, KV-aware routing, indexer API) from a YAML config.
import cluster from 'node:cluster';
import { createHash } from 'node:crypto';
import { availableParallelism } from 'node:os';
import { readFileSync, unwatchFile, watch, watchFile } from 'node:fs';
import { basename, dirname } from 'node:path';
import { ConfigInvalidError, loadConfigFile } from '../config/load.js';
import { type RouterHandle, startRouter } from '../router/app.js';
import { type OptionTable, type ParsedOptions, parseCommand } from '../common/args.js';
import type { EppHandle } from '../epp/server.js';
import { EPP_OPTIONS, eppOptions } from './epp.js';
import { PROCESS_INDEX_ENV } from '../processes/messages.js';
import type { PrimaryHandle } from '../processes/primary.js';

const OPTIONS: OptionTable = {
  config: {
    type: 'string',
    short: 'c',
    arg: 'FILE',
    help: 'YAML configuration (default: $KVROUTER_CONFIG or router.example.yaml)',
  },
  host: { type: 'string', arg: 'ADDR', help: 'override server.host' },
  port: { type: 'string', short: 'p', arg: 'PORT', help: 'override server.port' },
  policy: { type: 'string', arg: 'NAME', help: 'override routing.policy' },
  nats: { type: 'string', arg: 'URL', help: 'override cluster.nats.url (replica sync)' },
  'router-id': { type: 'string', arg: 'ID', help: 'override cluster.router_id' },
  peers: { type: 'string', arg: 'URL,URL', help: 'override cluster.peers (index recovery at start)' },
  'no-watch': {
    type: 'boolean',
    help: 'do not reload when the config file changes (SIGHUP and POST /admin/reload still do)',
  },
  workers: {
    type: 'string',
    arg: 'N|auto',
    help: 'router processes serving the port, kept in step (default 1; auto = one per core)',
  },
  set: {
    type: 'string',
    multiple: true,
    arg: 'KEY=VALUE',
    help: 'override any key, e.g. --set routing.temperature=0.5 (repeatable)',
  },
  ...EPP_OPTIONS,
};

const SUMMARY =
  'KV-cache-aware OpenAI router. Environment overrides: KVROUTER_<KEY>__<SUBKEY>=value (e.g. KVROUTER_SERVER__PORT=9000).';

export async function run(argv: string[], command: 'serve' | 'epp' = 'serve'): Promise<number> {
  const parsed = parseCommand(
    command,
    command === 'epp' ? `${SUMMARY} With the gateway endpoint picker (serve --epp).` : SUMMARY,
    OPTIONS,
    argv,
  );
  if ('code' in parsed) return parsed.code;
  const v = parsed.values;
  const epp = eppOptions(v, command === 'epp');
  if (epp !== null && 'error' in epp) {
    process.stderr.write(`kvrouter ${command}: ${epp.error}\n`);
    return 2;
  }
  const processes = processCount(v.workers);
  if (typeof processes === 'string') {
    process.stderr.write(`kvrouter ${command}: ${processes}\n`);
    return 2;
  }
  const file = (v.config as string | undefined) ?? process.env.KVROUTER_CONFIG ?? 'router.example.yaml';
  const set = configOverrides(v);
  let cfg: ReturnType<typeof loadConfigFile>;
  const loadOptions = { set, env: process.env };
  try {
    cfg = loadConfigFile(file, loadOptions);
  } catch (err) {
    if (err instanceof ConfigInvalidError) {
      process.stderr.write(`kvrouter ${command}: ${err.message}\n`);
      return 2;
    }
    throw err;
  }
  const index = process.env[PROCESS_INDEX_ENV];
  if (cluster.isWorker && index !== undefined) {
    // A router process of `--workers N`: the primary watches the file, handles signals and stops it.
    const { serveAsProcess } = await import('../processes/worker.js');
    // With --epp each process also serves the picker's gRPC ports (node:cluster shares them too).
    const code = await serveAsProcess(cfg, {
      configFile: file,
      loadOptions,
      epp,
      log: (l) => process.stdout.write(`[process ${index}] ${l}\n`),
    });
    // The IPC channel to the primary would keep this process alive: it is done once drained.
    process.exit(code);
  }
  const digest = () => fileDigest(file);
  // Taken before starting, so a change made while the router starts is not missed.
  const lastDigest = digest();
  // Signals are handled from before the router announces itself: a SIGHUP or SIGTERM that arrives
  // while it starts must not fall to the default action (which ends the process).
  let router: RouterHandle | null = null;
  let primary: PrimaryHandle | null = null;
  let hupWhileStarting = false;
  const reloadAll = () => (primary ? primary.reload() : void router?.reload());
  const onHup = () => (router || primary ? reloadAll() : (hupWhileStarting = true));
  process.on('SIGHUP', onHup);
  const stop = new Promise<void>((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
  });
  const watchOn = v['no-watch'] !== true;
  if (processes > 1) {
    const { startPrimary } = await import('../processes/primary.js');
    const log = (l: string) => process.stdout.write(`${l}\n`);
    primary = await startPrimary(cfg, { count: processes, log });
    log(`kvrouter listening on ${primary.url} (${processes} router processes)`);
    const running = primary;
    return watchAndWait({ file, watchOn, digest, lastDigest, reloadAll, hupWhileStarting, stop, onHup }, async () => {
      process.stdout.write('kvrouter: shutting down (draining in-flight requests)\n');
      await running.close();
    });
  }
  router = await startRouter(cfg, { configFile: file, loadOptions });
  // The picker shares the router's runtime (index, bookings, metrics); a port it cannot open stops both.
  let picker: EppHandle | null = null;
  if (epp !== null) {
    try {
      const { startEpp } = await import('../epp/server.js');
      picker = await startEpp(router.runtime, { host: router.config.server.host, ...epp });
    } catch (err) {
      await router.close();
      throw err;
    }
  }
  const running = router;
  return watchAndWait({ file, watchOn, digest, lastDigest, reloadAll, hupWhileStarting, stop, onHup }, async () => {
    process.stdout.write('kvrouter: shutting down (draining in-flight requests)\n');
    // Gateway streams drain first: their requests may still need the tokenizers the router closes.
    await picker?.close(running.config.server.shutdown_grace_ms);
    await running.close();
  });
}

/** --set, then the flags that are shorthands for config keys (--port is server.port, ...). */
function configOverrides(v: ParsedOptions): string[] {
  const set = [...((v.set as string[] | undefined) ?? [])];
  if (typeof v.host === 'string') set.push(`server.host=${v.host}`);
  if (typeof v.port === 'string') set.push(`server.port=${v.port}`);
  if (typeof v.policy === 'string') set.push(`routing.policy=${v.policy}`);
  if (typeof v.nats === 'string') set.push(`cluster.nats.url=${v.nats}`);
  if (typeof v['router-id'] === 'string') set.push(`cluster.router_id=${v['router-id']}`);
  if (typeof v.peers === 'string')
    v.peers
      .split(',')
      .filter(Boolean)
      .forEach((p, i) => {
        set.push(`cluster.peers.${i}=${p}`);
      });
  return set;
}

/** The config file's content hash (null while it cannot be read): a reload runs only when it changed. */
function fileDigest(file: string): string | null {
  try {
    return createHash('sha256').update(readFileSync(file)).digest('hex');
  } catch {
    return null;
  }
}

/** `--workers`: 1 by default, `auto` = one per core; an error message for anything else. */
function processCount(v: unknown): number | string {
  if (v === undefined) return 1;
  if (v === 'auto') return availableParallelism();
  const n = typeof v === 'string' && /^\d+$/.test(v) ? Number(v) : NaN;
  if (!Number.isInteger(n) || n < 1 || n > 256)
    return `--workers must be a whole number from 1 to 256, or auto (got '${String(v)}')`;
  return n;
}

interface Serving {
  file: string;
  watchOn: boolean;
  digest: () => string | null;
  /** The file's digest when it was loaded. */
  lastDigest: string | null;
  reloadAll: () => void;
  hupWhileStarting: boolean;
  /** Resolves at SIGINT/SIGTERM. */
  stop: Promise<void>;
  onHup: () => void;
}

/** Serve until SIGINT/SIGTERM, reloading on SIGHUP and on changes to the config file; then `shutdown`. */
async function watchAndWait(o: Serving, shutdown: () => Promise<void>): Promise<number> {
  const { file, watchOn, digest, reloadAll } = o;
  if (o.hupWhileStarting) reloadAll();
  let lastDigest = o.lastDigest;
  // Hot reload: SIGHUP, or a change to the file. The directory is watched (editors and Kubernetes
  // ConfigMaps replace the file rather than write it in place) and the file is also polled, since
  // watch events are not delivered on every filesystem; a reload runs only when the content changed.
  let debounce: NodeJS.Timeout | null = null;
  const changed = () => {
    if (debounce) clearTimeout(debounce);
    debounce = setTimeout(() => {
      const d = digest();
      if (d === null || d === lastDigest) return;
      lastDigest = d;
      reloadAll();
    }, 300);
  };
  const watcher = watchOn
    ? watch(dirname(file), (_ev, name) =>
        name === null || name === basename(file) || name === '..data' ? changed() : undefined,
      )
    : null;
  if (watchOn) {
    watchFile(file, { interval: 1000 }, changed);
    changed(); // a change made while the router was starting, before the watchers existed
  }
  await o.stop;
  process.off('SIGHUP', o.onHup);
  watcher?.close();
  if (watchOn) unwatchFile(file);
  if (debounce) clearTimeout(debounce);
  await shutdown();
  return 0;
}
