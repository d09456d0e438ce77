// What a prompt costs at least, without tokenizing it: refusing a huge prompt must not cost the
// seconds and the memory of tokenizing it first. Pure.
//
// `words` is a proven lower bound on the token count for byte-level BPE tokenizers with a
// whitespace-respecting pre-tokenizer (GPT-2/4, Llama 3, Qwen, Mistral's tekken): their split regex
// never puts non-space characters on both sides of a whitespace character into one piece, and a
// token never spans two pieces, so every maximal run of non-whitespace is at least one token.
import type { ChatMessage, ChatRequestLike } from './types.js';

export interface SizeFloor {
  /** UTF-16 code units of prompt text (message contents, names, tools as JSON). */
  chars: number;
  /** Maximal runs of non-whitespace (at least this many tokens); 0 when not counted. */
  words: number;
}

// Unicode White_Space, as `\s` in the tokenizers' split regexes. ASCII letters and punctuation
// (most of any prompt) take the first two comparisons only.
function isSpace(c: number): boolean {
  if (c > 32 && c < 0x85) return false;
  if (c <= 32) return c === 32 || (c >= 9 && c <= 13);
  return c === 0x85 || c === 0xa0 || c === 0x1680 || (c >= 0x2000 && c <= 0x200a) || c === 0x2028 || c === 0x2029 || c === 0x202f || c === 0x205f || c === 0x3000;
}

function words(s: string): number {
  let n = 0;
  let inWord = false;
  for (let i = 0; i < s.length; i++) {
    const space = isSpace(s.charCodeAt(i));
    if (!space && !inWord) n++;
    inWord = !space;
  }
  return n;
}

function chatTexts(chat: ChatRequestLike): string[] {
  const out: string[] = [];
  const addMessage = (m: ChatMessage) => {
    if (typeof m.content === 'string') out.push(m.content);
    else if (Array.isArray(m.content)) for (const p of m.content) if (p && typeof p === 'object' && typeof (p as { text?: unknown }).text === 'string') out.push((p as { text: string }).text);
    if (typeof m.name === 'string') out.push(m.name);
  };
  for (const m of chat.messages) addMessage(m);
  if (chat.tools !== undefined) out.push(JSON.stringify(chat.tools));
  return out;
}

/**
 * Characters, and words when the characters alone exceed `countWordsAbove` (words <= characters,
 * so below it the word count cannot matter and the scan is skipped: the common case costs a sum
 * of lengths).
 */
function floorOf(texts: string[], countWordsAbove: number): SizeFloor {
  let chars = 0;
  for (const t of texts) chars += t.length;
  let w = 0;
  if (chars > countWordsAbove) for (const t of texts) w += words(t);
  return { chars, words: w };
}

export function textSizeFloor(text: string, countWordsAbove = 0): SizeFloor {
  return floorOf([text], countWordsAbove);
}

export function chatSizeFloor(chat: ChatRequestLike, countWordsAbove = 0): SizeFloor {
  return floorOf(chatTexts(chat), countWordsAbove);
}
