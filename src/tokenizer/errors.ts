// Errors a chat request can cause. vLLM answers all of them with HTTP 400, so the router can too, or
// route without cache affinity instead (e.g. for multimodal content it cannot tokenize).

export type ChatTemplateErrorKind =
  /** The template called raise_exception(...) or failed while rendering these messages. */
  | 'template'
  /** The request is malformed in a way vLLM rejects (bad kwargs, flags, content parts, tools). */
  | 'invalid_request'
  /** Valid for vLLM, but needs engine-side processing the router cannot reproduce (images, audio). */
  | 'unsupported';

export class ChatTemplateError extends Error {
  override readonly name = 'ChatTemplateError';
  constructor(
    message: string,
    readonly kind: ChatTemplateErrorKind = 'template',
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** Tokenizing stopped once the prompt was certainly over the caller's limit (`maxTokens`). */
export class PromptTooLongError extends Error {
  override readonly name = 'PromptTooLongError';
  constructor(
    /** A lower bound on the prompt's tokens, above `limit`. */
    readonly atLeast: number,
    readonly limit: number,
  ) {
    super(`the prompt has at least ${atLeast} tokens, the limit is ${limit}`);
  }
}
