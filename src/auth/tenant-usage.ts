// What tenants use of their limits, across every replica of one router. This router's own
// in-flight requests and admissions are counted here; other replicas (NATS replicas, or the other
// `serve --workers` processes) report theirs through replica sync, so a tenant's concurrency cap
// and rate limit hold for the whole router, not per process. Pure: the caller passes `now`.
//
// Invariants
// - A peer's report is absolute per tenant (its in-flight count and its admissions since it
//   started), so a lost or repeated report is corrected by the next one naming that tenant, and
//   every heartbeat carries a full report; a peer's first report only sets the baseline
//   (admissions before it are not charged twice after a gap or restart).
// - A peer that restarts, leaves or falls silent has its in-flight counts dropped (under-count,
//   never a tenant locked out by a dead process).
// - Buckets and counts outlive a configuration reload: a tenant whose limits did not change keeps
//   its bucket, and releases of requests admitted before the reload still count down.
// - With an `owner` (the `serve --workers` primary, tenant-slots.ts), concurrency slots are granted
//   by it alone: in-flight counts are neither kept here nor read from the peers' reports (they lag
//   by a turn). The reports still carry admissions to the others' rate-limit buckets.
import { TokenBucket } from './rate-limit.js';
import type { SlotOwner } from './tenant-slots.js';

/** One tenant's use on one replica: [tenant id, requests in flight, admissions since start]. */
export type TenantUse = readonly [tenant: string, inflight: number, admitted: number];

interface PeerUse {
  inflight: Map<string, number>;
  admitted: Map<string, number>;
}

interface Bucket {
  rate: number;
  burst: number;
  bucket: TokenBucket;
}

export class TenantUsage {
  private readonly inflight = new Map<string, number>();
  private readonly admitted = new Map<string, number>();
  private readonly buckets = new Map<string, Bucket>();
  private readonly peers = new Map<string, PeerUse>();
  /** Tenants whose use changed since the last report (a turn's report names only these). */
  private readonly dirty = new Set<string>();
  private readonly changeListeners: Array<() => void> = [];
  /** Who grants concurrency slots for the whole router, when one owner sees every process (null: counted here against the peers' reports). */
  owner: SlotOwner | null = null;

  /** Called after every local change (admission or release): replica sync then publishes `report()`. */
  onChange(listener: () => void): void {
    this.changeListeners.push(listener);
  }

  /**
   * The configured rate limits (at start and at each reload): a bucket is kept while its tenant's
   * limits stay the same, so peers' admissions are charged even before this replica admits any.
   */
  configure(limits: ReadonlyArray<{ tenant: string; ratePerSec: number; burst: number }>, now: number): void {
    for (const l of limits) this.bucketFor(l.tenant, l.ratePerSec, l.burst, now);
  }

  private bucketFor(tenant: string, ratePerSec: number, burst: number, now: number): TokenBucket {
    let b = this.buckets.get(tenant);
    if (!b || b.rate !== ratePerSec || b.burst !== burst)
      this.buckets.set(tenant, (b = { rate: ratePerSec, burst, bucket: new TokenBucket(ratePerSec, burst, now) }));
    return b.bucket;
  }

  /**
   * Take one request from the tenant's bucket (created, or replaced when its limits changed):
   * 0 when granted, else the ms until one is available.
   */
  take(tenant: string, ratePerSec: number, burst: number, now: number): number {
    return this.bucketFor(tenant, ratePerSec, burst, now).take(now);
  }

  /** Requests of the tenant in flight on every replica. */
  inflightOf(tenant: string): number {
    let n = this.inflight.get(tenant) ?? 0;
    for (const p of this.peers.values()) n += p.inflight.get(tenant) ?? 0;
    return n;
  }

  /** An admitted request: counted in flight here until `release`. */
  acquire(tenant: string): void {
    this.inflight.set(tenant, (this.inflight.get(tenant) ?? 0) + 1);
    this.admitted.set(tenant, (this.admitted.get(tenant) ?? 0) + 1);
    this.changed(tenant);
  }

  /** An admission that holds no concurrency slot (the tenant has no cap): still charged to the others' buckets. */
  admittedOnly(tenant: string): void {
    this.admitted.set(tenant, (this.admitted.get(tenant) ?? 0) + 1);
    this.changed(tenant);
  }

  release(tenant: string): void {
    const n = (this.inflight.get(tenant) ?? 1) - 1;
    if (n > 0) this.inflight.set(tenant, n);
    else this.inflight.delete(tenant);
    this.changed(tenant);
  }

  /**
   * This replica's use: of every tenant it has admitted a request of (`full`, a heartbeat's
   * report), or of those changed since the last report (a turn's).
   */
  report(full: boolean): TenantUse[] {
    const out: TenantUse[] = [];
    const use = (t: string): void => void out.push([t, this.inflight.get(t) ?? 0, this.admitted.get(t) ?? 0]);
    if (full) for (const t of this.admitted.keys()) use(t);
    else for (const t of this.dirty) use(t);
    this.dirty.clear();
    return out;
  }

  /**
   * A peer's report: the in-flight counts of the tenants it names replace the previous ones (a full
   * report: of every tenant); their new admissions are charged to the buckets.
   */
  applyPeer(peer: string, uses: readonly TenantUse[], full: boolean, now: number): void {
    let p = this.peers.get(peer);
    const first = !p;
    if (!p) this.peers.set(peer, (p = { inflight: new Map(), admitted: new Map() }));
    if (full) p.inflight.clear();
    for (const [tenant, inflight, admitted] of uses) {
      if (inflight > 0) p.inflight.set(tenant, inflight);
      else p.inflight.delete(tenant);
      const before = p.admitted.get(tenant);
      p.admitted.set(tenant, admitted);
      // A tenant first seen in a known peer's report was admitted there since the last report.
      const fresh = before === undefined ? (first ? 0 : admitted) : Math.max(0, admitted - before);
      if (fresh > 0) this.buckets.get(tenant)?.bucket.charge(fresh, now);
    }
  }

  /** The peer restarted, left or fell silent: its requests no longer count. */
  dropPeer(peer: string): void {
    this.peers.delete(peer);
  }

  dropPeers(): void {
    this.peers.clear();
  }

  private changed(tenant: string): void {
    this.dirty.add(tenant);
    for (const l of this.changeListeners) l();
  }
}
