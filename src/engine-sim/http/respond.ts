// Runs a Generation and writes it out: one JSON body, or vLLM-style SSE chunks (optionally with a
// final usage chunk). Endpoint-specific shapes come from a ResponseShape.
import type { ServerResponse } from 'node:http';
import { errorObject, sendError } from './errors.js';
import type { ChoiceDelta, ChoiceState, Generation, Usage } from './generation.js';
import type { SamplingParams } from './params.js';
import { endSse, sendEvent, startSse } from './sse.js';

/** The parts of a response that differ between /v1/completions and /v1/chat/completions. */
export interface ResponseShape {
  object: string;
  chunkObject: string;
  /** Chunks sent before any token (chat: the assistant role). */
  opening(gen: Generation): Record<string, unknown>[];
  delta(d: ChoiceDelta, returnTokenIds: boolean): Record<string, unknown>;
  choice(c: ChoiceState, returnTokenIds: boolean): Record<string, unknown>;
  /** Extra top-level fields of the non-streaming body. */
  extra(gen: Generation, returnTokenIds: boolean): Record<string, unknown>;
}

export interface ResponseMeta {
  created: number;
  model: string;
  returnTokenIds: boolean;
  headers: Record<string, string>;
  /** Top-level fields added to the non-streaming body (a prefill engine's kv_transfer_params). */
  fields?: Record<string, unknown>;
  /** The generation ended (ok: not an error). */
  onFinished?: (ok: boolean) => void;
}

export function respond(
  res: ServerResponse,
  gen: Generation,
  params: SamplingParams,
  shape: ResponseShape,
  meta: ResponseMeta,
): void {
  // The client may have left while the prompt was being tokenized: then queue nothing.
  if (res.socket === null || res.socket.destroyed) return;
  let done = false;
  res.on('close', () => {
    // The client went away before the answer was complete: free the engine's blocks.
    if (!done) gen.abort();
  });
  const head = { id: gen.id, object: shape.chunkObject, created: meta.created, model: meta.model };
  if (params.stream) {
    startSse(res, meta.headers);
    for (const c of shape.opening(gen)) sendEvent(res, { ...head, choices: [c] });
    gen.start(
      (d) => {
        if (d.text === '' && d.finishReason === null && !meta.returnTokenIds) return;
        const chunk: Record<string, unknown> = { ...head, choices: [shape.delta(d, meta.returnTokenIds)] };
        if (params.continuousUsage) chunk.usage = plainUsage(gen.usage());
        sendEvent(res, chunk);
      },
      (err) => {
        done = true;
        meta.onFinished?.(err === null);
        if (err) sendEvent(res, errorObject(err.status, err.message, err.param));
        else if (params.includeUsage) sendEvent(res, { ...head, choices: [], usage: gen.usage() });
        endSse(res);
      },
    );
    return;
  }
  gen.start(
    () => {},
    (err) => {
      done = true;
      meta.onFinished?.(err === null);
      if (err) return sendError(res, err);
      const body = {
        id: gen.id,
        object: shape.object,
        created: meta.created,
        model: meta.model,
        choices: gen.choices.map((c) => shape.choice(c, meta.returnTokenIds)),
        service_tier: null,
        system_fingerprint: null,
        usage: gen.usage(),
        ...shape.extra(gen, meta.returnTokenIds),
        ...meta.fields,
      };
      res.writeHead(200, { 'content-type': 'application/json', ...meta.headers });
      res.end(JSON.stringify(body));
    },
  );
}

function plainUsage(u: Usage): Omit<Usage, 'prompt_tokens_details'> {
  return { prompt_tokens: u.prompt_tokens, total_tokens: u.total_tokens, completion_tokens: u.completion_tokens };
}
