// One listener's path from a payload to the index: decode with the registration's adapter, apply
// every event, count outcomes, and purge everything the stream ever wrote. Synchronous and
// socket-free (the ZMQ listener drives it); never throws.
import { PREFETCH_REMOVALS } from '../indexer/apply.js';
import type { IndexWriter, PurgeScope } from '../indexer/writer.js';
import { type DecodeContext, decodeContext, decodePayload, decodeValue, type PayloadResult } from './decode/index.js';
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

/** What one publisher may make the index hold beyond its registration (each costs index memory). */
export interface IngestLimits {
  /** Distinct dp ranks a stream's batches may name (a batch's rank overrides the registration's). */
  maxDpRanks: number;
  /** Distinct LoRA adapters a stream may name (each is a namespace). */
  maxLoraAdapters: number;
}

export const DEFAULT_INGEST_LIMITS: IngestLimits = { maxDpRanks: 256, maxLoraAdapters: 128 };

export interface IngestDeps {
  writer: IndexWriter;
  limits?: IngestLimits;
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
  private readonly ranks = new Set<number>();
  private readonly adapters = new Set<string>();
  private readonly limits: IngestLimits;

  constructor(
    readonly reg: Registration,
    private readonly deps: IngestDeps,
  ) {
    this.ctx = decodeContext(reg);
    this.limits = deps.limits ?? DEFAULT_INGEST_LIMITS;
    this.ranks.add(reg.dpRank);
    this.touch(reg.tenant, reg.backendId, reg.dpRank);
  }

  /** Decode and apply one batch payload. `replayed` marks events recovered through replay. */
  applyPayload(payload: Uint8Array, replayed: boolean): ApplyResult {
    return this.applyDecoded(decodePayload(payload, this.ctx), replayed);
  }

  /** Decode and apply one batch given as the value its msgpack payload holds (bench fleet's `--event-wire values`). */
  applyValue(value: unknown): ApplyResult {
    return this.applyDecoded(decodeValue(value, this.ctx), false);
  }

  /**
   * Apply a decoded batch. bench fleet decodes each batch once for all its replicas' ingests of
   * the same stream (their registrations are one config's, so their decoders would agree): the
   * batch is only read here.
   */
  applyDecoded(r: PayloadResult, replayed: boolean): ApplyResult {
    if (!r.ok) {
      this.decodeError(r.error);
      return { ok: false, error: r.error };
    }
    const b = r.batch;
    if (b.errors > 0) this.decodeError(b.firstError ?? 'malformed event', b.errors);
    this.counts.skipped += b.skipped;
    if (b.tsMs !== null && !replayed) this.deps.metrics.lag(Math.max(0, (this.deps.now() - b.tsMs) / 1000));
    const evs = b.events;
    const w = this.deps.writer;
    for (let i = 0; i < evs.length; i++) {
      // Once the batch's first event named its stream, every PREFETCH_REMOVALS events: the index
      // loads the rows the removals ahead will read, so that their cache misses overlap.
      if (i % PREFETCH_REMOVALS === 1 && w.prefetch !== undefined)
        w.prefetch(evs, i, Math.min(evs.length, i + PREFETCH_REMOVALS));
      this.applyEvent(evs[i], replayed);
    }
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

  /** Why the stream may not write this event's rank or adapter, or null (and then it is counted). */
  private beyondLimits(ev: KvEvent): string | null {
    if (!this.ranks.has(ev.dp_rank)) {
      if (this.ranks.size >= this.limits.maxDpRanks)
        return `dp_rank ${ev.dp_rank}: this publisher already wrote ${this.ranks.size} ranks (kv_events.max_dp_ranks)`;
      this.ranks.add(ev.dp_rank);
    }
    if (ev.lora_name !== null && !this.adapters.has(ev.lora_name)) {
      if (this.adapters.size >= this.limits.maxLoraAdapters)
        return `lora_name ${ev.lora_name.slice(0, 64)}: this publisher already wrote ${this.adapters.size} adapters (kv_events.max_lora_adapters)`;
      this.adapters.add(ev.lora_name);
    }
    return null;
  }

  private applyEvent(ev: KvEvent, replayed: boolean): void {
    const beyond = this.beyondLimits(ev);
    if (beyond !== null) {
      this.problem(`rejected: ${beyond}`);
      this.counts.applied.rejected++;
      this.deps.metrics.applied('rejected');
      return;
    }
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
