// The primary of `serve --workers N`: runs the simulated engines, forks N router processes onto
// one port (node:cluster hands connections out round-robin), names their replica-sync sockets to
// each other (relaying the sync itself only for a process without one), relays replayed state
// changes and metrics between them, counts tenants' concurrency slots for all, passes reloads on,
// drains them all at shutdown and replaces a process that dies. It serves no request itself.
import cluster, { type Worker } from 'node:cluster';
import type { RouterConfig } from '../config/schema.js';
import { type EngineRef, engineRef, startEmbeddedEngines } from '../router/engines.js';
import type { EngineHandle } from '../engine-sim/index.js';
import type { ReplayAnswer, ReplayedRequest } from '../router/app.js';
import type { IndexSnapshot } from '../indexer/snapshot.js';
import type { DashboardPart } from '../dashboard/whole-router.js';
import {
  isToPrimary,
  PROCESS_INDEX_ENV,
  stallWatch,
  SYNC_DIR_ENV,
  type MetricsJson,
  type ToPrimary,
  type ToWorker,
} from './messages.js';
import { aggregateMetrics } from './metrics.js';
import { openSyncDir } from './mesh.js';
import { type Handoffs, trackHandoffs } from './handoff.js';
import { TenantSlots } from '../auth/tenant-slots.js';

export interface PrimaryHandle {
  readonly url: string;
  /** Every router process re-reads the config (as SIGHUP does to one router). */
  reload(): void;
  /** Every process drains (up to the grace period) and exits; then the engines stop. */
  close(): Promise<void>;
}

export interface PrimaryOptions {
  count: number;
  log: (line: string) => void;
  /** How long a process answering /metrics (or a booking call) waits for the others. */
  replyTimeoutMs?: number;
}

/** Process slot i: its current worker and whether it has served. */
interface Slot {
  index: number;
  worker: Worker;
  ready: boolean;
  startedAt: number;
  /** Quick deaths in a row (each waits longer before the next start). */
  crashes: number;
  /** The sync wire versions it reads (its hello's `wire`; 1: JSON only). */
  wire?: number;
  /** Its replica-sync socket: undefined until its hello, null if it has none. */
  syncPath?: string | null;
  /** The primary's ticks since its event loop last spoke (any message; `alive` when idle). */
  silentTicks: number;
}

/** How long a replacement waits for another process's index before it starts empty. */
const SNAPSHOT_TIMEOUT_MS = 30_000;

/** After its grace, what a draining process may take to close (tokenizers, sockets) before it is killed. */
const CLOSE_MARGIN_MS = 10_000;

/** State changes kept for a replacement process (the oldest go first). */
const MAX_KEPT_REPLAYS = 1000;

const send = (w: Worker, m: ToWorker): void => {
  if (w.isConnected()) w.send(m);
};

/** A question to several processes, answered by id (`startRound`). */
interface Round {
  want: Set<number>;
  take: (reply: unknown) => void;
  end: () => void;
}

/** Resolves once every process serves; rejects with the first start-up failure (all stopped). */
export async function startPrimary(cfg: RouterConfig, opts: PrimaryOptions): Promise<PrimaryHandle> {
  const engines: EngineHandle[] = await startEmbeddedEngines(cfg, opts.log);
  cluster.setupPrimary({ serialization: 'advanced' });
  // The processes' replica-sync sockets live here (none: every process's sync goes through the primary).
  const syncDir = await openSyncDir(opts.log);
  return new Primary(cfg, opts, engines, syncDir).start();
}

/**
 * The supervisor of the router processes: their slots, the rounds of questions between them, the
 * replayed state changes a replacement catches up on, and the tenants' concurrency slots.
 */
class Primary {
  private readonly refs: EngineRef[];
  private readonly graceMs: number;
  private readonly watch: ReturnType<typeof stallWatch>;
  private readonly slots: Slot[] = [];
  private closing = false;
  /** Whether every process served once (a process dying before that fails the start). */
  private started = false;
  /** The replayed state changes a replacement catches up on (not `/events`). */
  private readonly applied: ReplayedRequest[] = [];
  private roundSeq = 0;
  private readonly rounds = new Map<number, Round>();
  /** Draining processes' kill timers: one that does not finish within its grace (and a margin to close) is killed. */
  private readonly killTimers = new Map<Slot, NodeJS.Timeout>();
  private settleStart!: (err: Error | null) => void;
  private readonly allReady = new Promise<Error | null>((r) => (this.settleStart = r));
  private url = '';
  // Tenants' concurrency slots, counted here for every process: reports between the processes
  // lag by a turn, so simultaneous arrivals at two processes could pass a cap both.
  private readonly tenantSlots = new TenantSlots();
  private watchdog: NodeJS.Timeout | null = null;

  constructor(
    private readonly cfg: RouterConfig,
    private readonly opts: PrimaryOptions,
    private readonly engines: EngineHandle[],
    private readonly syncDir: { path: string; remove(): void } | null,
  ) {
    this.refs = engines.map(engineRef);
    this.graceMs = cfg.server.shutdown_grace_ms;
    this.watch = stallWatch(cfg.server.stall_timeout_ms);
  }

  /** Forks the processes and waits until every one serves (or one fails: all stop). */
  async start(): Promise<PrimaryHandle> {
    for (let i = 0; i < this.opts.count; i++)
      this.slots.push(this.fork({ index: i, ready: false, startedAt: 0, crashes: 0, silentTicks: 0 }));
    this.startWatchdog();
    const failure = await this.allReady;
    if (failure) {
      await this.stopAll();
      throw failure;
    }
    this.started = true;
    const primary = this;
    return {
      get url() {
        return primary.url;
      },
      reload() {
        for (const s of primary.slots) send(s.worker, { t: 'reload' });
      },
      close: () => this.stopAll(),
    };
  }

  /** Every process that said hello learns the others' sockets (or that the primary relays). */
  private announcePeers(): void {
    const known = this.slots.filter((s) => s.syncPath !== undefined && s.worker.isConnected());
    const paths = known.every((s) => s.syncPath) ? known.map((s) => s.syncPath!) : null;
    // Binary only when every process reads it: a replacement forked from older code on disk keeps all on JSON.
    const binary = known.every((s) => (s.wire ?? 1) >= 2);
    for (const s of known) send(s.worker, { t: 'peers', paths, binary });
  }

  private live(): Slot[] {
    return this.slots.filter((s) => s.ready && s.worker.isConnected());
  }

  private killAfter(s: Slot, graceMs: number): void {
    clearTimeout(this.killTimers.get(s));
    const worker = s.worker;
    this.killTimers.set(
      s,
      setTimeout(() => {
        if (worker.isDead()) return;
        this.opts.log(
          `router process ${s.index} did not finish within its grace (${graceMs} ms) and ${CLOSE_MARGIN_MS / 1000} s to close; killing it`,
        );
        worker.process.kill('SIGKILL');
      }, graceMs + CLOSE_MARGIN_MS),
    );
  }

  /**
   * One question to several processes: `take` sees each reply (true ends the round early); `finish`
   * runs once, when every target answered or died, at `take`'s word, or at the timeout.
   */
  private startRound(
    targets: Slot[],
    question: (id: number) => ToWorker,
    take: (reply: unknown) => boolean,
    finish: () => void,
    timeoutMs = this.opts.replyTimeoutMs ?? 2000,
  ): void {
    const id = this.roundSeq++;
    const end = () => {
      if (!this.rounds.delete(id)) return;
      clearTimeout(timer);
      finish();
    };
    const timer = setTimeout(end, timeoutMs);
    this.rounds.set(id, {
      want: new Set(targets.map((s) => s.worker.id)),
      take: (reply) => void (take(reply) && end()),
      end,
    });
    for (const s of targets) send(s.worker, question(id));
    if (targets.length === 0) end();
  }

  private replied(slot: Slot, id: number, reply: unknown): void {
    const r = this.rounds.get(id);
    if (!r || !r.want.delete(slot.worker.id)) return;
    r.take(reply);
    if (r.want.size === 0) r.end();
  }

  /** The whole router's metrics for the process that asked (those that do not answer in time are left out). */
  private gatherMetrics(asker: Worker, askId: number): void {
    const got: MetricsJson[] = [];
    this.startRound(
      this.live(),
      (id) => ({ t: 'metrics-req', id }),
      (json) => {
        got.push(json as MetricsJson);
        return false;
      },
      () => void aggregateMetrics(got).then((text) => send(asker, { t: 'metrics-text', id: askId, text })),
    );
  }

  /** A booking call the asking process could not answer: the first other process that can does. */
  private askOthers(asker: Slot, askId: number, req: ReplayedRequest): void {
    // The asker's process now: if it dies meanwhile, its replacement (same slot) must not get the answer.
    const askerWorker = asker.worker;
    let answer: ReplayAnswer | null = null;
    this.startRound(
      this.live().filter((s) => s !== asker),
      (id) => ({ t: 'ask', id, req }),
      (a) => {
        if ((a as ReplayAnswer).status >= 300) return false;
        answer = a as ReplayAnswer;
        return true;
      },
      () => send(askerWorker, { t: 'answer', id: askId, answer }),
    );
  }

  /** A replacement's index: a copy of the first other process's that answers (a whole index may take a while to copy). */
  private copyIndex(asker: Slot, askId: number): void {
    // The asker's process now: if it dies meanwhile, its replacement (same slot) must not get the answer.
    const askerWorker = asker.worker;
    let snap: IndexSnapshot | null = null;
    this.startRound(
      this.live().filter((s) => s !== asker),
      (id) => ({ t: 'snapshot-req', id }),
      (reply) => {
        if (reply === null) return false;
        snap = reply as IndexSnapshot;
        return true;
      },
      () => send(askerWorker, { t: 'snapshot', id: askId, snap }),
      SNAPSHOT_TIMEOUT_MS,
    );
  }

  /** The other processes' dashboard parts for the process that asked (those that do not answer in time are left out). */
  private gatherDashboard(asker: Slot, askId: number, cursors: Record<string, number>): void {
    // The asker's process now: if it dies meanwhile, its replacement (same slot) must not get the answer.
    const askerWorker = asker.worker;
    const parts: DashboardPart[] = [];
    this.startRound(
      this.live().filter((s) => s !== asker),
      (id) => ({ t: 'dashboard-req', id, cursors }),
      (part) => {
        if (part !== null) parts.push(part as DashboardPart);
        return false;
      },
      () => send(askerWorker, { t: 'dashboard', id: askId, parts }),
    );
  }

  /** A process's hello: its start, the others' sockets, and the state changes it missed. */
  private greet(slot: Slot, m: Extract<ToPrimary, { t: 'hello' }>): void {
    send(slot.worker, {
      t: 'start',
      index: slot.index,
      engines: this.refs,
      recover: this.started,
      aliveMs: this.watch?.everyMs ?? 0,
    });
    slot.syncPath = m.sync ?? null;
    slot.wire = m.wire ?? 1;
    this.announcePeers();
    // A replacement catches up on the registrations, peers and reloads the others applied.
    for (const req of this.applied) send(slot.worker, { t: 'replay', req });
  }

  /** A state change one process applied: kept for replacements (not `/events`) and passed to the others. */
  private relayReplay(slot: Slot, m: Extract<ToPrimary, { t: 'replay' }>): void {
    // Index writes (/events) are not kept: the engines' events rebuild a replacement's index.
    if (m.req.path.split('?')[0] !== '/events') this.applied.push(m.req);
    if (this.applied.length > MAX_KEPT_REPLAYS) this.applied.shift();
    for (const s of this.slots) if (s !== slot) send(s.worker, m);
  }

  private onMessage(slot: Slot, m: ToPrimary): void {
    slot.silentTicks = 0;
    switch (m.t) {
      case 'alive':
        return;
      case 'hello':
        return this.greet(slot, m);
      case 'ready':
        slot.ready = true;
        this.url = m.url;
        if (this.slots.every((s) => s.ready)) this.settleStart(null);
        return;
      case 'failed':
        return this.settleStart(new Error(m.message));
      case 'draining':
        // Its grace now (a reload may have raised or lowered it since start).
        if (this.closing && !slot.worker.isDead() && Number.isFinite(m.graceMs) && m.graceMs >= 0)
          this.killAfter(slot, m.graceMs);
        return;
      case 'replay':
        return this.relayReplay(slot, m);
      case 'sync':
        // From a process without a socket (or one older than the mesh); the others use theirs.
        for (const s of this.slots) if (s !== slot) send(s.worker, m);
        return;
      case 'ask':
        return this.askOthers(slot, m.id, m.req);
      case 'answer':
        return this.replied(slot, m.id, m.answer);
      case 'metrics':
        return this.gatherMetrics(slot.worker, m.id);
      case 'metrics-res':
        return this.replied(slot, m.id, m.json);
      case 'snapshot':
        return this.copyIndex(slot, m.id);
      case 'snapshot-res':
        return this.replied(slot, m.id, m.snap);
      case 'dashboard':
        return this.gatherDashboard(slot, m.id, m.cursors);
      case 'dashboard-res':
        return this.replied(slot, m.id, m.part);
      case 'slot-claim': {
        const c = this.tenantSlots.claim(slot.worker.id, m.id, m.tenant, m.limit);
        return send(slot.worker, { t: 'slot', id: m.id, granted: c.granted, held: c.granted ? 0 : c.held });
      }
      case 'slot-free':
        return this.tenantSlots.free(slot.worker.id, m.id);
    }
  }

  /** A new process in `slot` (a first start or a replacement). */
  private fork(slot: Omit<Slot, 'worker'> & { worker?: Worker }): Slot {
    const syncDir = this.syncDir;
    const worker = cluster.fork({
      [PROCESS_INDEX_ENV]: String(slot.index),
      ...(syncDir ? { [SYNC_DIR_ENV]: syncDir.path } : {}),
    });
    const handoffs = trackHandoffs(worker.process);
    const s = slot as Slot;
    s.worker = worker;
    s.syncPath = undefined;
    s.wire = undefined;
    s.silentTicks = 0;
    s.ready = false;
    s.startedAt = Date.now();
    worker.on('message', (m: unknown) => {
      if (isToPrimary(m)) this.onMessage(s, m);
    });
    // A failed send to a process that is going away: its exit is handled below, this must not stop the primary.
    worker.on('error', (err: Error) => this.opts.log(`router process ${s.index}: ${err.message}`));
    worker.on('exit', (code: number, signal: string | null) => this.onExit(s, worker, handoffs, code, signal));
    return s;
  }

  /** A process ended: what it held is freed, and (after start-up, unless closing) another takes its slot. */
  private onExit(s: Slot, worker: Worker, handoffs: Handoffs, code: number, signal: string | null): void {
    // A connection handed to it that it never took would stay open in the primary, its client waiting.
    const dropped = handoffs.closeUnacknowledged();
    if (dropped > 0)
      this.opts.log(
        `router process ${s.index} died holding ${dropped} connection${dropped > 1 ? 's' : ''} it had not taken; closed`,
      );
    for (const r of [...this.rounds.values()]) if (r.want.delete(worker.id) && r.want.size === 0) r.end();
    // Its requests ended with it: their tenants' slots are free.
    this.tenantSlots.dropHolder(worker.id);
    clearTimeout(this.killTimers.get(s));
    this.killTimers.delete(s);
    if (this.closing) return;
    s.syncPath = undefined;
    this.announcePeers();
    if (!this.started)
      return this.settleStart(
        new Error(`router process ${s.index} exited during start-up (${signal ?? `code ${code}`})`),
      );
    // A process that dies is replaced; one that keeps dying waits longer each time (up to 30 s).
    s.crashes = Date.now() - s.startedAt < 10_000 ? s.crashes + 1 : 0;
    const delay = Math.min(30_000, s.crashes === 0 ? 0 : 500 * 2 ** (s.crashes - 1));
    this.opts.log(
      `router process ${s.index} exited (${signal ?? `code ${code}`}); starting another${delay ? ` in ${delay} ms` : ''}`,
    );
    setTimeout(() => {
      if (!this.closing) this.fork(s);
    }, delay).unref();
  }

  // A process whose loop is blocked (or that is stopped) holds its connections unanswered, and
  // node:cluster hands it one more: it is killed, and the exit handler starts another.
  private startWatchdog(): void {
    const watch = this.watch;
    if (!watch) return;
    this.watchdog = setInterval(() => {
      for (const s of this.slots) {
        if (this.closing || !s.ready || s.worker.isDead() || ++s.silentTicks <= watch.missedTicks) continue;
        this.opts.log(
          `router process ${s.index} has not answered for over ${Math.round(watch.missedTicks * watch.everyMs)} ms (server.stall_timeout_ms ${this.cfg.server.stall_timeout_ms}); replacing it`,
        );
        s.ready = false;
        s.worker.process.kill('SIGKILL');
      }
    }, watch.everyMs);
    this.watchdog.unref();
  }

  private async stopAll(): Promise<void> {
    this.closing = true;
    if (this.watchdog) clearInterval(this.watchdog);
    const exits = this.slots.map((s) =>
      s.worker.isDead() ? Promise.resolve() : new Promise<void>((r) => s.worker.once('exit', () => r())),
    );
    // Until a process answers with the grace it drains with (`draining`), the start-up value holds.
    for (const s of this.slots) this.killAfter(s, this.graceMs);
    for (const s of this.slots) send(s.worker, { t: 'shutdown' });
    await Promise.all(exits);
    for (const t of this.killTimers.values()) clearTimeout(t);
    this.syncDir?.remove();
    await Promise.all(this.engines.map((e) => e.close()));
  }
}
