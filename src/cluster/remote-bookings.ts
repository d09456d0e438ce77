// Other replicas' bookings, applied to this router's ActiveSequences so its load view counts them.
// Pure: messages and `now` come from the adapter (replica-sync.ts); no sockets, no timers.
//
// Invariants
// - A remote booking never outlives what we know of its sender: a gap in the sender's sequence,
//   a new incarnation (restart) or heartbeat silence frees every booking we hold for it. Lost
//   messages can therefore under-count load for a while, never leak it; `missed` tells the adapter
//   to ask the sender to re-announce what it holds, which ends the under-count.
// - Remote ids (`peer/<router>/<incarnation>/<id>`) cannot collide with local ones: local request
//   ids never contain '/'.
import type { TenantUsage } from '../auth/tenant-usage.js';
import type { TieredIndexer } from '../indexer/namespaces.js';
import type { ActiveSequences } from '../scheduler/active-sequences.js';
import type { PrefillRates } from '../scheduler/rates.js';
import { speculate, withdrawSpeculation } from '../scheduler/speculation.js';
import type { SyncMessage } from './sync-wire.js';

export interface RemoteTarget {
  active: ActiveSequences;
  /** Prefill rates: a peer's samples are learned here too (none: they are ignored). */
  rates?: PrefillRates;
  indexer: TieredIndexer;
  /** Tenant limits' use: peers' reports apply here (none: tenant reports are ignored). */
  tenants?: TenantUsage;
}

export type PeerReset = 'gap' | 'restarted' | 'expired';

export interface HandleResult {
  outcome: 'applied' | 'own' | 'stale' | 'conflict';
  /** Load went down (prefill completed, freed, or a reset freed bookings): wake queued requests. */
  released: boolean;
  /**
   * The instance whose load went down, when one booking's did (a wake-up names it: only the waiters
   * it may let go are decided again); null when none did or a reset freed several.
   */
  instance: string | null;
  reset: PeerReset | null;
  /** Bookings freed by the reset. */
  freed: number;
  /** We have not seen all of this sender's messages (first heard mid-stream, or a gap): its
   * earlier bookings are unknown here until it re-announces them. */
  missed: boolean;
}

export interface PeerView {
  router: string;
  incarnation: string;
  url: string | null;
  lastSeq: number;
  lastSeenAt: number;
  /** Bookings of this peer we hold now. */
  bookings: number;
  /** What the peer's last heartbeat said it holds (its own, local bookings). */
  reportedBookings: number | null;
}

interface PeerState extends Omit<PeerView, 'bookings'> {
  ids: Set<string>;
}

export const REMOTE_PREFIX = 'peer/';
export const remoteId = (router: string, incarnation: string, id: string): string =>
  `${REMOTE_PREFIX}${router}/${incarnation}/${id}`;
export const isRemoteId = (id: string): boolean => id.startsWith(REMOTE_PREFIX);

export class RemoteBookings {
  private readonly peers = new Map<string, PeerState>();

  constructor(
    private readonly target: RemoteTarget,
    private readonly self: { router: string; incarnation: string },
  ) {}

  handle(m: SyncMessage, now: number): HandleResult {
    if (m.router === this.self.router) {
      // Another process with our router id is a misconfiguration: never apply its bookings as ours.
      return {
        outcome: m.incarnation === this.self.incarnation ? 'own' : 'conflict',
        released: false,
        instance: null,
        reset: null,
        freed: 0,
        missed: false,
      };
    }
    let p = this.peers.get(m.router);
    let reset: PeerReset | null = null;
    let freed = 0;
    if (p && p.incarnation !== m.incarnation) {
      freed = this.drop(p);
      reset = 'restarted';
      p = undefined;
    }
    let missed = false;
    if (!p) {
      p = {
        router: m.router,
        incarnation: m.incarnation,
        url: null,
        lastSeq: m.seq - 1,
        lastSeenAt: now,
        reportedBookings: null,
        ids: new Set(),
      };
      this.peers.set(m.router, p);
      missed = m.seq > 1; // an incarnation's first message has seq 1
    }
    if (m.seq <= p.lastSeq) return { outcome: 'stale', released: false, instance: null, reset, freed, missed };
    if (m.seq > p.lastSeq + 1) {
      freed += this.drop(p);
      reset = 'gap';
      missed = true;
    }
    p.lastSeq = m.seq;
    p.lastSeenAt = now;
    const eased = this.apply(p, m, now);
    return {
      outcome: 'applied',
      released: eased !== null || freed > 0,
      instance: freed > 0 ? null : eased,
      reset,
      freed,
      missed,
    };
  }

  /** Forget peers silent for longer than timeoutMs, freeing their bookings. */
  expire(now: number, timeoutMs: number): Array<{ router: string; freed: number }> {
    const out: Array<{ router: string; freed: number }> = [];
    for (const p of [...this.peers.values()]) {
      if (now - p.lastSeenAt <= timeoutMs) continue;
      out.push({ router: p.router, freed: this.drop(p) });
      this.peers.delete(p.router);
    }
    return out;
  }

  /** Free every remote booking (closing, or sync disabled). */
  clear(): number {
    let n = 0;
    for (const p of this.peers.values()) n += this.drop(p);
    this.peers.clear();
    this.target.tenants?.dropPeers();
    return n;
  }

  list(): PeerView[] {
    return [...this.peers.values()].map(({ ids, ...v }) => ({ ...v, bookings: ids.size }));
  }

  /** Bookings we hold for this peer (0 for an unknown one). */
  heldFor(router: string): number {
    return this.peers.get(router)?.ids.size ?? 0;
  }

  get size(): number {
    let n = 0;
    for (const p of this.peers.values()) n += p.ids.size;
    return n;
  }

  /** Applies a message; the instance whose load went down (null: none did). */
  private apply(p: PeerState, m: SyncMessage, now: number): string | null {
    const { active, indexer } = this.target;
    switch (m.kind) {
      case 'add': {
        const id = remoteId(p.router, p.incarnation, m.id);
        if (active.get(id)) return null;
        const b = active.book(id, m.instance, m.dpRank, m.blocks, m.prefillTokens, now, '', m.contextTokens ?? 0);
        p.ids.add(id);
        // As Scheduler.book: the prefix the engine is about to use becomes the newest in the LRU
        // model (without it, eviction-aware scoring here saw that prefix as the oldest, and
        // routed away from it: two processes lost 2-3 points of hit rate, docs/benchmarks.md).
        if (m.touchedBlocks) indexer.find(m.ns)?.index.touch(m.instance, m.dpRank, m.blocks, m.touchedBlocks);
        // Same speculative insert as Scheduler.book: the prompt's blocks are about to be cached there.
        speculate(indexer, m.ns, b, m.speculativeTtlMs, now);
        return null;
      }
      case 'prefill': {
        const b = active.get(remoteId(p.router, p.incarnation, m.id));
        if (!b || b.prefillDone) return null;
        active.prefillComplete(b.id);
        return b.instance;
      }
      case 'free': {
        const id = remoteId(p.router, p.incarnation, m.id);
        p.ids.delete(id);
        const b = active.get(id);
        if (b && m.rate) this.target.rates?.observeSample(b.instance, b.dpRank, m.rate);
        if (!active.free(id)) return null;
        // The sender's attempt failed: its speculative insert is withdrawn here too.
        if (m.failed) withdrawSpeculation(indexer, b!, now);
        return b!.instance;
      }
      case 'heartbeat':
        p.url = m.url;
        p.reportedBookings = m.bookings;
        return null;
      case 'tenants':
        this.target.tenants?.applyPeer(p.router, m.uses, m.full, now);
        return null;
      case 'resend':
        return null; // addressed to the adapter of its target
    }
  }

  private drop(p: PeerState): number {
    this.target.tenants?.dropPeer(p.router);
    let n = 0;
    for (const id of p.ids) if (this.target.active.free(id)) n++;
    p.ids.clear();
    return n;
  }
}
