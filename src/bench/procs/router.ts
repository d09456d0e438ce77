// kvrouter itself as a child process (`kvrouter serve --config <tmp yaml>`): its CPU time is then
// its own, apart from the engines and the load generator.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { type Child, spawnCli } from './children.js';

export interface RouterInstance {
  id: string;
  url: string;
  /** ZMQ endpoints; omitted = the router ignores this engine's KV events. */
  kvEvents?: { endpoint: string; replay: string };
  /** Disaggregated serving role (default both). */
  role?: 'prefill' | 'decode';
}

export interface RouterProcOptions {
  model: string;
  blockSize: number;
  tokenizer: string;
  policy: string;
  instances: RouterInstance[];
  /** Extra YAML under `routing:` (two-space indented lines), e.g. medium weights. */
  routingYaml?: string[];
  /** Extra top-level YAML sections. */
  extraYaml?: string[];
  /** Extra lines of the model (four-space indented), e.g. its disaggregation. */
  modelYaml?: string[];
  /** Router processes (`serve --workers`; default 1). */
  processes?: number;
}

export interface RouterProc {
  child: Child;
  url: string;
  stop(): Promise<void>;
}

export function routerYaml(o: RouterProcOptions): string {
  const inst = o.instances.map(
    (i) =>
      `      - { id: ${i.id}, url: "${i.url}"${i.role ? `, role: ${i.role}` : ''}${i.kvEvents ? `, kv_events: { endpoint: "${i.kvEvents.endpoint}", replay_endpoint: "${i.kvEvents.replay}" }` : ''} }`,
  );
  return [
    'server: { host: 127.0.0.1, port: 0, shutdown_grace_ms: 2000 }',
    'routing:',
    `  policy: ${o.policy}`,
    ...(o.routingYaml ?? []),
    ...(o.extraYaml ?? []),
    'models:',
    `  - name: ${o.model}`,
    `    block_size: ${o.blockSize}`,
    `    tokenizer: { package: "${o.tokenizer}" }`,
    ...(o.modelYaml ?? []),
    '    instances:',
    ...inst,
    '',
  ].join('\n');
}

const LISTENING = /^kvrouter listening on (http:\/\/\S+)/;

/** Start the router and wait until it serves and every KV-event listener is active. */
export async function startRouterProc(o: RouterProcOptions): Promise<RouterProc> {
  const dir = mkdtempSync(join(tmpdir(), 'kvrouter-bench-'));
  const file = join(dir, 'router.yaml');
  writeFileSync(file, routerYaml(o));
  // BENCH_ROUTER_NODE_ARGS (e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof") profiles the router
  // process of any benchmark (NODE_OPTIONS refuses --cpu-prof).
  const nodeArgs = (process.env.BENCH_ROUTER_NODE_ARGS ?? '').split(/\s+/).filter(Boolean);
  const child = await spawnCli(
    ['serve', '--config', file, ...(o.processes && o.processes > 1 ? ['--workers', String(o.processes)] : [])],
    LISTENING,
    { timeoutMs: 120_000, nodeArgs },
  );
  const url = LISTENING.exec(child.lines.find((l) => LISTENING.test(l))!)![1];
  const want = o.instances.filter((i) => i.kvEvents).length;
  const deadline = Date.now() + 30_000;
  for (;;) {
    const r = await request(`${url}/ready`);
    const body = (await r.body.json()) as { ready: boolean; listeners: { active: number; pending: number } };
    if (body.ready && body.listeners.active >= want) break;
    if (Date.now() > deadline) throw new Error(`router not ready after 30 s: ${JSON.stringify(body)}`);
    await new Promise((res) => setTimeout(res, 100));
  }
  return {
    child,
    url,
    async stop() {
      await child.stop(1000); // measurements are taken: no need to wait out a graceful drain
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
