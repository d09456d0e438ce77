// Validation of the request fields both OpenAI endpoints share. Unknown fields are ignored (vLLM
// only warns); present fields of the wrong type are a 400 naming the parameter.
import { HttpError, badRequest } from './errors.js';

export interface SamplingParams {
  /** Model name to echo in responses. */
  model: string;
  loraName: string | null;
  /** null = engine default (bounded by the context left). */
  maxTokens: number | null;
  minTokens: number;
  n: number;
  stop: string[];
  stopTokenIds: number[];
  includeStopStrInOutput: boolean;
  stream: boolean;
  includeUsage: boolean;
  continuousUsage: boolean;
  seed: number | null;
  cacheSalt: string | null;
}

export type Body = Record<string, unknown>;

const MAX_N = 128;

export function optInt(body: Body, key: string, min: number, max = Number.MAX_SAFE_INTEGER): number | null {
  const v = body[key];
  if (v === undefined || v === null) return null;
  if (typeof v !== 'number' || !Number.isInteger(v)) throw badRequest(`${key} must be an integer`, key);
  if (v < min || v > max) throw badRequest(`${key} must be between ${min} and ${max}, got ${v}`, key);
  return v;
}

export function optBool(body: Body, key: string): boolean | null {
  const v = body[key];
  if (v === undefined || v === null) return null;
  if (typeof v !== 'boolean') throw badRequest(`${key} must be a boolean`, key);
  return v;
}

function optNumber(body: Body, key: string): void {
  const v = body[key];
  if (v !== undefined && v !== null && (typeof v !== 'number' || !Number.isFinite(v)))
    throw badRequest(`${key} must be a number`, key);
}

export function parseSampling(body: Body, served: string, loras: readonly string[]): SamplingParams {
  let model = served;
  let loraName: string | null = null;
  if (body.model !== undefined && body.model !== null) {
    if (typeof body.model !== 'string') throw badRequest('model must be a string', 'model');
    if (body.model !== served) {
      if (!loras.includes(body.model)) throw new HttpError(404, `The model \`${body.model}\` does not exist.`, 'model');
      loraName = body.model;
    }
    model = body.model;
  }
  // max_completion_tokens (chat) wins over the deprecated max_tokens, as in vLLM.
  const maxTokens = optInt(body, 'max_completion_tokens', 1) ?? optInt(body, 'max_tokens', 1);
  const minTokens = optInt(body, 'min_tokens', 0) ?? 0;
  if (maxTokens !== null && minTokens > maxTokens)
    throw badRequest(`min_tokens (${minTokens}) must be <= max_tokens (${maxTokens})`, 'min_tokens');
  const n = optInt(body, 'n', 1, MAX_N) ?? 1;

  let stop: string[] = [];
  if (typeof body.stop === 'string') stop = [body.stop];
  else if (Array.isArray(body.stop) && body.stop.every((s) => typeof s === 'string')) stop = body.stop as string[];
  else if (body.stop !== undefined && body.stop !== null)
    throw badRequest('stop must be a string or a list of strings', 'stop');
  stop = stop.filter((s) => s.length > 0);

  let stopTokenIds: number[] = [];
  if (Array.isArray(body.stop_token_ids) && body.stop_token_ids.every((t) => Number.isInteger(t) && (t as number) >= 0))
    stopTokenIds = body.stop_token_ids as number[];
  else if (body.stop_token_ids !== undefined && body.stop_token_ids !== null)
    throw badRequest('stop_token_ids must be a list of non-negative integers', 'stop_token_ids');

  const stream = optBool(body, 'stream') ?? false;
  const so = body.stream_options;
  let includeUsage = false;
  let continuousUsage = false;
  if (so !== undefined && so !== null) {
    if (!stream) throw badRequest('Stream options can only be defined when `stream=True`.', 'stream_options');
    if (typeof so !== 'object' || Array.isArray(so))
      throw badRequest('stream_options must be an object', 'stream_options');
    includeUsage = optBool(so as Body, 'include_usage') ?? false;
    continuousUsage = optBool(so as Body, 'continuous_usage_stats') ?? false;
  }
  for (const k of [
    'temperature',
    'top_p',
    'top_k',
    'min_p',
    'presence_penalty',
    'frequency_penalty',
    'repetition_penalty',
  ])
    optNumber(body, k);
  optBool(body, 'ignore_eos'); // accepted: random output never samples EOS
  const seed = optInt(body, 'seed', Number.MIN_SAFE_INTEGER);
  let cacheSalt: string | null = null;
  if (body.cache_salt !== undefined && body.cache_salt !== null) {
    if (typeof body.cache_salt !== 'string' || body.cache_salt === '')
      throw badRequest('cache_salt must be a non-empty string', 'cache_salt');
    cacheSalt = body.cache_salt;
  }
  return {
    model,
    loraName,
    maxTokens,
    minTokens,
    n,
    stop,
    stopTokenIds,
    includeStopStrInOutput: optBool(body, 'include_stop_str_in_output') ?? false,
    stream,
    includeUsage,
    continuousUsage,
    seed: seed === null ? null : seed | 0,
    cacheSalt,
  };
}
