// Replica sync between the processes of `serve --workers N`, process to process: each listens on a
// Unix socket in the primary's private directory and connects to every other's. Before this, the
// primary relayed every turn's messages (one deserialize and one serialize per receiver in a third
// process: about 55-60 µs of CPU per request with two processes; docs/profile.md, round seven).
// The bytes are ZMTP 3.0 frames without the handshake (one multipart message per turn and subject:
// the subject, then each message), read with the subscriber's own FrameReader. The sockets live in
// a directory the primary makes (`openSyncDir`).
import { lstatSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FrameReader, multipartMessage } from '../events/zmtp/codec.js';

export interface SyncMeshOptions {
  /** Where this process listens (a path in a directory only this user can enter). */
  path: string;
  /** One turn's messages on a subject from another process, in order (views into the read). */
  deliver: (subject: string, messages: Buffer[]) => void;
  log?: (line: string) => void;
  /** A peer that lets this much pile up unread is cut off (it sees a gap and asks for a resend). */
  maxBufferedBytes?: number;
}

/** Largest turn accepted from a peer: a whole re-announce of a busy process fits many times over. */
const MAX_TURN_BYTES = 256 * 1024 * 1024;
const RECONNECT_MS = 200;
/** sockaddr_un's sun_path less its terminating NUL: 108 bytes on Linux, 104 on macOS. */
const MAX_PATH_BYTES = process.platform === 'linux' ? 107 : 103;

export class SyncMesh {
  /** Peer path -> the connection this process writes to (connecting or open). */
  private readonly out = new Map<string, net.Socket>();
  private readonly inbound = new Set<net.Socket>();
  private wanted = new Set<string>();
  private closed = false;
  private readonly maxBuffered: number;

  private constructor(
    private readonly server: net.Server,
    private readonly opts: SyncMeshOptions,
  ) {
    this.maxBuffered = opts.maxBufferedBytes ?? 64 * 1024 * 1024;
    server.on('connection', (sock) => this.accept(sock));
  }

  /** Listens on `opts.path`; rejects (and the caller keeps the primary's relay) if it cannot. */
  static listen(opts: SyncMeshOptions): Promise<SyncMesh> {
    // Node 20's libuv silently cuts a longer path (at bind and at connect alike): the socket would
    // land outside its private directory, or on another process's.
    const bytes = Buffer.byteLength(opts.path);
    if (bytes > MAX_PATH_BYTES)
      return Promise.reject(
        new Error(`socket path of ${bytes} bytes exceeds ${MAX_PATH_BYTES} (a shorter TMPDIR fixes it)`),
      );
    const server = net.createServer();
    return new Promise((resolve, reject) => {
      server.once('error', reject);
      server.listen(opts.path, () => {
        server.off('error', reject);
        // A failing accept must not stop the process; the peer reconnects.
        server.on('error', (err) => opts.log?.(`replica sync socket: ${err.message}`));
        resolve(new SyncMesh(server, opts));
      });
    });
  }

  get path(): string {
    return this.opts.path;
  }

  /** The other processes now: connect to the new ones, let go of those gone. */
  setPeers(paths: readonly string[]): void {
    this.wanted = new Set(paths.filter((p) => p !== this.opts.path));
    for (const [path, sock] of this.out) {
      if (!this.wanted.has(path)) {
        this.out.delete(path);
        sock.destroy();
      }
    }
    for (const path of this.wanted) if (!this.out.has(path)) this.connect(path);
  }

  /** One write per peer: the subject, then the messages. A connection still opening queues it. */
  send(subject: string, messages: readonly Uint8Array[]): void {
    if (this.out.size === 0) return;
    const parts: Uint8Array[] = [Buffer.from(subject, 'latin1')];
    for (const m of messages) parts.push(m);
    const bytes = multipartMessage(parts);
    for (const [path, sock] of this.out) {
      if (sock.writableLength > this.maxBuffered) {
        this.opts.log?.(
          `replica sync: the process at ${path} reads too slowly (${sock.writableLength} bytes queued); reconnecting`,
        );
        sock.destroy();
        continue;
      }
      sock.write(bytes);
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const sock of this.out.values()) sock.destroy();
    this.out.clear();
    for (const sock of this.inbound) sock.destroy();
    await new Promise<void>((r) => this.server.close(() => r()));
  }

  private connect(path: string): void {
    const sock = net.createConnection(path);
    this.out.set(path, sock);
    sock.on('error', () => undefined); // 'close' follows
    sock.on('data', () => undefined); // peers never write back
    sock.on('close', () => {
      if (this.out.get(path) !== sock) return;
      this.out.delete(path);
      // Still a peer (it may be starting, or it cut a slow writer off): try again shortly.
      if (this.closed || !this.wanted.has(path)) return;
      setTimeout(() => {
        if (!this.closed && this.wanted.has(path) && !this.out.has(path)) this.connect(path);
      }, RECONNECT_MS).unref();
    });
  }

  private accept(sock: net.Socket): void {
    this.inbound.add(sock);
    const reader = new FrameReader(
      {
        message: (frames) => this.opts.deliver(frames[0].toString('latin1'), frames.slice(1)),
        command: () => {
          reader.stop();
          sock.destroy();
        },
        error: (reason) => {
          this.opts.log?.(`replica sync: a process sent ${reason}; connection dropped`);
          sock.destroy();
        },
      },
      MAX_TURN_BYTES,
    );
    sock.on('data', (chunk: Buffer) => reader.push(chunk));
    sock.on('error', () => undefined);
    sock.on('close', () => {
      reader.stop();
      this.inbound.delete(sock);
    });
  }
}

/** The sockets' directory is `<tmpdir>/kvrouter-sync-<primary pid>-XXXXXX`. */
const SYNC_DIR_PREFIX = 'kvrouter-sync-';

/** A directory this young may be a primary's that is still starting (its sockets not yet listening). */
const ORPHAN_MIN_AGE_MS = 60_000;

/** Whether something listens on this Unix socket (a live router process). */
const listening = (path: string): Promise<boolean> =>
  new Promise((resolve) => {
    const sock = net.createConnection(path);
    const done = (yes: boolean) => {
      clearTimeout(timer);
      sock.destroy();
      resolve(yes);
    };
    const timer = setTimeout(() => done(true), 1000); // slow to answer: alive, keep it
    sock.once('connect', () => done(true));
    sock.once('error', () => done(false));
  });

/**
 * Directories left by primaries killed with SIGKILL (no exit handler ran). Only a directory that is
 * this user's own and 0700 (nobody else can have written in it, so its removal cannot be raced), at
 * least a minute old, and where no socket accepts a connection, is removed. Not by pid: a primary
 * in another PID namespace sharing this TMPDIR looks dead from here, and in a container every
 * primary is pid 1.
 */
async function removeOrphanSyncDirs(dir: string): Promise<void> {
  let names: string[];
  try {
    names = readdirSync(dir).filter((n) => n.startsWith(SYNC_DIR_PREFIX));
  } catch {
    return;
  }
  const uid = process.getuid?.();
  for (const name of names) {
    const path = join(dir, name);
    try {
      const st = lstatSync(path);
      if (
        !st.isDirectory() ||
        st.uid !== uid ||
        (st.mode & 0o777) !== 0o700 ||
        Date.now() - st.mtimeMs < ORPHAN_MIN_AGE_MS
      )
        continue;
      const sockets = readdirSync(path).filter((f) => f.endsWith('.sock'));
      if ((await Promise.all(sockets.map((f) => listening(join(path, f))))).some(Boolean)) continue;
      rmSync(path, { recursive: true, force: true });
    } catch {
      // gone meanwhile, or unreadable: left as it is
    }
  }
}

/**
 * The primary's directory for the processes' sockets, `<tmpdir>/kvrouter-sync-<pid>-XXXXXX` (mode
 * 0700: only this user reaches the sockets), after removing what killed primaries left. Removed by
 * `remove()` and, failing that, when this process exits (not on SIGKILL). Null, said in one line,
 * when it cannot be made: every process then syncs through the primary.
 */
export async function openSyncDir(log: (line: string) => void): Promise<{ path: string; remove(): void } | null> {
  await removeOrphanSyncDirs(tmpdir());
  let path: string;
  try {
    path = mkdtempSync(join(tmpdir(), `${SYNC_DIR_PREFIX}${process.pid}-`));
  } catch (err) {
    log(`no directory for the replica sync sockets (${(err as Error).message}); the primary relays`);
    return null;
  }
  const remove = () => rmSync(path, { recursive: true, force: true });
  // Also when the primary ends without its close (a second Ctrl-C, an uncaught error).
  process.once('exit', remove);
  return {
    path,
    remove() {
      remove();
      process.off('exit', remove);
    },
  };
}
