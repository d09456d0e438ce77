// Chat templates and tokenization exactly as the inference engine (vLLM) does them. See README.md.
export type {
  ChatContentPart,
  ChatMessage,
  ChatRequestLike,
  LoadTokenizerOptions,
  PromptTokenizer,
  SegmentCacheStats,
  TokenizerSource,
} from './types.js';
export { loadTokenizer } from './prompt-tokenizer.js';
export { chatSizeFloor, MAX_INPUT_NESTING, type SizeFloor, textSizeFloor } from './size-floor.js';
export { ChatTemplateError, type ChatTemplateErrorKind } from './errors.js';
