// What the `serve --workers` primary and its router processes say to each other over the IPC
// channel (node:cluster, 'advanced' serialization: byte arrays travel as bytes).
import type { Registry } from 'prom-client';
import type { IndexSnapshot } from '../indexer/snapshot.js';
import type { DashboardPart } from '../dashboard/whole-router.js';
import type { ReplayAnswer, ReplayedRequest } from '../router/app.js';
import type { EngineRef } from '../router/engines.js';

/** One process's registry as prom-client's cluster aggregation takes it. */
export type MetricsJson = Awaited<ReturnType<Registry['getMetricsAsJSON']>>;

/** Primary -> router process. */
export type ToWorker =
  /**
   * `recover`: a replacement process, which first copies another process's index. `aliveMs`: how
   * often to send `alive` once ready (0 or absent: never), the primary's word, not the file's.
   */
  | { t: 'start'; index: number; engines: EngineRef[]; recover: boolean; aliveMs?: number }
  /** Replica-sync messages of one turn of another process, framed (`frameBatch`). */
  | { t: 'sync'; subject: string; data: Uint8Array }
  /**
   * The processes' replica-sync sockets, each's own included (src/processes/mesh.ts), sent whenever
   * they change; null: some process has none, so all sync goes through the primary.
   */
  | {
      t: 'peers';
      paths: string[] | null;
      /** Every process reads the binary sync wire (each said `wire: 2`): add, prefill and free travel in it. */
      binary?: boolean;
    }
  | { t: 'replay'; req: ReplayedRequest }
  | { t: 'ask'; id: number; req: ReplayedRequest }
  | { t: 'answer'; id: number; answer: ReplayAnswer | null }
  | { t: 'metrics-req'; id: number }
  | { t: 'metrics-text'; id: number; text: string }
  | { t: 'snapshot-req'; id: number }
  /** Another process's index for a replacement (null: none answered). */
  | { t: 'snapshot'; id: number; snap: IndexSnapshot | null }
  | { t: 'dashboard-req'; id: number; cursors: Record<string, number> }
  /** The other processes' dashboard parts. */
  | { t: 'dashboard'; id: number; parts: DashboardPart[] }
  /** The answer to `slot-claim`: granted, or all `held` slots of the tenant are taken. */
  | { t: 'slot'; id: number; granted: boolean; held: number }
  | { t: 'reload' }
  | { t: 'shutdown' };

/** Router process -> primary. */
export type ToPrimary =
  /** `sync`: this process's replica-sync socket (none: it could not make one, or predates the mesh). */
  /** `wire`: 2 when this process reads the binary sync wire (absent: JSON only, a process from before it). */
  | { t: 'hello'; sync?: string; wire?: number }
  | { t: 'ready'; url: string }
  /** The event loop turns (every `start.aliveMs`). */
  | { t: 'alive' }
  | { t: 'failed'; message: string }
  /**
   * The answer to `shutdown`: the grace this process drains with now (`server.shutdown_grace_ms`
   * after any reload), so the primary waits that long for it, not its start-up value.
   */
  | { t: 'draining'; graceMs: number }
  /** Replica-sync messages of one event-loop turn, in order, framed (`frameBatch`): one IPC write, one byte array (only while the primary relays). */
  | { t: 'sync'; subject: string; data: Uint8Array }
  | { t: 'replay'; req: ReplayedRequest }
  | { t: 'ask'; id: number; req: ReplayedRequest }
  | { t: 'answer'; id: number; answer: ReplayAnswer }
  | { t: 'metrics'; id: number }
  | { t: 'metrics-res'; id: number; json: MetricsJson }
  | { t: 'snapshot'; id: number }
  | { t: 'snapshot-res'; id: number; snap: IndexSnapshot | null }
  | { t: 'dashboard'; id: number; cursors: Record<string, number> }
  | { t: 'dashboard-res'; id: number; part: DashboardPart | null }
  /**
   * A concurrency slot of a tenant with a cap (`limit`, this process's config), counted by the
   * primary for every process (src/auth/tenant-slots.ts); `id` names the grant.
   */
  | { t: 'slot-claim'; id: number; tenant: string; limit: number }
  /** A granted slot back (also sent for a claim this process stopped waiting for). */
  | { t: 'slot-free'; id: number };

/** Environment variable that marks a forked router process (its value: the process index); not KVROUTER_*, which are config overrides. */
export const PROCESS_INDEX_ENV = 'KVR_ROUTER_PROCESS';

/**
 * The stall watch of `server.stall_timeout_ms` (0: off): a process sends `alive` every `everyMs`,
 * and one the primary has not heard from for `missedTicks` of its own ticks (as often) is stalled.
 * Counting ticks, not wall time, a pause of the primary itself (Ctrl-Z, a VM resumed, a clock
 * step) counts once. Under 1 s the timeout is taken as 1 s: timer jitter and a GC pause alone
 * would otherwise kill healthy processes.
 */
export function stallWatch(stallTimeoutMs: number): { everyMs: number; missedTicks: number } | null {
  if (stallTimeoutMs <= 0) return null;
  const timeout = Math.max(1000, stallTimeoutMs);
  const everyMs = Math.min(1000, timeout / 4);
  return { everyMs, missedTicks: Math.round(timeout / everyMs) };
}

/** The primary's private directory (mode 0700) where each router process puts its replica-sync socket. */
export const SYNC_DIR_ENV = 'KVR_SYNC_DIR';

const has = (m: unknown, t: string): boolean => typeof m === 'object' && m !== null && (m as { t?: unknown }).t === t;

export function isToWorker(m: unknown): m is ToWorker {
  return [
    'start',
    'sync',
    'peers',
    'replay',
    'ask',
    'answer',
    'metrics-req',
    'metrics-text',
    'snapshot-req',
    'snapshot',
    'dashboard-req',
    'dashboard',
    'slot',
    'reload',
    'shutdown',
  ].some((t) => has(m, t));
}

export function isToPrimary(m: unknown): m is ToPrimary {
  return [
    'hello',
    'ready',
    'alive',
    'failed',
    'draining',
    'sync',
    'replay',
    'ask',
    'answer',
    'metrics',
    'metrics-res',
    'snapshot',
    'snapshot-res',
    'dashboard',
    'dashboard-res',
    'slot-claim',
    'slot-free',
  ].some((t) => has(m, t));
}

/**
 * A turn's replica-sync messages as one byte array: each a u32 little-endian length, then its
 * bytes. The channel's serializer handles one byte array far faster than one per message (each is
 * a host object with JS callbacks on both sides; docs/profile.md, round six).
 */
export function frameBatch(messages: readonly Uint8Array[]): Uint8Array {
  let size = 0;
  for (const m of messages) size += 4 + m.byteLength;
  const out = Buffer.allocUnsafe(size);
  let at = 0;
  for (const m of messages) {
    out.writeUInt32LE(m.byteLength, at);
    out.set(m, at + 4);
    at += 4 + m.byteLength;
  }
  return out;
}

/** The messages of a framed batch (views into it, in order); throws on a truncated frame. */
export function unframeBatch(batch: Uint8Array): Uint8Array[] {
  const view = new DataView(batch.buffer, batch.byteOffset, batch.byteLength);
  const out: Uint8Array[] = [];
  for (let at = 0; at < batch.byteLength; ) {
    if (at + 4 > batch.byteLength) throw new Error(`sync batch: a frame header is cut at byte ${at}`);
    const len = view.getUint32(at, true);
    if (at + 4 + len > batch.byteLength)
      throw new Error(`sync batch: a ${len}-byte frame at byte ${at} passes the end`);
    out.push(batch.subarray(at + 4, at + 4 + len));
    at += 4 + len;
  }
  return out;
}
