// Shapes index answers as the Mooncake Conductor responses (and Dynamo's variants of /query and /workers).
// Counts are tokens = blocks x block_size; tiers are cumulative (GPU <= CPU <= DISK).
import type { ListenerStatus, Registration } from '../events/registry.js';
import type { OverlapResult } from '../indexer/block-index.js';

export interface InstanceHit {
  longest_matched: number;
  GPU: number;
  CPU: number;
  DISK: number;
  /** Per DP rank: the longest prefix over all of the instance's tiers. */
  DP: Record<string, number>;
  /** Prefix readable from shared-pool backends (present only when the namespace has one). */
  SHARED?: number;
}

/**
 * @param report instances to include (zero rows for those without hits), with their known ranks
 */
export function conductorHits(
  result: OverlapResult,
  blockSize: number,
  report: ReadonlyMap<string, readonly number[]>,
  hasSharedPool: boolean,
): Record<string, InstanceHit> {
  const out: Record<string, InstanceHit> = {};
  for (const [instance, ranks] of report) {
    const hit: InstanceHit = { longest_matched: 0, GPU: 0, CPU: 0, DISK: 0, DP: {} };
    for (const r of ranks) hit.DP[String(r)] = 0;
    out[instance] = hit;
  }
  for (const c of result.candidates) {
    const hit = out[c.instance];
    if (!hit) continue;
    hit.GPU = Math.max(hit.GPU, c.device * blockSize);
    hit.CPU = Math.max(hit.CPU, c.host * blockSize);
    hit.DISK = Math.max(hit.DISK, c.disk * blockSize);
    hit.DP[String(c.dpRank)] = c.disk * blockSize;
  }
  const shared = result.sharedBlocks * blockSize;
  for (const hit of Object.values(out)) {
    if (hasSharedPool) hit.SHARED = shared;
    hit.longest_matched = Math.max(hit.DISK, hasSharedPool ? shared : 0);
  }
  return out;
}

/** Dynamo standalone indexer's shape: lower-case keys, `scores` per dp rank. */
export function dynamoShape(hits: Record<string, InstanceHit>): {
  scores: Record<string, Record<string, number>>;
  frequencies: number[];
  instances: Record<
    string,
    { longest_matched: number; gpu: number; cpu: number; disk: number; dp: Record<string, number> }
  >;
} {
  const scores: Record<string, Record<string, number>> = {};
  const instances: Record<
    string,
    { longest_matched: number; gpu: number; cpu: number; disk: number; dp: Record<string, number> }
  > = {};
  for (const [inst, h] of Object.entries(hits)) {
    scores[inst] = { ...h.DP };
    instances[inst] = { longest_matched: h.longest_matched, gpu: h.GPU, cpu: h.CPU, disk: h.DISK, dp: { ...h.DP } };
  }
  return { scores, frequencies: [], instances };
}

/** One worker in Dynamo's GET /workers answer (the standalone indexer's shape). */
export interface DynamoWorker {
  instance_id: string | number;
  source: 'zmq';
  status: ListenerStatus;
  endpoints: Record<string, string>;
  listeners: Record<string, { endpoint: string; status: ListenerStatus; last_error?: string }>;
}

// Dynamo aggregates an instance's listeners: failed > pending > active > paused.
const STATUS_RANK: Record<ListenerStatus, number> = { failed: 3, pending: 2, active: 1, paused: 0 };

/** Registrations grouped per instance as Dynamo lists them; numeric ids come back as numbers. */
export function dynamoWorkers(regs: readonly Registration[]): DynamoWorker[] {
  const byInstance = new Map<string, DynamoWorker>();
  for (const r of regs) {
    let w = byInstance.get(r.instanceId);
    if (!w) {
      const numeric = /^\d{1,15}$/.test(r.instanceId);
      w = {
        instance_id: numeric ? Number(r.instanceId) : r.instanceId,
        source: 'zmq',
        status: r.status,
        endpoints: {},
        listeners: {},
      };
      byInstance.set(r.instanceId, w);
    }
    if (STATUS_RANK[r.status] > STATUS_RANK[w.status]) w.status = r.status;
    w.endpoints[String(r.dpRank)] = r.endpoint;
    w.listeners[String(r.dpRank)] = {
      endpoint: r.endpoint,
      status: r.status,
      ...(r.lastError ? { last_error: r.lastError } : {}),
    };
  }
  return [...byInstance.values()];
}
