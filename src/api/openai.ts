// OpenAI request parsing for the proxy path: just what routing needs (model, prompt, stream, user);
// the body itself is forwarded untouched.
import type { ChatMessage, ChatRequestLike } from '../tokenizer/index.js';
import { TokenIds } from './token-body.js';
import { routerOwnedField } from '../disagg/protocol.js';

export type CompletionKind = 'chat' | 'completion';

/** The OpenAI completion routes, once: the hot path, the gateway picker and error shapes read them. */
export const COMPLETION_PATH: Readonly<Record<CompletionKind, string>> = {
  chat: '/v1/chat/completions',
  completion: '/v1/completions',
};

/** The completion kind a path serves, or undefined for any other path. */
export function completionKindOf(path: string): CompletionKind | undefined {
  if (path === COMPLETION_PATH.chat) return 'chat';
  if (path === COMPLETION_PATH.completion) return 'completion';
  return undefined;
}

export class OpenAIError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly type: string = 'invalid_request_error',
    readonly param: string | null = null,
    readonly code: string | null = null,
  ) {
    super(message);
  }

  body(): { error: { message: string; type: string; param: string | null; code: string | number | null } } {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code ?? this.status } };
  }
}

export type PromptSpec =
  | { kind: 'chat'; chat: ChatRequestLike }
  | { kind: 'text'; text: string }
  | { kind: 'tokens'; tokens: Uint32Array };

export interface ParsedCompletion {
  model: string;
  stream: boolean;
  user: string | null;
  prompt: PromptSpec;
  /** vLLM's `cache_salt` (separates hash spaces per customer). */
  cacheSalt: string | null;
  body: Record<string, unknown>;
}

const bad = (message: string, param: string) => new OpenAIError(400, message, 'invalid_request_error', param);

/**
 * Refuse a body that carries a field the router owns (src/disagg/protocol.ts): refused rather than
 * dropped, so that a client (or gateway) that means to steer a KV transfer learns it cannot, and one
 * path (the decision API) that forwards nothing itself holds the same rule as those that do.
 */
export function refuseRouterOwned(body: Record<string, unknown>): void {
  const f = routerOwnedField(body);
  if (f !== null) {
    throw new OpenAIError(
      400,
      `\`${f}\` is set by the router (it steers the KV transfer of disaggregated serving), never by a client: remove it`,
      'invalid_request_error',
      f,
      'router_owned_field',
    );
  }
}

function asTokens(v: unknown[], param: string): Uint32Array {
  const out = new Uint32Array(v.length);
  for (let i = 0; i < v.length; i++) {
    const t = v[i];
    if (typeof t !== 'number' || !Number.isInteger(t) || t < 0 || t > 0xffffffff)
      throw bad(`${param}[${i}] must be a token id (non-negative integer)`, param);
    out[i] = t;
  }
  return out;
}

export function parseCompletion(kind: CompletionKind, raw: unknown, maxMessages = 100_000): ParsedCompletion {
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw))
    throw bad('request body must be a JSON object', 'body');
  const body = raw as Record<string, unknown>;
  const model = body.model;
  if (typeof model !== 'string' || model === '') throw bad('`model` is required and must be a string', 'model');
  refuseRouterOwned(body);
  if (body.stream !== undefined && body.stream !== null && typeof body.stream !== 'boolean')
    throw bad('`stream` must be a boolean', 'stream');
  const user = typeof body.user === 'string' ? body.user : null;
  const cacheSalt = typeof body.cache_salt === 'string' && body.cache_salt !== '' ? body.cache_salt : null;
  let prompt: PromptSpec;
  if (kind === 'chat') {
    const messages = body.messages;
    if (!Array.isArray(messages) || messages.length === 0)
      throw bad('`messages` must be a non-empty array', 'messages');
    if (messages.length > maxMessages)
      throw bad(`\`messages\` holds ${messages.length} messages, the limit is ${maxMessages}`, 'messages');
    messages.forEach((m, i) => {
      if (m === null || typeof m !== 'object' || Array.isArray(m))
        throw bad(`messages[${i}] must be an object`, 'messages');
      if (typeof (m as { role?: unknown }).role !== 'string')
        throw bad(`messages[${i}].role must be a string`, 'messages');
    });
    if (body.tools !== undefined && body.tools !== null && !Array.isArray(body.tools))
      throw bad('`tools` must be an array', 'tools');
    const kwargs = body.chat_template_kwargs;
    if (kwargs !== undefined && kwargs !== null && (typeof kwargs !== 'object' || Array.isArray(kwargs)))
      throw bad('`chat_template_kwargs` must be an object', 'chat_template_kwargs');
    prompt = {
      kind: 'chat',
      chat: {
        messages: messages as ChatMessage[],
        tools: (body.tools as unknown[] | undefined) ?? undefined,
        add_generation_prompt: typeof body.add_generation_prompt === 'boolean' ? body.add_generation_prompt : undefined,
        continue_final_message:
          typeof body.continue_final_message === 'boolean' ? body.continue_final_message : undefined,
        chat_template_kwargs: (kwargs as Record<string, unknown> | undefined) ?? undefined,
      },
    };
  } else {
    const p = body.prompt;
    if (typeof p === 'string') prompt = { kind: 'text', text: p };
    // Read from the bytes already (parseOpenAIBody): a plain view of the same ids, no copy.
    else if (p instanceof TokenIds)
      prompt = { kind: 'tokens', tokens: new Uint32Array(p.buffer, p.byteOffset, p.length) };
    else if (Array.isArray(p) && p.length > 0) {
      // A batch of prompts routes by its first one; token-id prompts are used as they are.
      const first = p[0];
      if (typeof first === 'number') prompt = { kind: 'tokens', tokens: asTokens(p, 'prompt') };
      else if (typeof first === 'string') prompt = { kind: 'text', text: first };
      else if (Array.isArray(first)) prompt = { kind: 'tokens', tokens: asTokens(first, 'prompt[0]') };
      else throw bad('`prompt` must be a string, an array of strings, or token ids', 'prompt');
    } else throw bad('`prompt` is required: a string, an array of strings, or token ids', 'prompt');
  }
  return { model, stream: body.stream === true, user, prompt, cacheSalt, body };
}
