// Wire-format seam: each --event-format renders the core's events as msgpack-ready values, and
// every format shares vLLM's outer batch `[ts: float64, events, dp_rank]`.
import { Encoder } from '@msgpack/msgpack';
import type { CoreKvEvent } from '../core/kv-events.js';

export type EventFormat = 'map' | 'array' | 'sglang' | 'mooncake';
export const EVENT_FORMATS: readonly EventFormat[] = ['map', 'array', 'sglang', 'mooncake'];

/** Publisher identity the wire needs beyond the events themselves. */
export interface WireContext {
  blockSize: number;
  modelName: string;
  dpRank: number;
  /** LoRA adapter ids (vLLM's deprecated lora_id), by name. */
  loraIds: ReadonlyMap<string, number>;
  /** Mooncake envelope. */
  tenantId: string;
  backendId: string;
}

export interface WireEncoder {
  readonly format: EventFormat;
  /** Render one pass worth of events (order preserved); `nowMs` stamps Mooncake events. */
  render(events: readonly CoreKvEvent[], nowMs: number): unknown[];
}

const encoder = new Encoder({ useBigInt64: true });

/** The float64 `ts`, big-endian (scratch). */
const tsView = new DataView(new ArrayBuffer(8));
const tsBytes = new Uint8Array(tsView.buffer);
/** The encoded dp rank (scratch: at most 9 bytes). */
const rankBytes = new Uint8Array(9);

/**
 * msgpack of `[ts, events, dp_rank]`. `ts` is always written as float64 (0xcb) the way msgspec
 * writes Python floats, even when the value happens to be integral. One allocation per batch (the
 * payload): the encoder's shared buffer is copied out before its next use.
 */
export function encodeBatch(
  tsSeconds: number,
  events: readonly unknown[],
  dpRank: number,
  /** Where the payload goes (bench fleet cuts payloads from recycled chunks); default a new buffer. */
  alloc: (bytes: number) => Uint8Array = (n) => new Uint8Array(n),
): Uint8Array {
  const rank = encoder.encodeSharedRef(dpRank);
  const rankLen = rank.length;
  rankBytes.set(rank);
  const body = encoder.encodeSharedRef(events);
  const out = alloc(10 + body.length + rankLen);
  out[0] = 0x93;
  out[1] = 0xcb;
  tsView.setFloat64(0, tsSeconds, false);
  out.set(tsBytes, 2);
  out.set(body, 10);
  out.set(rankBytes.subarray(0, rankLen), 10 + body.length);
  return out;
}

/** Tokens of consecutive blocks, concatenated (token_ids on the wire). */
export function concatTokens(blocks: readonly { tokens: Uint32Array }[]): number[] {
  const out: number[] = [];
  for (const b of blocks) for (const t of b.tokens) out.push(t);
  return out;
}
