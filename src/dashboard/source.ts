// What the dashboard reads from a running router. The router builds one (src/router/dashboard-source.ts);
// the dashboard only depends on this interface.

export interface InstanceView {
  id: string;
  url: string;
  model: string;
  state: 'healthy' | 'ejected' | 'probation';
  dp_size: number;
  /** Disaggregated serving role: both (aggregated), prefill or decode. */
  role: 'both' | 'prefill' | 'decode';
  last_error: string | null;
  load: { active_prefill_tokens: number; active_blocks: number; active_requests: number };
  /** Blocks this instance holds in the index, by tier (speculative entries not included). */
  cached_blocks: { GPU: number; CPU: number; DISK: number; EXTERNAL: number };
  /** Its KV-event listeners (one per dp rank), or empty when it publishes no events. */
  listeners: Array<{
    dp_rank: number;
    status: string;
    last_error: string | null;
    last_message_at: number | null;
    gaps: number;
    purges: number;
  }>;
  /** The engine's own last scraped load (engine_metrics.scrape), or null. */
  engine_load: { running: number; waiting: number; kv_usage: number | null } | null;
  /** Closed-loop check: judged responses by verdict, and the open alarm's message (null: none). */
  hit_check: { agree: number; over: number; under: number; alarm: string | null; distrusted: boolean };
}

export interface DashboardSnapshot {
  /** Unix ms. */
  time: number;
  models: Array<{ name: string; policy: string; block_size: number }>;
  instances: InstanceView[];
  /** Cumulative KV event outcomes over all ZMQ listeners, as kv_events_applied_total (the page derives rates). */
  events: Record<string, number>;
  listeners: Record<string, number>;
  /** Cumulative prompt tokens routed and the cached (own-tier) tokens found for them. */
  prefix: { prompt_tokens: number; overlap_tokens: number };
  requests: { total: number; errors: number };
  bookings: number;
  queue_depth: number;
  index: { namespaces: number; blocks: number; records: number; bytes: number };
}

export interface CandidateView {
  instance: string;
  dp_rank: number;
  overlap: { gpu: number; cpu: number; disk: number; shared: number };
  /** The cost's parts: credited cached blocks, prefill blocks, decode blocks. */
  credited_blocks: number;
  prefill_blocks: number;
  decode_blocks: number;
  cost: number;
  load: { active_prefill_tokens: number; active_blocks: number };
  busy: boolean;
}

export interface DecisionRecord {
  time: number;
  model: string;
  policy: string;
  prompt_tokens: number;
  chosen: string | null;
  chosen_dp_rank: number | null;
  overlap_tokens: number;
  attempt: number;
  candidates: CandidateView[];
}

export interface DashboardSource {
  /** Fetch what other processes of the router hold (`serve --workers`); called before a snapshot is taken. */
  refresh?(): Promise<void>;
  snapshot(): DashboardSnapshot;
  /** Most recent decisions, newest last. */
  recentDecisions(limit: number): DecisionRecord[];
  /** Subscribe to new decisions; returns the unsubscribe function. */
  onDecision(listener: (d: DecisionRecord) => void): () => void;
}

/** Data of the stream's `snapshot` event: a source that throws sends `{ error }` instead of a snapshot. */
export interface SnapshotEvent {
  /** Decisions this client was not sent since the previous snapshot (rate limit, slow reader). */
  dropped_decisions: number;
  snapshot: DashboardSnapshot | { error: string };
}

/** GET /dashboard/snapshot. */
export interface SnapshotResponse {
  snapshot: DashboardSnapshot;
  decisions: DecisionRecord[];
}
