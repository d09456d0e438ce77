// What the HTTP adapter needs from an engine (implemented by engine.ts over its DP ranks).
import type { SimRequestSpec } from '../core/request.js';
import type { RequestSink } from '../runtime/rank-runner.js';
import type { TextCodec } from '../text/codec.js';
import type { EngineSimRole, TransferBoard } from './disagg.js';

export interface EngineBackend {
  readonly engineId: string;
  readonly model: string;
  readonly loraNames: readonly string[];
  readonly maxModelLen: number;
  readonly defaultMaxTokens: number;
  readonly codec: TextCodec;
  /** Unix seconds, for `created` fields of /v1/models. */
  readonly createdAt: number;
  /** Queue a request on `dpRank`, or on the least loaded rank when null. */
  submit(spec: SimRequestSpec, sink: RequestSink, dpRank: number | null): void;
  abort(id: string): void;
  readonly dpSize: number;
  readonly blockSize: number;
  /** Disaggregated serving: role, handoffs, where remote engines reach this one, transfer timing. */
  readonly disagg: {
    role: EngineSimRole;
    board: TransferBoard;
    host: string;
    port: number;
    /** Modelled wall time to receive a prompt's KV (ms). */
    transferMs(promptTokens: number): number;
    /** Longest wait for a prefill engine's handoff. */
    transferTimeoutMs: number;
  };
  resetPrefixCache(): void;
  /** JSON for GET /debug/cache. */
  debugCache(detail: boolean): unknown;
  metrics(): Promise<{ contentType: string; body: string }>;
}
