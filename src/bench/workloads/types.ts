// What a benchmark workload is: requests with arrival times, and the prompt tokens the engines see.

export type CompletionPath = '/v1/completions' | '/v1/chat/completions';

export interface BenchRequest {
  /** Open-loop arrival, ms from the start of the run before --rate-scale. Ignored when `after` is set. */
  atMs: number;
  /** A follow-up turn: sent `thinkMs` (before --rate-scale) after request `index` has completed. */
  after: { index: number; thinkMs: number } | null;
  path: CompletionPath;
  /** JSON body without `model`, `stream` and `max_tokens` (built on demand: prompts can be large). */
  body(): Record<string, unknown>;
  maxTokens: number;
  /** Sent as the router's session header (used by the `session` policy). */
  sessionKey: string | null;
  /** The tenant (request class) it belongs to, for per-class figures (two-tenant; absent: one class). */
  tenant?: string;
}

export interface Workload {
  name: string;
  /** One line for the report: where the requests come from and their shape. */
  description: string;
  requests: readonly BenchRequest[];
  /** Tokenizer the engines need: 'none' when every prompt is token ids. */
  engineTokenizer: string;
  /** Prompt token ids exactly as the engine will see them (oracle and working set). */
  promptTokens(i: number): Promise<Uint32Array>;
  /**
   * The same tokens, computed on the spot, for workloads whose prompts are token ids made here
   * (no tokenizer): `bench fleet` then never holds every prompt in memory at once.
   */
  tokensNow?(i: number): Uint32Array;
  close(): Promise<void>;
}
