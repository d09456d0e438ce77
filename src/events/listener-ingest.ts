// One listener's path from a payload to the index: decode with the registration's adapter, apply
// every event, count outcomes, and purge everything the stream ever wrote. Synchronous and
// socket-free (the ZMQ listener drives it); never throws.
import type { IndexWriter, PurgeScope } from '../indexer/writer.js';
import { type DecodeContext, decodeContext, decodePayload } from './decode/index.js';
import type { ApplyStatus, KvEvent } from '../indexer/kv-event.js';
import type { EventMetrics, PurgeReason } from './metrics.js';
import type { Registration } from './registry.js';

export interface IngestCounts {
  /** Outcomes per status, the labels of kv_events_applied_total. */
  applied: Record<ApplyStatus, number>;
  blocksStored: number;
  blocksRemoved: number;
  /** Events deliberately not indexed (other KV groups, unknown tags, unhashable extra keys...). */
  skipped: number;
  purges: number;
  purgedBlocks: number;
  lastPurge: PurgeReason | null;
}

export interface IngestDeps {
  writer: IndexWriter;
  metrics: EventMetrics;
  /** Wall clock (ms) for event lag. */
  now: () => number;
}

export type ApplyResult = { ok: true } | { ok: false; error: string };

export class StreamIngest {
  readonly ctx: DecodeContext;
  readonly counts: IngestCounts = {
    applied: { ok: 0, gap: 0, replayed: 0, orphan: 0, decode_error: 0, purged: 0, rejected: 0 },
    blocksStored: 0,
    blocksRemoved: 0,
    skipped: 0,
    purges: 0,
    purgedBlocks: 0,
    lastPurge: null,
  };
  /** Last non-ok detail (decode error, rejected or orphan event), for the registry's last_error. */
  lastProblem: string | null = null;
  /** Bumped with every new problem, so a caller can tell whether a call added one. */
  problems = 0;
  // (tenant, backend, dp rank) streams this listener wrote to: the batch rank and Mooncake envelopes
  // may differ from the registration, and a purge must reach all of them.
  private readonly touched = new Map<string, Required<PurgeScope>>();
  private lastTouched: Required<PurgeScope> | null = null;

  constructor(
    readonly reg: Registration,
    private readonly deps: IngestDeps,
  ) {
    this.ctx = decodeContext(reg);
    this.touch(reg.tenant, reg.backendId, reg.dpRank);
  }

  /** Decode and apply one batch payload. `replayed` marks events recovered through replay. */
  applyPayload(payload: Uint8Array, replayed: boolean): ApplyResult {
    const r = decodePayload(payload, this.ctx);
    if (!r.ok) {
      this.decodeError(r.error);
      return { ok: false, error: r.error };
    }
    const b = r.batch;
    if (b.errors > 0) this.decodeError(b.firstError ?? 'malformed event', b.errors);
    this.counts.skipped += b.skipped;
    if (b.tsMs !== null && !replayed) this.deps.metrics.lag(Math.max(0, (this.deps.now() - b.tsMs) / 1000));
    for (const ev of b.events) this.applyEvent(ev, replayed);
    return { ok: true };
  }

  decodeError(error: string, n = 1): void {
    this.counts.applied.decode_error += n;
    this.deps.metrics.applied('decode_error', n);
    this.problem(`decode_error: ${error}`);
  }

  /** Count a detected sequence gap. */
  gap(): void {
    this.counts.applied.gap++;
    this.deps.metrics.applied('gap');
  }

  /** Drop every block this stream published, everywhere, and forget its ordering state. */
  purge(reason: PurgeReason): number {
    let n = 0;
    for (const s of this.touched.values()) n += this.deps.writer.purge(s);
    this.counts.applied.purged++;
    this.counts.purges++;
    this.counts.purgedBlocks += n;
    this.counts.lastPurge = reason;
    this.deps.metrics.purged(reason, n);
    return n;
  }

  private problem(detail: string): void {
    this.lastProblem = detail;
    this.problems++;
  }

  private touch(tenant: string, backend: string, dpRank: number): void {
    // Consecutive events share their stream: skip building the key (a string per event).
    const last = this.lastTouched;
    if (last !== null && last.tenant === tenant && last.backend === backend && last.dpRank === dpRank) return;
    const key = `${tenant}\u0000${backend}\u0000${dpRank}`;
    let t = this.touched.get(key);
    if (t === undefined) {
      t = { tenant, backend, dpRank };
      this.touched.set(key, t);
    }
    this.lastTouched = t;
  }

  private applyEvent(ev: KvEvent, replayed: boolean): void {
    this.touch(ev.tenant_id, ev.backend_id, ev.dp_rank);
    let status: ApplyStatus;
    let blocks = 0;
    try {
      const out = this.deps.writer.apply(ev);
      status = out.status;
      blocks = out.blocks;
      if (out.reason !== undefined && status !== 'ok') this.problem(`${status}: ${out.reason}`);
    } catch (err) {
      // The applier is documented not to throw; keep the stream alive if it ever does.
      status = 'rejected';
      this.problem(`rejected: ${(err as Error).message}`);
    }
    if (status === 'ok' || status === 'gap') {
      if (ev.event_type === 'stored') this.counts.blocksStored += blocks;
      else this.counts.blocksRemoved += blocks;
    }
    if (replayed && status === 'ok') status = 'replayed';
    this.counts.applied[status]++;
    this.deps.metrics.applied(status);
  }
}
