// nginx as the reference proxy: a round-robin reverse proxy on loopback, configured and run by the
// benchmark as a child (`nginx -p <tmp> -c <conf>`, `daemon off`), one worker like the one-process router.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect, createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Child, processTreeCpuSeconds, spawnChild } from '../procs/children.js';

export function findNginx(): string | null {
  for (const p of ['/usr/sbin/nginx', '/usr/local/sbin/nginx', '/usr/local/nginx/sbin/nginx', '/usr/bin/nginx']) if (existsSync(p)) return p;
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

export function nginxConf(dir: string, port: number, upstreams: string[], workers = 1): string {
  const servers = upstreams.map((u) => `    server ${new URL(u).host};`).join('\n');
  return `# written by kvrouter bench overhead
worker_processes ${workers};
daemon off;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
${process.getuid?.() === 0 ? 'user root;' : ''}
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  client_max_body_size 32m;
  client_body_buffer_size 1m;
  keepalive_requests 1000000;
  upstream engines {
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

export interface NginxProc {
  url: string;
  child: Child;
  /** CPU seconds of the master and its workers. */
  cpuSeconds(): number | null;
  stop(): Promise<void>;
}

async function waitListening(port: number, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
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
  const dir = mkdtempSync(join(tmpdir(), 'kvrouter-nginx-'));
  for (const d of ['body', 'proxy', 'fastcgi', 'uwsgi', 'scgi']) mkdirSync(join(dir, d));
  const port = await freePort();
  const conf = join(dir, 'nginx.conf');
  writeFileSync(conf, nginxConf(dir, port, upstreams, workers));
  const child = await spawnChild(bin, ['-p', dir, '-c', conf], null);
  await waitListening(port, 10_000);
  return {
    url: `http://127.0.0.1:${port}`,
    child,
    cpuSeconds: () => processTreeCpuSeconds(child.pid),
    async stop() {
      await child.stop(3000);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
