// The `serve --workers` replica-sync mesh over real Unix sockets: turns arrive whole and in order,
// a peer that comes back is reached again, a slow reader is cut off, and bad bytes drop only their
// connection.
import { existsSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openSyncDir, SyncMesh } from '../../src/processes/mesh.js';
import { waitFor } from '../helpers/procs.js';

interface Got {
  subject: string;
  messages: string[];
}

let dir = '';
const opened: Array<{ close(): unknown }> = [];

const open = async (name: string, log: string[] = []): Promise<{ mesh: SyncMesh; got: Got[]; log: string[] }> => {
  const got: Got[] = [];
  const mesh = await SyncMesh.listen({
    path: join(dir, name),
    deliver: (subject, messages) =>
      got.push({ subject, messages: messages.map((m) => Buffer.from(m).toString('hex')) }),
    log: (l) => log.push(l),
  });
  opened.push(mesh);
  return { mesh, got, log };
};

const bytes = (n: number, seed: number) => Buffer.from(Array.from({ length: n }, (_, i) => (i * 31 + seed) & 0xff));

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'kvr-mesh-'));
});
afterEach(async () => {
  for (const o of opened.splice(0)) await o.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('SyncMesh', () => {
  it('delivers every turn whole and in order, to each other peer and not to the sender', async () => {
    const a = await open('a.sock');
    const b = await open('b.sock');
    const c = await open('c.sock');
    const all = [a.mesh.path, b.mesh.path, c.mesh.path];
    for (const m of [a, b, c]) m.mesh.setPeers(all);
    const sent: Got[] = [];
    for (let t = 0; t < 300; t++) {
      // Sizes around the short/long frame boundary (255) and up to several socket reads.
      const messages = Array.from({ length: 1 + (t % 5) }, (_, k) =>
        bytes([0, 1, 255, 256, 70_000][(t + k) % 5], t + k),
      );
      const subject = t % 2 ? 'kvrouter.sync.a' : 'kvrouter.sync.b';
      a.mesh.send(subject, messages);
      sent.push({ subject, messages: messages.map((m) => m.toString('hex')) });
    }
    for (const peer of [b, c]) await waitFor('all turns', () => peer.got.length === sent.length, 30_000, 10);
    expect(b.got).toEqual(sent);
    expect(c.got).toEqual(sent);
    expect(a.got).toEqual([]);
  });

  it('reaches a peer again after it went away and came back on the same path', async () => {
    const a = await open('a.sock');
    let b = await open('b.sock');
    const paths = [a.mesh.path, b.mesh.path];
    a.mesh.setPeers(paths);
    a.mesh.send('s', [bytes(3, 1)]);
    await waitFor('first turn', () => b.got.length === 1, 30_000, 10);
    await b.mesh.close();
    b = await open('b.sock');
    // Turns sent while it was gone are lost (the receiver's sequence check asks for a resend); a
    // later one arrives once the mesh has reconnected.
    await waitFor(
      'a turn after the restart',
      () => {
        a.mesh.send('s', [bytes(3, 2)]);
        return b.got.length > 0;
      },
      30_000,
      50,
    );
    expect(b.got[0]).toEqual({ subject: 's', messages: [bytes(3, 2).toString('hex')] });
  });

  it('lets go of a peer the primary no longer names', async () => {
    const a = await open('a.sock');
    let closed = 0;
    let accepted = 0;
    const server = net.createServer((s) => {
      accepted++;
      s.on('close', () => closed++);
      s.resume();
    });
    const path = join(dir, 'raw.sock');
    await new Promise<void>((r) => server.listen(path, r));
    opened.push({ close: () => new Promise<void>((r) => server.close(() => r())) });
    a.mesh.setPeers([a.mesh.path, path]);
    await waitFor('connected', () => accepted === 1, 30_000, 10);
    a.mesh.setPeers([a.mesh.path]);
    await waitFor('closed', () => closed === 1, 30_000, 10);
    // Nor does it come back: a reconnect would follow within 200 ms.
    await new Promise((r) => setTimeout(r, 600));
    expect(accepted).toBe(1);
  });

  it('cuts off a peer that does not read, and connects again', async () => {
    const log: string[] = [];
    const a = await SyncMesh.listen({
      path: join(dir, 'a.sock'),
      deliver: () => undefined,
      log: (l) => log.push(l),
      maxBufferedBytes: 64 * 1024,
    });
    opened.push(a);
    const sockets: net.Socket[] = [];
    const server = net.createServer((s) => {
      sockets.push(s);
      s.pause(); // never reads
    });
    const path = join(dir, 'slow.sock');
    await new Promise<void>((r) => server.listen(path, r));
    opened.push({
      close: () => {
        for (const s of sockets) s.destroy();
        return new Promise<void>((r) => server.close(() => r()));
      },
    });
    a.setPeers([a.path, path]);
    await waitFor(
      'cut off and reconnected',
      () => {
        a.send('s', [bytes(256 * 1024, 0)]);
        return sockets.length >= 2;
      },
      30_000,
      20,
    );
    expect(log.some((l) => /reads too slowly \(\d+ bytes queued\); reconnecting/.test(l))).toBe(true);
  });

  it('drops a connection that sends bad bytes and keeps serving the others', async () => {
    const log: string[] = [];
    const b = await open('b.sock', log);
    const raw = net.createConnection(b.mesh.path);
    raw.on('error', () => undefined);
    const closed = new Promise<void>((r) => raw.on('close', () => r()));
    raw.write(Buffer.from([0xf0, 1, 2, 3]));
    await closed;
    expect(log.some((l) => /reserved frame flag bits set.*connection dropped/.test(l))).toBe(true);
    const a = await open('a.sock');
    a.mesh.setPeers([a.mesh.path, b.mesh.path]);
    a.mesh.send('s', [bytes(5, 9)]);
    await waitFor('a good turn', () => b.got.length === 1, 30_000, 10);
    expect(b.got).toEqual([{ subject: 's', messages: [bytes(5, 9).toString('hex')] }]);
  });

  it('refuses a path longer than a Unix socket takes, which Node 20 would cut silently', async () => {
    const path = join(dir, `${'y'.repeat(120)}.sock`);
    await expect(SyncMesh.listen({ path, deliver: () => undefined })).rejects.toThrow(
      /socket path of \d+ bytes exceeds 10[37]/,
    );
  });

  it('refuses to listen where it cannot (the caller falls back to the relay)', async () => {
    await expect(
      SyncMesh.listen({ path: join(dir, 'no-such-dir', 'x.sock'), deliver: () => undefined }),
    ).rejects.toThrow(/ENOENT|EACCES/);
  });

  it('openSyncDir makes a 0700 directory and removes it; where it cannot, says so and gives none', async () => {
    const saved = process.env.TMPDIR;
    const log: string[] = [];
    try {
      process.env.TMPDIR = dir;
      const made = await openSyncDir((l) => log.push(l));
      expect(made!.path.startsWith(join(dir, `kvrouter-sync-${process.pid}-`))).toBe(true);
      expect(statSync(made!.path).mode & 0o777).toBe(0o700);
      made!.remove();
      expect(existsSync(made!.path)).toBe(false);
      process.env.TMPDIR = join(dir, 'no-such-dir');
      expect(await openSyncDir((l) => log.push(l))).toBeNull();
      expect(log).toEqual([
        expect.stringMatching(/^no directory for the replica sync sockets \(ENOENT.*\); the primary relays$/),
      ]);
    } finally {
      if (saved === undefined) delete process.env.TMPDIR;
      else process.env.TMPDIR = saved;
    }
  });
});
