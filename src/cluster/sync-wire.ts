// Replica-sync messages (NATS core, one subject, JSON; between `serve --workers` processes, add,
// prefill and free in a binary form, below). Every message names its sender (router id +
// incarnation, new at each process start) and a per-incarnation sequence number, so a receiver
// ignores its own messages, tells a restart from a reorder, and detects lost messages as gaps.
import type { TenantUse } from '../auth/tenant-usage.js';
import type { NamespaceId } from '../indexer/namespace.js';
import { type RateSample, validSample } from '../scheduler/rates.js';
import {
  asObj,
  int,
  nsFromWire,
  nsToWire,
  optStr,
  packU64,
  str,
  u64Bytes,
  u64FromBytes,
  unpackU64,
  wireNs,
} from './codec.js';

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
      /** Prompt tokens before them (cached): the context their prefill attends to (absent: 0). */
      contextTokens?: number;
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
      /** The booking's attempt failed: receivers withdraw the speculative insert they repeated (absent: false). */
      failed?: boolean;
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
        JSON.stringify(
          Object.assign(head(), {
            t: 'add',
            id: m.id,
            instance: m.instance,
            dp_rank: m.dpRank,
            ns: nsToWire(m.ns),
            blocks: packU64(m.blocks),
            prefill_tokens: m.prefillTokens,
            speculative_ttl_ms: m.speculativeTtlMs,
            // Receivers from before these fields ignore them.
            ...(m.touchedBlocks ? { touched_blocks: m.touchedBlocks } : {}),
            ...(m.contextTokens ? { context_tokens: m.contextTokens } : {}),
          }),
        ),
      );
    case 'prefill':
      return enc.encode(JSON.stringify(Object.assign(head(), { t: m.kind, id: m.id })));
    case 'free': {
      // Receivers before these fields ignore them (they read only the id): the change is compatible.
      const o: Record<string, unknown> = Object.assign(head(), { t: m.kind, id: m.id });
      if (m.rate)
        o.rate = {
          work_tokens: m.rate.workTokens,
          attention_work: m.rate.attentionWork ?? 0,
          decoding: m.rate.decoding,
          decoding_context: m.rate.decodingContext ?? 0,
          ttft_ms: m.rate.ttftMs,
          pool: m.rate.pool,
        };
      if (m.failed) o.failed = true;
      return enc.encode(JSON.stringify(o));
    }
    case 'resend':
      return enc.encode(JSON.stringify(Object.assign(head(), { t: 'resend', target: m.target })));
    case 'tenants':
      return enc.encode(JSON.stringify(Object.assign(head(), { t: 'tenants', uses: m.uses, full: m.full })));
    case 'heartbeat':
      return enc.encode(JSON.stringify(Object.assign(head(), { t: 'hb', url: m.url, bookings: m.bookings })));
  }
}

/**
 * Most tokens a booking's prefill or context may count: far beyond any context window, and small
 * enough that its attention work (cost.ts) stays finite and exact beside the worker's other
 * bookings (a peer's 1e308 made the worker's attention sum Infinity, then NaN once freed).
 */
const MAX_TOKENS = 2 ** 32;

function tokenCount(v: number, what: string): number {
  if (v > MAX_TOKENS) throw new Error(`${what} must be at most ${MAX_TOKENS}`);
  return v;
}

/** Decode one message, JSON or binary; throws on anything malformed (the caller counts it as dropped). */
export function decodeSync(data: Uint8Array): SyncMessage {
  if (data[0] === BINARY_MAGIC) return decodeSyncBinary(data);
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
        prefillTokens: tokenCount(int(o, 'prefill_tokens'), 'prefill_tokens'),
        speculativeTtlMs: int(o, 'speculative_ttl_ms'),
        ...(o.touched_blocks === undefined ? {} : { touchedBlocks: int(o, 'touched_blocks') }),
        ...(o.context_tokens === undefined
          ? {}
          : { contextTokens: tokenCount(int(o, 'context_tokens'), 'context_tokens') }),
      };
    case 'prefill':
      return { router, incarnation, seq, kind: 'prefill', id: str(o, 'id') };
    case 'free': {
      // A sample this receiver cannot use is left out; the free itself still applies.
      const rate = o.rate === undefined ? null : rateSample(o.rate);
      if (o.failed !== undefined && typeof o.failed !== 'boolean') throw new Error('failed must be a boolean');
      return freeMessage(router, incarnation, seq, str(o, 'id'), rate, o.failed === true);
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
  // From a sender before the context terms: 0 (its sample still teaches the flat terms).
  const { attention_work: attentionWork = 0, decoding_context: decodingContext = 0 } = o;
  if (
    typeof workTokens !== 'number' ||
    typeof decoding !== 'number' ||
    typeof ttftMs !== 'number' ||
    typeof pool !== 'string' ||
    typeof attentionWork !== 'number' ||
    typeof decodingContext !== 'number'
  )
    return null;
  return contextSample({ workTokens, attentionWork, decoding, decodingContext, ttftMs, pool });
}

/** A decoded sample PrefillRates takes, or null; its context terms present only when not 0 (as sent before them). */
function contextSample(s: Required<RateSample>): RateSample | null {
  if (!validSample(s)) return null;
  const { attentionWork, decodingContext, ...flat } = s;
  const out: RateSample = flat;
  if (attentionWork > 0) out.attentionWork = attentionWork;
  if (decodingContext > 0) out.decodingContext = decodingContext;
  return out;
}

/** At most this many tenants per report (a configuration has far fewer). */
const MAX_TENANT_USES = 100_000;

function tenantUses(v: unknown): TenantUse[] {
  if (!Array.isArray(v) || v.length > MAX_TENANT_USES)
    throw new Error(`uses must be an array of at most ${MAX_TENANT_USES} entries`);
  return v.map((e: unknown) => {
    if (!Array.isArray(e) || e.length !== 3) throw new Error('a tenant use must be [tenant, inflight, admitted]');
    const [tenant, inflight, admitted] = e as unknown[];
    if (
      typeof tenant !== 'string' ||
      !Number.isSafeInteger(inflight) ||
      !Number.isSafeInteger(admitted) ||
      (inflight as number) < 0 ||
      (admitted as number) < 0
    )
      throw new Error('a tenant use must be [string, integer >= 0, integer >= 0]');
    return [tenant, inflight as number, admitted as number] as const;
  });
}

/** A decoded free, keys present only when set (as senders before `failed` wrote them). */
function freeMessage(
  router: string,
  incarnation: string,
  seq: number,
  id: string,
  rate: RateSample | null,
  failed: boolean,
): SyncMessage {
  const m: SyncMessage = { router, incarnation, seq, kind: 'free', id };
  if (rate) m.rate = rate;
  if (failed) m.failed = true;
  return m;
}

// A binary form of the three messages every request sends (add, prefill, free), for links whose
// every reader knows it (the `serve --workers` processes say so to their primary); NATS replicas
// keep JSON, which replicas of any version read. `decodeSync` takes either: a binary message starts
// with BINARY_MAGIC, a JSON one with '{'. Measured in the router under load (docs/profile.md, round
// nine, "`--workers`: what the second process costs"): a request's three messages cost 14-17 µs to
// encode and 8.5-12 µs to decode in JSON, 6.7-9 and 4-8 µs in this form; in a loop 7-9 and 5-7 µs
// against 2.7-3.3 and 2.6-3.3 µs.
// Little-endian: the sender's kind, then router, incarnation (u16 length + UTF-8), seq (f64), id;
// an add: instance, dp rank, the namespace (model, block size, LoRA and salt with 0xffff for null,
// tenant), prefill tokens, speculative TTL, touched blocks, context tokens (f64 each; 0 touched =
// none), the block count (u32) and the blocks (u64 each); a free: a flags byte (1: the rate sample
// follows, as work tokens, attention work, decoding, decoding context, TTFT as f64, pool; 2: the
// attempt failed), then the sample if flagged. Both ends of a binary link run the same build.

const BINARY_MAGIC = 0xb2;
/** A free's flags byte: a rate sample follows; the attempt failed. */
const FREE_RATE = 1;
const FREE_FAILED = 2;
const KIND_CODE = { add: 1, prefill: 2, free: 3 } as const;
const NULL_STR = 0xffff;

/** The kinds `encodeSyncBinary` writes. */
export const isBinaryKind = (kind: SyncBody['kind']): kind is keyof typeof KIND_CODE =>
  kind === 'add' || kind === 'prefill' || kind === 'free';
type BinaryMessage = Extract<SyncMessage, { kind: keyof typeof KIND_CODE }>;
const isBinaryMessage = (m: SyncMessage): m is BinaryMessage => isBinaryKind(m.kind);

class Writer {
  private buf = Buffer.allocUnsafe(256);
  at = 0;

  private room(n: number): void {
    if (this.at + n <= this.buf.length) return;
    const next = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.at + n));
    this.buf.copy(next, 0, 0, this.at);
    this.buf = next;
  }

  u8(v: number): void {
    this.room(1);
    this.buf[this.at++] = v;
  }

  u32(v: number): void {
    this.room(4);
    this.buf.writeUInt32LE(v, this.at);
    this.at += 4;
  }

  f64(v: number): void {
    this.room(8);
    this.buf.writeDoubleLE(v, this.at);
    this.at += 8;
  }

  str(v: string | null): void {
    if (v === null) {
      this.room(2);
      this.buf.writeUInt16LE(NULL_STR, this.at);
      this.at += 2;
      return;
    }
    const n = Buffer.byteLength(v);
    if (n >= NULL_STR) throw new TooLong();
    this.room(2 + n);
    this.buf.writeUInt16LE(n, this.at);
    this.buf.write(v, this.at + 2, 'utf8');
    this.at += 2 + n;
  }

  u64s(v: BigUint64Array): void {
    this.room(v.byteLength);
    this.buf.set(u64Bytes(v), this.at);
    this.at += v.byteLength;
  }

  bytes(): Uint8Array {
    return this.buf.subarray(0, this.at);
  }
}

/** A string of 65,535 UTF-8 bytes or more (a request's `cache_salt` can be one): the message goes as JSON. */
class TooLong extends Error {}

/**
 * Encode an add, prefill or free in the binary form (other kinds: encodeSync); null when a string
 * does not fit its 16-bit length, and the caller sends the JSON form, which any reader takes.
 */
export function encodeSyncBinary(m: SyncMessage): Uint8Array | null {
  if (!isBinaryMessage(m)) throw new Error(`${m.kind} has no binary form`);
  try {
    return writeBinary(m);
  } catch (err) {
    if (err instanceof TooLong) return null;
    throw err;
  }
}

function writeBinary(m: BinaryMessage): Uint8Array {
  const w = new Writer();
  w.u8(BINARY_MAGIC);
  w.u8(KIND_CODE[m.kind]);
  w.str(m.router);
  w.str(m.incarnation);
  w.f64(m.seq);
  w.str(m.id);
  if (m.kind === 'add') {
    w.str(m.instance);
    w.f64(m.dpRank);
    w.str(m.ns.model);
    w.f64(m.ns.blockSize);
    w.str(m.ns.loraName);
    w.str(m.ns.salt);
    w.str(m.ns.tenant);
    w.f64(m.prefillTokens);
    w.f64(m.speculativeTtlMs);
    w.f64(m.touchedBlocks ?? 0);
    w.f64(m.contextTokens ?? 0);
    w.u32(m.blocks.length);
    w.u64s(m.blocks);
  } else if (m.kind === 'free') {
    w.u8((m.rate ? FREE_RATE : 0) | (m.failed ? FREE_FAILED : 0));
    if (m.rate) {
      w.f64(m.rate.workTokens);
      w.f64(m.rate.attentionWork ?? 0);
      w.f64(m.rate.decoding);
      w.f64(m.rate.decodingContext ?? 0);
      w.f64(m.rate.ttftMs);
      w.str(m.rate.pool);
    }
  }
  return w.bytes();
}

class Reader {
  private at = 2;
  private readonly view: DataView;
  /** A Buffer over the same bytes: its toString is far quicker than a TextDecoder on short strings. */
  private readonly b: Buffer;

  constructor(data: Uint8Array) {
    this.b = Buffer.isBuffer(data) ? data : Buffer.from(data.buffer, data.byteOffset, data.byteLength);
    this.view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  }

  private need(n: number, what: string): void {
    if (this.at + n > this.b.byteLength) throw new Error(`binary sync message cut in ${what}`);
  }

  u8(what: string): number {
    this.need(1, what);
    return this.b[this.at++];
  }

  u32(what: string): number {
    this.need(4, what);
    const v = this.view.getUint32(this.at, true);
    this.at += 4;
    return v;
  }

  /** An integer >= min, as the JSON decoder's `int` takes it. */
  int(what: string, min = 0): number {
    this.need(8, what);
    const v = this.view.getFloat64(this.at, true);
    this.at += 8;
    if (!Number.isInteger(v) || v < min) throw new Error(`${what} must be an integer >= ${min}`);
    return v;
  }

  num(what: string): number {
    this.need(8, what);
    const v = this.view.getFloat64(this.at, true);
    this.at += 8;
    return v;
  }

  str(what: string): string {
    const v = this.optStr(what);
    if (v === null) throw new Error(`${what} must be a string`);
    return v;
  }

  optStr(what: string): string | null {
    this.need(2, what);
    const n = this.view.getUint16(this.at, true);
    this.at += 2;
    if (n === NULL_STR) return null;
    this.need(n, what);
    const v = this.b.toString('utf8', this.at, this.at + n);
    this.at += n;
    return v;
  }

  u64s(count: number, what: string): BigUint64Array {
    this.need(count * 8, what);
    const out = u64FromBytes(this.b.subarray(this.at, this.at + count * 8));
    this.at += count * 8;
    return out;
  }

  end(): void {
    if (this.at !== this.b.byteLength)
      throw new Error(`binary sync message has ${this.b.byteLength - this.at} bytes past its end`);
  }
}

/** The binary form's decoder (`decodeSync` picks it by the first byte); throws on anything malformed. */
function decodeSyncBinary(data: Uint8Array): SyncMessage {
  if (data.byteLength < 2) throw new Error('binary sync message cut in its header');
  const r = new Reader(data);
  const code = data[1];
  const router = r.str('router');
  const incarnation = r.str('inc');
  const seq = r.int('seq', 1);
  const id = r.str('id');
  let m: SyncMessage;
  if (code === KIND_CODE.add) {
    const instance = r.str('instance');
    const dpRank = r.int('dp_rank');
    const ns = {
      model: r.str('ns.model'),
      blockSize: r.int('ns.block_size', 1),
      loraName: r.optStr('ns.lora_name'),
      salt: r.optStr('ns.salt'),
      tenant: r.str('ns.tenant'),
    };
    const prefillTokens = tokenCount(r.int('prefill_tokens'), 'prefill_tokens');
    const speculativeTtlMs = r.int('speculative_ttl_ms');
    const touchedBlocks = r.int('touched_blocks');
    const contextTokens = tokenCount(r.int('context_tokens'), 'context_tokens');
    const blocks = r.u64s(r.u32('blocks'), 'blocks');
    // Keys present only when set, as the JSON decoder leaves them.
    const add: SyncMessage = {
      router,
      incarnation,
      seq,
      kind: 'add',
      id,
      instance,
      dpRank,
      ns,
      blocks,
      prefillTokens,
      speculativeTtlMs,
    };
    if (touchedBlocks > 0) add.touchedBlocks = touchedBlocks;
    if (contextTokens > 0) add.contextTokens = contextTokens;
    m = add;
  } else if (code === KIND_CODE.prefill) {
    m = { router, incarnation, seq, kind: 'prefill', id };
  } else if (code === KIND_CODE.free) {
    const flags = r.u8('flags');
    if ((flags & ~(FREE_RATE | FREE_FAILED)) !== 0) throw new Error(`unknown free flags ${flags}`);
    let rate: RateSample | null = null;
    if (flags & FREE_RATE) {
      const sample = {
        workTokens: r.num('rate.work_tokens'),
        attentionWork: r.num('rate.attention_work'),
        decoding: r.num('rate.decoding'),
        decodingContext: r.num('rate.decoding_context'),
        ttftMs: r.num('rate.ttft_ms'),
        pool: r.str('rate.pool'),
      };
      // As in JSON: a sample this receiver cannot use is left out; the free itself still applies.
      rate = contextSample(sample);
    }
    m = freeMessage(router, incarnation, seq, id, rate, (flags & FREE_FAILED) !== 0);
  } else throw new Error(`unknown binary sync message kind ${code}`);
  r.end();
  return m;
}
