// The sending side of replica sync: a router's booking changes as sync messages. Pure: the caller
// numbers, encodes and publishes them (ReplicaSync over NATS, the fleet simulator with a modelled
// delay). Remote bookings are never re-published.
import type { NamespaceId } from '../indexer/namespace.js';
import type { SchedulerHooks } from '../scheduler/scheduler.js';
import { isRemoteId } from './remote-bookings.js';
import type { SyncBody } from './sync-wire.js';

/**
 * Scheduler hooks that turn this router's own bookings into `add`, `prefill` and `free` messages.
 * `local`, when given, tracks the in-flight ones (what a re-announce repeats).
 */
export function bookingSyncHooks(send: (body: SyncBody) => void, local?: Map<string, NamespaceId>): SchedulerHooks {
  return {
    // Remote bookings never go through the Scheduler, but the stale sweep may free them: skip those.
    booked: (b, ns, ttl, _now, touchedBlocks) => {
      if (isRemoteId(b.id)) return;
      local?.set(b.id, ns);
      send({
        kind: 'add',
        id: b.id,
        instance: b.instance,
        dpRank: b.dpRank,
        ns,
        blocks: b.blocks,
        prefillTokens: b.prefillTokens,
        contextTokens: b.contextTokens,
        speculativeTtlMs: ttl,
        touchedBlocks,
      });
    },
    prefillCompleted: (id) => {
      if (!isRemoteId(id)) send({ kind: 'prefill', id });
    },
    freed: (id, rate, failed) => {
      if (isRemoteId(id)) return;
      local?.delete(id);
      // The first token's rate sample travels with the free: every replica learns every
      // instance's prefill rate from all requests, not from its own share. A failed attempt's
      // free says so: every replica withdraws the speculative insert it repeated.
      send({ kind: 'free', id, rate, failed });
    },
  };
}
