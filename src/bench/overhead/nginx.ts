// nginx as the reference proxy: a round-robin reverse proxy on loopback, configured and run by the
// benchmark as a child (`nginx -p <tmp> -c <conf>`, `daemon off`), one worker like the one-process router.
import { execFileSync } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect, createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Child, processTreeCpuSeconds, spawnChild } from '../procs/children.js';

export function findNginx(): string | null {
  for (const p of ['/usr/sbin/nginx', '/usr/local/sbin/nginx', '/usr/local/nginx/sbin/nginx', '/usr/bin/nginx'])
    if (existsSync(p)) return p;
  try {
    return execFileSync('sh', ['-c', 'command -v nginx'], { encoding: 'utf8' }).trim() || null;
  } catch {
    return null;
  }
}

export async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as AddressInfo).port;
  await new Promise((r) => s.close(r));
  return port;
}

const TEMP_DIRS = ['body', 'proxy', 'fastcgi', 'uwsgi', 'scgi'];

/** Everything of a benchmark nginx.conf up to its `http` block's own directives: files in `dir` only. */
function confHead(dir: string, workers: number, what: string): string {
  return `# written by kvrouter bench overhead (${what})
worker_processes ${workers};
daemon off;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
${process.getuid?.() === 0 ? 'user root;' : ''}
events { worker_connections 4096; }
http {
  access_log off;
${TEMP_DIRS.map((d) => `  ${d === 'body' ? 'client_body' : d}_temp_path ${dir}/${d};`).join('\n')}
  client_max_body_size 32m;
  client_body_buffer_size 1m;
  keepalive_requests 1000000;
`;
}

export function nginxConf(dir: string, port: number, upstreams: string[], workers = 1): string {
  const servers = upstreams.map((u) => `    server ${new URL(u).host};`).join('\n');
  return `${confHead(dir, workers, 'the proxy')}  upstream engines {
${servers}
    keepalive 512;
  }
  server {
    listen 127.0.0.1:${port} backlog=4096;
    location / {
      proxy_pass http://engines;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
`;
}

/** A string for an nginx `return`: double-quoted, with `"`, `\\` and newlines escaped (no `$` may occur: it would name a variable). */
function nginxString(text: string): string {
  if (text.includes('$')) throw new Error('an nginx return string cannot hold $');
  return `"${text.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n')}"`;
}

/** The one-token streamed answers of stub-upstream.ts (usage included), fixed: what `--upstream nginx` returns. */
export function stubAnswers(model: string): { completions: string; chat: string } {
  const head = { id: 'cmpl-1', created: 1_700_000_000, model };
  const sse = (object: string, choice: object) =>
    `data: ${JSON.stringify({ ...head, object, choices: [choice] })}\n\ndata: ${JSON.stringify({ ...head, object, choices: [], usage: { prompt_tokens: 0, completion_tokens: 1, total_tokens: 1 } })}\n\ndata: [DONE]\n\n`;
  return {
    completions: sse('text_completion', { index: 0, text: ' hello', finish_reason: 'length' }),
    chat: sse('chat.completion.chunk', {
      index: 0,
      delta: { role: 'assistant', content: ' hello' },
      finish_reason: 'length',
    }),
  };
}

/**
 * nginx as the stub upstreams (`--upstream nginx`): every completion answered at once with one
 * streamed token, as stub-upstream.ts does for max_tokens 1, for a fraction of a Node server's CPU.
 */
export function nginxStubConf(dir: string, ports: readonly number[], model: string): string {
  const a = stubAnswers(model);
  return `${confHead(dir, 1, '--upstream nginx')}  keepalive_timeout 60s;
  server {
${ports.map((p) => `    listen 127.0.0.1:${p} backlog=4096;`).join('\n')}
    location = /v1/completions { default_type text/event-stream; return 200 ${nginxString(a.completions)}; }
    location = /v1/chat/completions { default_type text/event-stream; return 200 ${nginxString(a.chat)}; }
    location = /v1/models { default_type application/json; return 200 '{"object":"list","data":[]}'; }
    location / { default_type application/json; return 200 '{"status":"ok"}'; }
  }
}
`;
}

/** nginx on `conf(dir, ports)` in a fresh temporary directory, listening on `count` free ports; all of it removed on stop or on a failed start. */
async function runNginx(
  bin: string,
  prefix: string,
  count: number,
  conf: (dir: string, ports: number[]) => string,
): Promise<{ child: Child; ports: number[]; stop(): Promise<void> }> {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  let child: Child | null = null;
  const stop = async () => {
    await child?.stop(3000);
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    for (const d of TEMP_DIRS) mkdirSync(join(dir, d));
    const ports: number[] = [];
    for (let i = 0; i < count; i++) ports.push(await freePort());
    const file = join(dir, 'nginx.conf');
    writeFileSync(file, conf(dir, ports));
    child = await spawnChild(bin, ['-p', dir, '-c', file], null);
    for (const p of ports) await waitListening(p, 10_000, child);
    return { child, ports, stop };
  } catch (err) {
    // nginx says why in its error log (and on stderr before it has opened it): keep that, not just
    // the timeout. Its stderr is whole once the process has closed its pipes.
    await child?.stop(3000);
    const proc = child?.proc;
    if (proc?.stderr && !proc.stderr.destroyed)
      await Promise.race([once(proc, 'close'), new Promise((r) => setTimeout(r, 1000))]);
    const why = [
      child?.stderr().trim(),
      existsSync(join(dir, 'error.log')) ? readFileSync(join(dir, 'error.log'), 'utf8').trim() : '',
    ]
      .filter(Boolean)
      .join('\n')
      .slice(-600);
    await stop();
    throw why ? new Error(`${(err as Error).message}: ${why}`) : err;
  }
}

/** The stub upstreams served by one nginx worker on `count` ports (Upstreams of targets.ts). */
export async function startNginxStubs(
  bin: string,
  count: number,
  model: string,
): Promise<{ child: Child; urls: string[]; stop(): Promise<void> }> {
  const n = await runNginx(bin, 'kvrouter-nginx-stubs-', count, (dir, ports) => nginxStubConf(dir, ports, model));
  return { child: n.child, urls: n.ports.map((p) => `http://127.0.0.1:${p}`), stop: n.stop };
}

export interface NginxProc {
  url: string;
  child: Child;
  /** CPU seconds of the master and its workers. */
  cpuSeconds(): number | null;
  stop(): Promise<void>;
}

/** Until `port` accepts a connection; throws at the deadline, or at once when `child` has exited. */
async function waitListening(port: number, timeoutMs: number, child: Child): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (child.proc.exitCode !== null || child.proc.signalCode !== null)
      throw new Error(`nginx exited (${child.proc.exitCode ?? child.proc.signalCode}) before listening on ${port}`);
    const ok = await new Promise<boolean>((r) => {
      const s = connect(port, '127.0.0.1', () => {
        s.destroy();
        r(true);
      });
      s.on('error', () => r(false));
    });
    if (ok) return;
    if (Date.now() > deadline) throw new Error(`nginx did not listen on ${port}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

export async function startNginx(bin: string, upstreams: string[], workers = 1): Promise<NginxProc> {
  const n = await runNginx(bin, 'kvrouter-nginx-', 1, (dir, [port]) => nginxConf(dir, port, upstreams, workers));
  return {
    url: `http://127.0.0.1:${n.ports[0]}`,
    child: n.child,
    cpuSeconds: () => processTreeCpuSeconds(n.child.pid),
    stop: n.stop,
  };
}
