// POST /v1/chat/completions: messages go through the model's chat template (shared tokenizer
// module, same as the router); vLLM's response and chunk shapes.
import type { ServerResponse } from 'node:http';
import { randomUUID } from 'node:crypto';
import type { ChatMessage } from '../../tokenizer/index.js';
import type { EngineBackend } from './backend.js';
import { badRequest } from './errors.js';
import { Generation } from './generation.js';
import { optBool, parseSampling, type Body } from './params.js';
import { disaggregate } from './disagg.js';
import { respond, type ResponseShape } from './respond.js';
import { encodeOrReject } from './tokenize.js';

export const CHAT_SHAPE: ResponseShape = {
  object: 'chat.completion',
  chunkObject: 'chat.completion.chunk',
  opening: (gen) =>
    gen.choices.map((c) => ({
      index: c.index,
      delta: { role: 'assistant', content: '' },
      logprobs: null,
      finish_reason: null,
    })),
  delta: (d, ids) => ({
    index: d.index,
    delta: d.text === '' && d.finishReason !== null ? {} : { content: d.text },
    logprobs: null,
    finish_reason: d.finishReason,
    ...(d.finishReason !== null ? { stop_reason: d.stopReason } : {}),
    ...(ids ? { token_ids: d.tokenIds } : {}),
  }),
  choice: (c, ids) => ({
    index: c.index,
    message: { role: 'assistant', content: c.text, refusal: null, tool_calls: [], reasoning_content: null },
    logprobs: null,
    finish_reason: c.finishReason,
    stop_reason: c.stopReason,
    ...(ids ? { token_ids: c.tokenIds } : {}),
  }),
  extra: (gen, ids) => ({ prompt_logprobs: null, ...(ids ? { prompt_token_ids: Array.from(gen.prompts[0]) } : {}) }),
};

function checkMessages(v: unknown): ChatMessage[] {
  if (!Array.isArray(v) || v.length === 0) throw badRequest('messages must be a non-empty list', 'messages');
  for (const m of v) {
    if (m === null || typeof m !== 'object' || Array.isArray(m) || typeof (m as Body).role !== 'string')
      throw badRequest('each message must be an object with a string role', 'messages');
  }
  return v as ChatMessage[];
}

export async function handleChat(
  backend: EngineBackend,
  body: Body,
  res: ServerResponse,
  headers: Record<string, string>,
  dpRank: number | null,
): Promise<void> {
  const params = parseSampling(body, backend.model, backend.loraNames);
  const messages = checkMessages(body.messages);
  if (body.tools !== undefined && body.tools !== null && !Array.isArray(body.tools))
    throw badRequest('tools must be a list', 'tools');
  const kwargs = body.chat_template_kwargs;
  if (kwargs !== undefined && kwargs !== null && (typeof kwargs !== 'object' || Array.isArray(kwargs)))
    throw badRequest('chat_template_kwargs must be an object', 'chat_template_kwargs');
  const returnTokenIds = optBool(body, 'return_token_ids') ?? false;
  const prompt = await encodeOrReject(() =>
    backend.codec.encodeChat({
      messages,
      tools: (body.tools as unknown[] | undefined) ?? undefined,
      add_generation_prompt: optBool(body, 'add_generation_prompt') ?? true,
      continue_final_message: optBool(body, 'continue_final_message') ?? false,
      chat_template_kwargs: (kwargs as Record<string, unknown> | undefined) ?? undefined,
    }),
  );
  if (prompt.length === 0) throw badRequest('The prompt cannot be empty.', 'messages');
  const id = `chatcmpl-${randomUUID().replaceAll('-', '')}`;
  const pd = await disaggregate(backend, body, id, [prompt]);
  if (pd.maxTokens !== undefined) params.maxTokens = pd.maxTokens;
  const gen = new Generation(backend, id, [prompt], params, dpRank);
  gen.imported = pd.imported;
  respond(res, gen, params, CHAT_SHAPE, {
    created: Math.floor(Date.now() / 1000),
    model: params.model,
    returnTokenIds,
    headers,
    fields: pd.fields,
    onFinished: pd.onFinished,
  });
}
