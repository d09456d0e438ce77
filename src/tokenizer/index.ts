// Chat templates and tokenization exactly as the inference engine (vLLM) does them. See README.md.
export type {
  ChatContentPart,
  ChatMessage,
  ChatRequestLike,
  EncodeOptions,
  LoadTokenizerOptions,
  PromptTokenizer,
  TokenizerStats,
  TokenizerSource,
} from './types.js';
export { loadTokenizer } from './prompt-tokenizer.js';
export { chatSizeFloor, MAX_INPUT_NESTING, type SizeFloor, textSizeFloor } from './size-floor.js';
export { PIECE_CHARS } from './pieces.js';
export { ChatTemplateError, type ChatTemplateErrorKind, PromptTooLongError } from './errors.js';
