// One OpenAI request = prompts x n engine requests ("choices"). Collects their tokens into text,
// applies stop strings (with hold-back so a stop string never streams), aborts what is left when
// the client goes away, and totals usage.
import type { TokenOutput } from '../core/engine-core.js';
import type { EngineBackend } from './backend.js';
import { HttpError, badRequest } from './errors.js';
import type { SamplingParams } from './params.js';

export type FinishReason = 'length' | 'stop' | 'abort';

export interface ChoiceDelta {
  index: number;
  text: string;
  tokenIds: number[];
  finishReason: FinishReason | null;
  stopReason: number | string | null;
}

export interface ChoiceState {
  readonly index: number;
  readonly promptIndex: number;
  readonly id: string;
  text: string;
  /** Characters of `text` already handed out as deltas. */
  emitted: number;
  tokenIds: number[];
  finishReason: FinishReason | null;
  stopReason: number | string | null;
  cachedTokens: number;
}

export interface Usage {
  prompt_tokens: number;
  total_tokens: number;
  completion_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
}

/** max_tokens for a prompt: the request's, else the engine default bounded by the context left. */
export function maxTokensFor(backend: EngineBackend, promptLen: number, requested: number | null): number {
  const limit = backend.maxModelLen;
  if (promptLen >= limit)
    throw badRequest(
      `This model's maximum context length is ${limit} tokens. However, your request has ${promptLen} input tokens. Please reduce the length of the input messages.`,
    );
  if (requested === null) return Math.min(backend.defaultMaxTokens, limit - promptLen);
  if (promptLen + requested > limit)
    throw badRequest(
      `This model's maximum context length is ${limit} tokens. However, you requested ${promptLen + requested} tokens (${promptLen} in the messages, ${requested} in the completion). Please reduce the length of the messages or completion.`,
      'max_tokens',
    );
  return requested;
}

export class Generation {
  readonly choices: ChoiceState[] = [];
  private remaining: number;
  private finished = false;
  private readonly holdBack: number;
  private readonly maxTokens: number[];
  /** The prompts' KV arrives from a prefill engine (disaggregated decode): cached on arrival. */
  imported = false;

  constructor(
    private readonly backend: EngineBackend,
    readonly id: string,
    readonly prompts: readonly Uint32Array[],
    private readonly params: SamplingParams,
    private readonly dpRank: number | null,
  ) {
    prompts.forEach((_, p) => {
      for (let j = 0; j < params.n; j++) {
        const index = p * params.n + j;
        this.choices.push({
          index,
          promptIndex: p,
          id: `${id}-${index}`,
          text: '',
          emitted: 0,
          tokenIds: [],
          finishReason: null,
          stopReason: null,
          cachedTokens: 0,
        });
      }
    });
    this.remaining = this.choices.length;
    // Validate every prompt before anything is queued (throws a 400).
    this.maxTokens = prompts.map((p) => maxTokensFor(backend, p.length, params.maxTokens));
    this.holdBack = params.stop.length > 0 ? Math.max(...params.stop.map((s) => s.length)) - 1 : 0;
  }

  /** Submit every choice. `onDelta` sees each new piece; `onDone` fires once (error on engine failure). */
  start(onDelta: (d: ChoiceDelta) => void, onDone: (err: HttpError | null) => void): void {
    const done = (err: HttpError | null): void => {
      if (this.finished) return;
      this.finished = true;
      if (err) this.abort();
      onDone(err);
    };
    for (const c of this.choices) {
      const prompt = this.prompts[c.promptIndex];
      const maxTokens = this.maxTokens[c.promptIndex];
      this.backend.submit(
        {
          id: c.id,
          prompt,
          maxTokens,
          minTokens: this.params.minTokens,
          stopTokenIds: this.params.stopTokenIds,
          loraName: this.params.loraName,
          cacheSalt: this.params.cacheSalt,
          seed: this.params.seed === null ? null : this.params.seed + c.index,
          imported: this.imported,
        },
        {
          onToken: (t) => {
            if (this.finished || c.finishReason) return;
            onDelta(this.onToken(c, t));
            if (c.finishReason && --this.remaining === 0) done(null);
          },
          onError: (message) => done(new HttpError(503, message)),
        },
        this.dpRank,
      );
    }
  }

  /** Stop every unfinished choice (client disconnected). */
  abort(): void {
    for (const c of this.choices) {
      if (c.finishReason) continue;
      c.finishReason = 'abort';
      this.backend.abort(c.id);
    }
    this.finished = true;
  }

  usage(): Usage {
    let prompt = 0;
    let cached = 0;
    this.prompts.forEach((p, i) => {
      prompt += p.length;
      cached += this.choices[i * this.params.n].cachedTokens;
    });
    const completion = this.choices.reduce((s, c) => s + c.tokenIds.length, 0);
    return {
      prompt_tokens: prompt,
      total_tokens: prompt + completion,
      completion_tokens: completion,
      prompt_tokens_details: { cached_tokens: cached },
    };
  }

  private onToken(c: ChoiceState, t: TokenOutput): ChoiceDelta {
    c.tokenIds.push(t.token);
    if (t.index === 0) c.cachedTokens = t.cachedTokens;
    const stopToken = t.finishReason === 'stop';
    // A stop token's text is left out unless include_stop_str_in_output (vLLM v1 detokenizer).
    if (!stopToken || this.params.includeStopStrInOutput) c.text += this.backend.codec.tokenText(t.token);
    if (t.finishReason) {
      c.finishReason = t.finishReason;
      c.stopReason = t.stopReason;
    }
    if (!c.finishReason && this.params.stop.length > 0) this.checkStopStrings(c);
    const end = c.finishReason ? c.text.length : Math.max(c.emitted, c.text.length - this.holdBack);
    const text = c.text.slice(c.emitted, end);
    c.emitted = end;
    return { index: c.index, text, tokenIds: [t.token], finishReason: c.finishReason, stopReason: c.stopReason };
  }

  private checkStopStrings(c: ChoiceState): void {
    let at = -1;
    let hit = '';
    const from = Math.max(0, c.emitted - this.holdBack);
    for (const s of this.params.stop) {
      const k = c.text.indexOf(s, from);
      if (k >= 0 && (at < 0 || k < at)) {
        at = k;
        hit = s;
      }
    }
    if (at < 0) return;
    c.text = c.text.slice(0, this.params.includeStopStrInOutput ? at + hit.length : at);
    c.finishReason = 'stop';
    c.stopReason = hit;
    this.backend.abort(c.id);
  }
}
