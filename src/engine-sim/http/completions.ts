// POST /v1/completions: text or token-id prompts (one or a list), vLLM's response and chunk shapes.
import type { ServerResponse } from 'node:http';
import { randomUUID } from 'node:crypto';
import type { EngineBackend } from './backend.js';
import { badRequest } from './errors.js';
import { Generation } from './generation.js';
import { optBool, parseSampling, type Body } from './params.js';
import { disaggregate } from './disagg.js';
import { respond, type ResponseShape } from './respond.js';
import { encodeOrReject } from './tokenize.js';

const isTokenList = (v: unknown): v is number[] =>
  Array.isArray(v) &&
  v.length > 0 &&
  v.every((t) => typeof t === 'number' && Number.isInteger(t) && t >= 0 && t <= 0xffffffff);

/** The prompt field as a list of prompts, each text or token ids. */
function promptList(prompt: unknown): (string | number[])[] {
  if (typeof prompt === 'string') return [prompt];
  if (isTokenList(prompt)) return [prompt];
  if (Array.isArray(prompt) && prompt.length > 0) {
    if (prompt.every((p) => typeof p === 'string')) return prompt as string[];
    if (prompt.every(isTokenList)) return prompt as number[][];
  }
  throw badRequest(
    'prompt must be a non-empty string, list of strings, list of token ids or list of token id lists',
    'prompt',
  );
}

export const COMPLETION_SHAPE: ResponseShape = {
  object: 'text_completion',
  chunkObject: 'text_completion',
  opening: () => [],
  delta: (d, ids) => ({
    index: d.index,
    text: d.text,
    logprobs: null,
    finish_reason: d.finishReason,
    stop_reason: d.stopReason,
    ...(ids ? { token_ids: d.tokenIds } : {}),
  }),
  choice: (c, ids) => ({
    index: c.index,
    text: c.text,
    logprobs: null,
    finish_reason: c.finishReason,
    stop_reason: c.stopReason,
    prompt_logprobs: null,
    ...(ids ? { token_ids: c.tokenIds } : {}),
  }),
  extra: () => ({}),
};

export async function handleCompletions(
  backend: EngineBackend,
  body: Body,
  res: ServerResponse,
  headers: Record<string, string>,
  dpRank: number | null,
): Promise<void> {
  const params = parseSampling(body, backend.model, backend.loraNames);
  if (body.prompt === undefined || body.prompt === null) throw badRequest('prompt is required', 'prompt');
  if (body.prompt_embeds !== undefined && body.prompt_embeds !== null)
    throw badRequest('prompt_embeds is not supported by engine-sim', 'prompt_embeds');
  const returnTokenIds = optBool(body, 'return_token_ids') ?? false;
  const prompts: Uint32Array[] = [];
  for (const p of promptList(body.prompt)) {
    const ids = typeof p === 'string' ? await encodeOrReject(() => backend.codec.encodeText(p)) : Uint32Array.from(p);
    if (ids.length === 0) throw badRequest('The prompt cannot be empty.', 'prompt');
    prompts.push(ids);
  }
  const id = `cmpl-${randomUUID().replaceAll('-', '')}`;
  const pd = await disaggregate(backend, body, id, prompts);
  if (pd.maxTokens !== undefined) params.maxTokens = pd.maxTokens;
  const gen = new Generation(backend, id, prompts, params, dpRank);
  gen.imported = pd.imported;
  respond(res, gen, params, COMPLETION_SHAPE, {
    created: Math.floor(Date.now() / 1000),
    model: params.model,
    returnTokenIds,
    headers,
    fields: pd.fields,
    onFinished: pd.onFinished,
  });
}
