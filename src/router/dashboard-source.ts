// Builds the dashboard's view of a running router.
import { roleOf } from './models.js';
import type { DashboardSnapshot, DashboardSource, InstanceView } from '../dashboard/source.js';
import type { DashboardPart } from '../dashboard/whole-router.js';
import { DEFAULT_HUB_OPTIONS } from '../dashboard/hub.js';
import type { RouterRuntime } from './runtime.js';
import type { ListenerPool } from '../events/listener-pool.js';
import type { Registry } from '../events/registry.js';
import type { TieredIndexer } from '../indexer/namespaces.js';
import type { Scheduler } from '../scheduler/scheduler.js';
import type { HitVerifier } from '../feedback/verifier.js';
import type { DecisionLog } from './decision-log.js';
import type { ModelRuntime } from './models.js';

export interface DashboardDeps {
  models: () => ModelRuntime[];
  indexer: TieredIndexer;
  scheduler: Scheduler;
  listeners: ListenerPool;
  registry: Registry;
  log: DecisionLog;
  queueDepth: () => number;
  now: () => number;
  /** The closed-loop check's verifier (a reload may replace it). */
  feedback: () => HitVerifier;
  /** The engine's own load for an instance (summed over ranks), or null without a fresh scrape. */
  engineLoad: (
    instance: string,
    dpSize: number,
  ) => { running: number; waiting: number; kv_usage: number | null } | null;
}

export function dashboardSource(d: DashboardDeps): DashboardSource {
  return {
    snapshot(): DashboardSnapshot {
      const now = d.now();
      const cached = new Map<string, InstanceView['cached_blocks']>();
      for (const ns of d.indexer.namespaces()) {
        for (const info of ns.index.holderInfos()) {
          if (info.speculative || info.instance === null) continue;
          const c = cached.get(info.instance) ?? { GPU: 0, CPU: 0, DISK: 0, EXTERNAL: 0 };
          c[info.medium] += info.blocks;
          cached.set(info.instance, c);
        }
      }
      const byInstance = new Map<string, InstanceView['listeners']>();
      const events: Record<string, number> = {};
      for (const st of d.listeners.stats()) {
        for (const [k, n] of Object.entries(st.applied)) events[k] = (events[k] ?? 0) + n;
        const reg = d.registry.get(st.key);
        if (!reg) continue;
        const list = byInstance.get(reg.instanceId) ?? [];
        list.push({
          dp_rank: reg.dpRank,
          status: st.status,
          last_error: st.lastError,
          last_message_at: st.lastMessageAt,
          gaps: st.gaps,
          purges: st.purges,
        });
        byInstance.set(reg.instanceId, list);
      }
      const instances: InstanceView[] = d.models().flatMap((m) =>
        m.instances.map((i) => {
          const h = i.health.snapshot(now);
          let p = 0;
          let b = 0;
          let r = 0;
          for (let k = 0; k < i.dpSize; k++) {
            const l = d.scheduler.active.load(i.id, k);
            p += l.activePrefillTokens;
            b += l.activeBlocks;
            r += l.activeRequests;
          }
          return {
            id: i.id,
            url: i.upstream.url,
            model: m.name,
            state: h.state,
            dp_size: i.dpSize,
            role: roleOf(m, i.id),
            last_error: h.last_error,
            load: { active_prefill_tokens: p, active_blocks: b, active_requests: r },
            cached_blocks: cached.get(i.id) ?? { GPU: 0, CPU: 0, DISK: 0, EXTERNAL: 0 },
            listeners: (byInstance.get(i.id) ?? []).sort((a, b) => a.dp_rank - b.dp_rank),
            engine_load: d.engineLoad(i.id, i.dpSize),
            hit_check: {
              ...d.feedback().totals(i.id),
              alarm: d.feedback().alarm(i.id)?.message ?? null,
              distrusted: d.scheduler.distrusted.has(i.id),
            },
          };
        }),
      );
      return {
        time: now,
        models: d.models().map((m) => ({ name: m.name, policy: m.routing.policy, block_size: m.cfg.block_size })),
        instances,
        events,
        listeners: d.listeners.statusCounts(),
        prefix: { prompt_tokens: d.log.promptTokens, overlap_tokens: d.log.overlapTokens },
        requests: { total: d.log.total, errors: d.log.errors },
        bookings: d.scheduler.active.size,
        queue_depth: d.queueDepth(),
        index: d.indexer.stats(),
      };
    },
    recentDecisions: (limit) => d.log.recent(limit),
    onDecision: (l) => d.log.subscribe(l),
  };
}

/**
 * What this `serve --workers` process adds to another's dashboard: its decisions after `cursor`
 * (undefined: its most recent ones) and its own counts.
 */
export function dashboardPart(rt: RouterRuntime, pid: number, cursor: number | undefined): DashboardPart {
  const log = rt.decisions;
  const hit: DashboardPart['hit_check'] = {};
  for (const m of rt.all) for (const i of m.instances) hit[i.id] = rt.feedback.verifier.totals(i.id);
  return {
    pid,
    seq: log.logged,
    // A new asker gets a backfill's worth; later asks what a stream can take per tick (the hub drops the rest).
    decisions:
      cursor === undefined || cursor > log.logged
        ? log.recent(DEFAULT_HUB_OPTIONS.backfill)
        : log.since(cursor, DEFAULT_HUB_OPTIONS.maxDecisionsPerSecond),
    prefix: { prompt_tokens: log.promptTokens, overlap_tokens: log.overlapTokens },
    requests: { total: log.total, errors: log.errors },
    queue_depth: rt.queue.depth,
    hit_check: hit,
  };
}
