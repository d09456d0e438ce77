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
  /** Maximal runs of non-whitespace: at least this many tokens. */
  words: number;
}

function isSpace(c: number): boolean {
  return c === 32 || (c >= 9 && c <= 13) || c === 0xa0 || c === 0x3000 || (c >= 0x2000 && c <= 0x200a) || c === 0x2028 || c === 0x2029 || c === 0x1680 || c === 0x202f || c === 0x205f || c === 0x85;
}

function add(acc: SizeFloor, s: string): void {
  acc.chars += s.length;
  let inWord = false;
  for (let i = 0; i < s.length; i++) {
    const space = isSpace(s.charCodeAt(i));
    if (!space && !inWord) acc.words++;
    inWord = !space;
  }
}

function addMessage(acc: SizeFloor, m: ChatMessage): void {
  if (typeof m.content === 'string') add(acc, m.content);
  else if (Array.isArray(m.content)) for (const p of m.content) if (p && typeof p === 'object' && typeof (p as { text?: unknown }).text === 'string') add(acc, (p as { text: string }).text);
  if (typeof m.name === 'string') add(acc, m.name);
}

export function textSizeFloor(text: string): SizeFloor {
  const acc = { chars: 0, words: 0 };
  add(acc, text);
  return acc;
}

export function chatSizeFloor(chat: ChatRequestLike): SizeFloor {
  const acc = { chars: 0, words: 0 };
  for (const m of chat.messages) addMessage(acc, m);
  if (chat.tools !== undefined) add(acc, JSON.stringify(chat.tools));
  return acc;
}
