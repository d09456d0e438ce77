// One router process of `serve --workers N`: a whole router (own index fed by the engines' KV
// events, own scheduler) on the shared port, kept in step with the others: replica sync straight
// to them (the mesh), the rest through the primary.
import type { LinkStatus, SyncLink } from '../cluster/nats-link.js';
import type { RouterConfig } from '../config/schema.js';
import { dumpIndex, type IndexSnapshot } from '../indexer/snapshot.js';
import type { DashboardPart } from '../dashboard/whole-router.js';
import { dashboardPart } from '../router/dashboard-source.js';
import {
  type ProcessRole,
  type ReplayAnswer,
  type RouterHandle,
  type StartOptions,
  startRouter,
} from '../router/app.js';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import {
  frameBatch,
  isToWorker,
  PROCESS_INDEX_ENV,
  SYNC_DIR_ENV,
  type ToPrimary,
  type ToWorker,
  unframeBatch,
} from './messages.js';
import { SyncMesh } from './mesh.js';
import { processMetrics } from './metrics.js';
import { PrimarySlots } from './slots.js';
import type { EppHandle, EppOptions } from '../epp/server.js';

type Handler = (data: Uint8Array, subject: string) => void;

const send = (m: ToPrimary): boolean => {
  // The channel closes when the primary goes (and then this process exits): nothing to do.
  if (!process.connected) return false;
  process.send!(m);
  return true;
};

/**
 * Replica sync between the processes of one router: straight to the other processes over the
 * mesh once the primary names them (`usePeers`), through the primary until then (or when a process
 * has no socket: its start-up said so, or it is older than the mesh).
 */
export class ProcessLink implements SyncLink {
  private readonly handlers: Array<{ subject: string; handler: Handler }> = [];
  private readonly st: LinkStatus = {
    url: 'ipc://primary',
    connected: true,
    since: Date.now(),
    lastError: null,
    connects: 1,
    disconnects: 0,
  };
  private viaMesh = false;
  /** This process's end of the mesh (null: none, the primary relays). */
  mesh: SyncMesh | null = null;
  /** The primary's word: every process reads the binary wire (until it says so, JSON). */
  binaryWire = false;

  get connected(): boolean {
    return process.connected;
  }

  /** The primary's word on the processes: their socket paths, or null (some process has none: relay), and whether all read the binary wire. */
  usePeers(paths: readonly string[] | null, binary = false): void {
    this.binaryWire = binary;
    this.viaMesh = paths !== null && this.mesh !== null;
    this.mesh?.setPeers(this.viaMesh ? paths! : []);
    this.st.url = this.viaMesh ? `unix://${this.mesh!.path}` : 'ipc://primary';
  }

  publish(subject: string, data: Uint8Array): boolean {
    if (!process.connected) return false;
    // A request books, completes its prefill and frees within a few turns: one write per turn
    // carries all of a turn's messages.
    let batch = this.outbox.get(subject);
    if (!batch) this.outbox.set(subject, (batch = []));
    batch.push(data);
    if (!this.flushing) {
      this.flushing = true;
      setImmediate(this.flush);
    }
    return true;
  }

  private readonly outbox = new Map<string, Uint8Array[]>();
  private flushing = false;
  private readonly flush = () => {
    this.flushing = false;
    for (const [subject, data] of this.outbox) {
      if (this.viaMesh) this.mesh!.send(subject, data);
      else send({ t: 'sync', subject, data: frameBatch(data) });
    }
    this.outbox.clear();
  };

  subscribe(subject: string, handler: Handler): void {
    this.handlers.push({ subject, handler });
  }

  status(): LinkStatus {
    return { ...this.st, connected: process.connected, wire: this.binaryWire ? 'binary' : 'json' };
  }

  /**
   * A turn of another process through the primary: framed (`frameBatch`); an array of messages is
   * what a process from before the framing sends.
   */
  deliver(subject: string, batch: Uint8Array | readonly Uint8Array[]): void {
    let messages: readonly Uint8Array[];
    try {
      // (A replacement forked while the code on disk changed may still send the array.)
      messages = Array.isArray(batch) ? batch : unframeBatch(batch as Uint8Array);
    } catch {
      return; // dropped whole: the receivers see the sequence gap and reset that process's bookings
    }
    this.deliverMessages(subject, messages);
  }

  /** A turn of another process's messages on `subject`, in order (the mesh's and the relay's). */
  deliverMessages(subject: string, messages: readonly Uint8Array[]): void {
    for (const data of messages) for (const h of this.handlers) if (h.subject === subject) h.handler(data, subject);
  }
}

/**
 * This process's end of the mesh, in the directory the primary made (`SYNC_DIR_ENV`); null
 * (the primary relays) when there is none or the socket cannot be made, which is said once.
 */
async function openMesh(
  index: number,
  deliver: (subject: string, messages: Buffer[]) => void,
  log?: (line: string) => void,
): Promise<SyncMesh | null> {
  const dir = process.env[SYNC_DIR_ENV];
  if (!dir) return null;
  const path = join(dir, `${index}-${process.pid}.sock`);
  try {
    // Left by a process that died with this pid (the directory is the primary's own: nothing else is there).
    rmSync(path, { force: true });
    return await SyncMesh.listen({ path, deliver, log });
  } catch (err) {
    log?.(`router process ${index}: no replica sync socket (${(err as Error).message}); the primary relays`);
    return null;
  }
}

export type ProcessServeOptions = Omit<StartOptions, 'process'> & {
  /** The gateway endpoint picker's options (`--epp`), served by every process on shared ports; null: none. */
  epp?: Omit<EppOptions, 'host'> | null;
};

type StartMessage = Extract<ToWorker, { t: 'start' }>;
type ReplayedRequest = Extract<ToWorker, { t: 'replay' }>['req'];
type Answer = string | ReplayAnswer | IndexSnapshot | DashboardPart[] | null;

/** Questions to the primary (whole-router metrics, booking calls), answered by id. */
class PrimaryQuestions {
  private readonly pending = new Map<number, (answer: Answer) => void>();
  private nextId = 0;

  ask<T extends Answer>(question: (id: number) => ToPrimary): Promise<T> {
    return new Promise<T>((resolve) => {
      const id = this.nextId++;
      this.pending.set(id, resolve as (answer: Answer) => void);
      send(question(id));
    });
  }

  answered(id: number, answer: Answer): void {
    this.pending.get(id)?.(answer);
    this.pending.delete(id);
  }

  /** Nobody is left to answer: metrics come back empty, booking calls unanswered. */
  abandon(): void {
    for (const id of [...this.pending.keys()]) this.answered(id, null);
  }
}

/**
 * Serve as router process `index` until the primary says to stop: returns the exit code. The
 * primary's engines arrive in its first message; start-up failures go to the primary as one line.
 */
export async function serveAsProcess(cfg: RouterConfig, opts: ProcessServeOptions): Promise<number> {
  const index = Number(process.env[PROCESS_INDEX_ENV] ?? 0);
  const link = new ProcessLink();
  // With NATS, each process is a NATS replica and the link below goes unused.
  const mesh =
    cfg.cluster.nats.url === undefined
      ? await openMesh(index, (subject, messages) => link.deliverMessages(subject, messages), opts.log)
      : null;
  link.mesh = mesh;
  // The primary counts tenants' concurrency for every process; with NATS, replicas elsewhere count
  // too, which the primary does not see: each process admits against the reports instead.
  const slots = cfg.cluster.nats.url === undefined ? new PrimarySlots(send) : null;
  return new RouterProcess(cfg, opts, link, mesh, slots).serve();
}

/** One router process's life: hello, start, serve, drain; the primary's messages in between. */
class RouterProcess {
  private readonly questions = new PrimaryQuestions();
  private router: RouterHandle | null = null;
  /** The grace this process drains with, fixed when the primary says to stop. */
  private drainGraceMs: number | null = null;
  private stopping = false;
  private resolveStart!: (m: StartMessage) => void;
  private readonly started = new Promise<StartMessage>((r) => (this.resolveStart = r));
  private resolveStop!: () => void;
  private readonly stopped = new Promise<void>((r) => (this.resolveStop = r));
  /** Replays that arrive while this process starts, applied once it serves, in order. */
  private readonly early: ReplayedRequest[] = [];
  private replays = Promise.resolve();

  constructor(
    private readonly cfg: RouterConfig,
    private readonly opts: ProcessServeOptions,
    private readonly link: ProcessLink,
    private readonly mesh: SyncMesh | null,
    private readonly slots: PrimarySlots | null,
  ) {}

  async serve(): Promise<number> {
    this.listen();
    send(this.mesh ? { t: 'hello', sync: this.mesh.path, wire: 2 } : { t: 'hello', wire: 2 });
    const start = await Promise.race([this.started, this.stopped.then(() => null)]);
    if (start === null) {
      await this.mesh?.close();
      return 0;
    }
    const served = await this.startServing(start);
    if (!served) return 1;
    const { router, picker } = served;
    for (const req of this.early.splice(0)) this.replay(req);
    // Told to stop while starting: the primary still hears what this process drains with.
    if (this.stopping) this.fixDrainGrace(router);
    send({ t: 'ready', url: router.url });
    // Only a turning event loop sends this: the primary replaces a process that stops sending it.
    const alive = start.aliveMs ? setInterval(() => send({ t: 'alive' }), start.aliveMs) : null;
    await this.stopped;
    if (alive) clearInterval(alive);
    await this.replays;
    // Gateway streams drain first: their requests may still need the tokenizers the router closes.
    const graceMs = this.drainGraceMs ?? router.config.server.shutdown_grace_ms;
    await picker?.close(graceMs);
    await router.close(graceMs);
    await this.mesh?.close();
    this.questions.abandon();
    return 0;
  }

  /** The primary's messages, and its ownership of the signals. */
  private listen(): void {
    process.on('message', (m: unknown) => {
      if (isToWorker(m)) this.onMessage(m);
    });
    // The primary owns the signals: a Ctrl-C reaches every process of the group, and the primary
    // decides when each stops (after it stopped accepting, all drain together).
    const ignore = () => undefined;
    process.on('SIGINT', ignore);
    process.on('SIGTERM', ignore);
    process.on('SIGHUP', ignore);
    process.once('disconnect', () => {
      this.slots?.abandon();
      this.stop();
    });
  }

  /** The router (and with `--epp` the gateway picker); null after a failure, which the primary hears. */
  private async startServing(start: StartMessage): Promise<{ router: RouterHandle; picker: EppHandle | null } | null> {
    const role = this.role(start);
    let picker: EppHandle | null = null;
    try {
      const { epp, ...rest } = this.opts;
      this.router = await startRouter(this.cfg, { ...rest, process: role });
      if (epp) {
        const { startEpp } = await import('../epp/server.js');
        picker = await startEpp(this.router.runtime, { host: this.router.config.server.host, ...epp });
      }
    } catch (err) {
      await this.router?.close();
      await this.mesh?.close();
      send({ t: 'failed', message: err instanceof Error ? err.message : String(err) });
      return null;
    }
    return { router: this.router, picker };
  }

  /** What the router asks of the other processes, through the primary. */
  private role(start: StartMessage): ProcessRole {
    const q = this.questions;
    return {
      index: start.index,
      link: this.link,
      engines: start.engines,
      metrics: () => q.ask<string>((id) => ({ t: 'metrics', id })),
      replay: (req) => send({ t: 'replay', req }),
      ask: (req) => q.ask<ReplayAnswer | null>((id) => ({ t: 'ask', id, req })),
      // Nobody left to answer (shutting down): an empty list.
      dashboard: async (cursors) =>
        (await q.ask<DashboardPart[] | null>((id) => ({ t: 'dashboard', id, cursors }))) ?? [],
      ...(start.recover ? { recoverIndex: () => q.ask<IndexSnapshot | null>((id) => ({ t: 'snapshot', id })) } : {}),
      ...(this.slots ? { slots: this.slots } : {}),
    };
  }

  private stop(): void {
    this.stopping = true;
    this.resolveStop();
  }

  /**
   * Read once, when told to stop: a reload replayed during the drain does not change it. The
   * primary's kill timer follows it (a reload may have changed it since start); gateway streams
   * (`--epp`) drain first, each part for up to the grace.
   */
  private fixDrainGrace(r: RouterHandle): void {
    if (this.drainGraceMs !== null) return;
    this.drainGraceMs = r.config.server.shutdown_grace_ms;
    send({ t: 'draining', graceMs: this.opts.epp ? 2 * this.drainGraceMs : this.drainGraceMs });
  }

  /** Another process's state change, applied in order (held until this process serves). */
  private replay(req: ReplayedRequest): void {
    const r = this.router;
    if (!r) return void this.early.push(req);
    this.replays = this.replays.then(() =>
      r.replay(req).then(
        () => undefined,
        (err: unknown) => this.opts.log?.(`replayed ${req.path} failed: ${(err as Error).message}`),
      ),
    );
  }

  /** Another process's booking call: answered here only if this process made the booking. */
  private answerAsk(m: Extract<ToWorker, { t: 'ask' }>): void {
    const r = this.router;
    if (!r) return void send({ t: 'answer', id: m.id, answer: { status: 404, body: new Uint8Array(0) } });
    void r.replay(m.req).then(
      (answer) => send({ t: 'answer', id: m.id, answer }),
      () => send({ t: 'answer', id: m.id, answer: { status: 500, body: new Uint8Array(0) } }),
    );
  }

  private onMessage(m: ToWorker): void {
    const router = this.router;
    switch (m.t) {
      case 'start':
        return this.resolveStart(m);
      case 'sync':
        return this.link.deliver(m.subject, m.data);
      case 'peers':
        return this.link.usePeers(m.paths, m.binary === true);
      case 'replay':
        return this.replay(m.req);
      case 'ask':
        return this.answerAsk(m);
      case 'answer':
        return this.questions.answered(m.id, m.answer);
      case 'metrics-req':
        if (router) void processMetrics(router.runtime.prom).then((json) => send({ t: 'metrics-res', id: m.id, json }));
        else send({ t: 'metrics-res', id: m.id, json: [] });
        return;
      case 'metrics-text':
        return this.questions.answered(m.id, m.text);
      case 'snapshot-req':
        return void send({ t: 'snapshot-res', id: m.id, snap: router ? dumpIndex(router.indexer, Date.now()) : null });
      case 'snapshot':
        return this.questions.answered(m.id, m.snap);
      case 'dashboard-req':
        return void send({
          t: 'dashboard-res',
          id: m.id,
          part: router ? dashboardPart(router.runtime, process.pid, m.cursors[String(process.pid)]) : null,
        });
      case 'dashboard':
        return this.questions.answered(m.id, m.parts);
      case 'slot':
        return this.slots?.answer(m);
      case 'reload':
        if (router && !this.stopping) void router.reload();
        return;
      case 'shutdown':
        if (router) this.fixDrainGrace(router);
        return this.stop();
    }
  }
}
