// A local nats-server process on a free loopback port (tests, benchmarks, demos). Fails loudly
// when the binary is missing: `apt-get install nats-server` (Debian) provides it.
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../common/net.js';

export interface LocalNats {
  url: string;
  port: number;
  /** JetStream store directory (null without JetStream). */
  storeDir: string | null;
  /** SIGKILL the server (state on disk survives). */
  kill(): Promise<void>;
  /** Start it again on the same port and store directory. */
  restart(): Promise<void>;
  /** Kill it and remove its store directory. */
  stop(): Promise<void>;
}

export function natsServerBinary(): string {
  const bin = process.env.NATS_SERVER_BIN ?? 'nats-server';
  const r = spawnSync(bin, ['--version'], { encoding: 'utf8' });
  if (r.error || r.status !== 0) {
    throw new Error(
      `nats-server not found (${bin}): install it (Debian: apt-get install nats-server) or set NATS_SERVER_BIN`,
    );
  }
  return bin;
}

// A server started here never outlives this process, even when its owner forgets to stop it.
const live = new Set<ChildProcess>();
process.once('exit', () => {
  for (const p of live) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
});

function launch(bin: string, port: number, storeDir: string | null): Promise<ChildProcess> {
  const args = ['-a', '127.0.0.1', '-p', String(port), ...(storeDir ? ['-js', '-sd', storeDir] : [])];
  const proc = spawn(bin, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  live.add(proc);
  proc.once('exit', () => live.delete(proc));
  let log = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      proc.kill('SIGKILL');
      reject(new Error(`nats-server did not become ready within 10 s:\n${log}`));
    }, 10_000);
    proc.stderr!.on('data', (d: Buffer) => {
      log += d.toString();
      if (log.includes('Server is ready')) {
        clearTimeout(timer);
        proc.stderr!.removeAllListeners('data');
        proc.stderr!.resume();
        resolve(proc);
      }
    });
    proc.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`nats-server exited with ${code}:\n${log}`));
    });
  });
}

const killed = (p: ChildProcess) =>
  new Promise<void>((resolve) => {
    if (p.exitCode !== null || p.signalCode !== null) return resolve();
    p.once('exit', () => resolve());
    p.kill('SIGKILL');
  });

export async function startLocalNats(opts: { jetstream?: boolean } = {}): Promise<LocalNats> {
  const bin = natsServerBinary();
  const port = await freePort();
  const storeDir = opts.jetstream ? mkdtempSync(join(tmpdir(), 'kvrouter-nats-')) : null;
  let proc = await launch(bin, port, storeDir);
  proc.removeAllListeners('exit');
  return {
    url: `nats://127.0.0.1:${port}`,
    port,
    storeDir,
    kill: () => killed(proc),
    async restart() {
      await killed(proc);
      proc = await launch(bin, port, storeDir);
      proc.removeAllListeners('exit');
    },
    async stop() {
      await killed(proc);
      if (storeDir) rmSync(storeDir, { recursive: true, force: true });
    },
  };
}
