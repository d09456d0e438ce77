// Replica-sync messages (NATS core, one subject, JSON). Every message names its sender (router id
// + incarnation, new at each process start) and a per-incarnation sequence number, so a receiver
// ignores its own messages, tells a restart from a reorder, and detects lost messages as gaps.
import type { TenantUse } from '../auth/tenant-usage.js';
import type { NamespaceId } from '../indexer/namespace.js';
import { type RateSample, validSample } from '../scheduler/rates.js';
import { asObj, int, nsFromWire, nsToWire, optStr, packU64, str, unpackU64, wireNs } from './codec.js';

export interface Sender {
  router: string;
  incarnation: string;
  /** 1, 2, 3... per incarnation; every published message (heartbeats too) takes the next one. */
  seq: number;
}

export type SyncBody =
  | {
      /** Dynamo AddRequest. */
      kind: 'add';
      id: string;
      instance: string;
      dpRank: number;
      ns: NamespaceId;
      blocks: BigUint64Array;
      prefillTokens: number;
      /** The sender's speculative insert of the blocks (0 = none), repeated by receivers. */
      speculativeTtlMs: number;
      /**
       * The cached GPU prefix (blocks) the sender's booking made the newest in its index's LRU
       * model, repeated by receivers (absent or 0: none; a re-announce sends none).
       */
      touchedBlocks?: number;
    }
  | { kind: 'prefill'; id: string }
  | {
      kind: 'free';
      id: string;
      /** The sender's prefill-rate sample from this booking's first token, repeated by receivers (absent: none). */
      rate?: RateSample;
    }
  | {
      /** Ask `target` to re-announce its in-flight bookings (we joined late or lost messages). */
      kind: 'resend';
      target: string;
    }
  | {
      /** The sender's use of tenant limits (absolute: in flight now, admitted since it started). */
      kind: 'tenants';
      uses: TenantUse[];
      /** Every tenant the sender has admitted (a heartbeat's report), not only those changed this turn. */
      full: boolean;
    }
  | {
      kind: 'heartbeat';
      /** The sender's HTTP base URL, when it advertises one (peer discovery). */
      url: string | null;
      bookings: number;
    };

export type SyncMessage = Sender & SyncBody;

const enc = new TextEncoder();
const dec = new TextDecoder();

export function encodeSync(m: SyncMessage): Uint8Array {
  // Object.assign onto the head, not `{ ...head, more }`: a literal that adds keys after a leading
  // spread is V8's slow path (about a microsecond per message on Node 20). Same keys, same order.
  const head = () => ({ v: 1, router: m.router, inc: m.incarnation, seq: m.seq });
  switch (m.kind) {
    case 'add':
      return enc.encode(
        JSON.stringify(Object.assign(head(), {
          t: 'add',
          id: m.id,
          instance: m.instance,
          dp_rank: m.dpRank,
          ns: nsToWire(m.ns),
          blocks: packU64(m.blocks),
          prefill_tokens: m.prefillTokens,
          speculative_ttl_ms: m.speculativeTtlMs,
          // Receivers from before this field ignore it.
          ...(m.touchedBlocks ? { touched_blocks: m.touchedBlocks } : {}),
        })),
      );
    case 'prefill':
      return enc.encode(JSON.stringify(Object.assign(head(), { t: m.kind, id: m.id })));
    case 'free':
      // A receiver before this field ignores it (it reads only the id): the change is compatible.
      return enc.encode(JSON.stringify(Object.assign(head(), m.rate ? { t: m.kind, id: m.id, rate: { work_tokens: m.rate.workTokens, decoding: m.rate.decoding, ttft_ms: m.rate.ttftMs, pool: m.rate.pool } } : { t: m.kind, id: m.id })));
    case 'resend':
      return enc.encode(JSON.stringify(Object.assign(head(), { t: 'resend', target: m.target })));
    case 'tenants':
      return enc.encode(JSON.stringify(Object.assign(head(), { t: 'tenants', uses: m.uses, full: m.full })));
    case 'heartbeat':
      return enc.encode(JSON.stringify(Object.assign(head(), { t: 'hb', url: m.url, bookings: m.bookings })));
  }
}

/** Decode one message; throws on anything malformed (the caller counts it as dropped). */
export function decodeSync(data: Uint8Array): SyncMessage {
  const o = asObj(JSON.parse(dec.decode(data)), 'message');
  if (o.v !== 1) throw new Error(`unsupported sync message version ${String(o.v)}`);
  const router = str(o, 'router');
  const incarnation = str(o, 'inc');
  const seq = int(o, 'seq', 1);
  switch (o.t) {
    case 'add':
      return {
        router,
        incarnation,
        seq,
        kind: 'add',
        id: str(o, 'id'),
        instance: str(o, 'instance'),
        dpRank: int(o, 'dp_rank'),
        ns: nsFromWire(wireNs(o.ns)),
        blocks: unpackU64(str(o, 'blocks')),
        prefillTokens: int(o, 'prefill_tokens'),
        speculativeTtlMs: int(o, 'speculative_ttl_ms'),
        ...(o.touched_blocks === undefined ? {} : { touchedBlocks: int(o, 'touched_blocks') }),
      };
    case 'prefill':
      return { router, incarnation, seq, kind: 'prefill', id: str(o, 'id') };
    case 'free':
    {
      // A sample this receiver cannot use is left out; the free itself still applies.
      const rate = o.rate === undefined ? null : rateSample(o.rate);
      return rate === null ? { router, incarnation, seq, kind: 'free', id: str(o, 'id') } : { router, incarnation, seq, kind: 'free', id: str(o, 'id'), rate };
    }
    case 'resend':
      return { router, incarnation, seq, kind: 'resend', target: str(o, 'target') };
    case 'tenants':
      if (typeof o.full !== 'boolean') throw new Error('full must be a boolean');
      return { router, incarnation, seq, kind: 'tenants', uses: tenantUses(o.uses), full: o.full };
    case 'hb':
      return { router, incarnation, seq, kind: 'heartbeat', url: optStr(o, 'url'), bookings: int(o, 'bookings') };
    default:
      throw new Error(`unknown sync message type ${String(o.t)}`);
  }
}

/** The sample of a `free`, or null when it is not one PrefillRates would take. */
function rateSample(v: unknown): RateSample | null {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return null;
  const o = v as Record<string, unknown>;
  const { work_tokens: workTokens, decoding, ttft_ms: ttftMs, pool } = o;
  if (typeof workTokens !== 'number' || typeof decoding !== 'number' || typeof ttftMs !== 'number' || typeof pool !== 'string') return null;
  const sample = { workTokens, decoding, ttftMs, pool };
  return validSample(sample) ? sample : null;
}

/** At most this many tenants per report (a configuration has far fewer). */
const MAX_TENANT_USES = 100_000;

function tenantUses(v: unknown): TenantUse[] {
  if (!Array.isArray(v) || v.length > MAX_TENANT_USES) throw new Error(`uses must be an array of at most ${MAX_TENANT_USES} entries`);
  return v.map((e: unknown) => {
    if (!Array.isArray(e) || e.length !== 3) throw new Error('a tenant use must be [tenant, inflight, admitted]');
    const [tenant, inflight, admitted] = e as unknown[];
    if (typeof tenant !== 'string' || !Number.isSafeInteger(inflight) || !Number.isSafeInteger(admitted) || (inflight as number) < 0 || (admitted as number) < 0) throw new Error('a tenant use must be [string, integer >= 0, integer >= 0]');
    return [tenant, inflight as number, admitted as number] as const;
  });
}
