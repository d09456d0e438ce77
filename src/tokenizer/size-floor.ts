// What a prompt costs at least, without rendering or tokenizing it: refusing a huge prompt must not
// cost the seconds and the memory of tokenizing it first. Pure.
//
// `chars` counts every input the chat template receives: message contents, names, reasoning, tool
// calls (their arguments are printed as JSON), tool results, `tools`, and chat_template_kwargs
// (`documents` and anything else), structured values by the length of their JSON.
//
// `words` is a proven lower bound on the token count for byte-level BPE tokenizers with a
// whitespace-respecting pre-tokenizer (GPT-2/4, Llama 3, Qwen, Mistral's tekken): their split regex
// never puts non-space characters on both sides of a whitespace character into one piece, and a
// token never spans two pieces, so every maximal run of non-whitespace is at least one token. Only
// text the templates print as it is counts (contents and names); text without whitespace is bounded
// by the tokenizer itself, which stops counting at the limit (pieces.ts).
import { ChatTemplateError } from './errors.js';
import { TEXT_PART_FIELD } from './openai-messages.js';
import type { ChatMessage, ChatRequestLike } from './types.js';

export interface SizeFloor {
  /** UTF-16 code units of the template's inputs (texts, and structured values as JSON). */
  chars: number;
  /** Maximal runs of non-whitespace (at least this many tokens); 0 when not counted. */
  words: number;
}

/**
 * Deepest nesting of a structured input (tools, tool calls, kwargs). Far beyond any real JSON schema,
 * and well inside what rendering survives: the template's `tojson` recurses per level and runs out of
 * stack between 1,000 and 2,000 levels.
 */
export const MAX_INPUT_NESTING = 512;

// Unicode White_Space, as `\s` in the tokenizers' split regexes. ASCII letters and punctuation
// (most of any prompt) take the first two comparisons only.
export function isSpace(c: number): boolean {
  if (c > 32 && c < 0x85) return false;
  if (c <= 32) return c === 32 || (c >= 9 && c <= 13);
  return (
    c === 0x85 ||
    c === 0xa0 ||
    c === 0x1680 ||
    (c >= 0x2000 && c <= 0x200a) ||
    c === 0x2028 ||
    c === 0x2029 ||
    c === 0x202f ||
    c === 0x205f ||
    c === 0x3000
  );
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

/**
 * The length JSON.stringify would give `value` (escapes aside), walked without recursion: nesting
 * deeper than MAX_INPUT_NESTING is refused (`where` names the field) before anything recurses on it.
 */
function jsonChars(value: unknown, where: string): number {
  let n = 0;
  const stack: Array<{ v: unknown; depth: number }> = [{ v: value, depth: 0 }];
  for (let top = stack.pop(); top !== undefined; top = stack.pop()) {
    const { v, depth } = top;
    if (typeof v === 'string') n += v.length + 2;
    else if (typeof v === 'number') n += String(v).length;
    else if (typeof v === 'boolean') n += v ? 4 : 5;
    else if (v === null) n += 4;
    else if (typeof v === 'object') {
      if (depth >= MAX_INPUT_NESTING)
        throw new ChatTemplateError(`${where} nests deeper than ${MAX_INPUT_NESTING} levels`, 'invalid_request');
      if (Array.isArray(v)) {
        n += 1 + Math.max(v.length, 1);
        for (const x of v) stack.push({ v: x, depth: depth + 1 });
      } else {
        const keys = Object.keys(v);
        n += 1 + Math.max(keys.length, 1);
        for (const k of keys) {
          n += k.length + 3;
          stack.push({ v: (v as Record<string, unknown>)[k], depth: depth + 1 });
        }
      }
    }
  }
  return n;
}

class Tally {
  chars = 0;
  readonly texts: string[] = [];

  /** Text the template prints as it is: counted in characters and in words. */
  text(s: unknown): void {
    if (typeof s !== 'string') return;
    this.chars += s.length;
    this.texts.push(s);
  }

  /** Anything else the template receives, by its JSON length. */
  value(v: unknown, where: string): void {
    if (v != null) this.chars += typeof v === 'string' ? v.length : jsonChars(v, where);
  }

  /** Characters, and words when the characters exceed `countWordsAbove` (words <= characters, so below it they cannot matter). */
  floor(countWordsAbove: number): SizeFloor {
    let w = 0;
    if (this.chars > countWordsAbove) for (const t of this.texts) w += words(t);
    return { chars: this.chars, words: w };
  }
}

/** The fields toTemplateMessage passes to the template (openai-messages.ts), role by role. */
function addMessage(t: Tally, m: ChatMessage, i: number): void {
  if (!m || typeof m !== 'object') return; // the template refuses it
  const content = m.content;
  if (typeof content === 'string') t.text(content);
  else if (Array.isArray(content)) {
    for (const p of content) {
      if (typeof p === 'string') t.text(p);
      else if (p && typeof p === 'object') {
        const type = (p as { type?: unknown }).type;
        const field = typeof type === 'string' ? TEXT_PART_FIELD[type] : undefined;
        if (field) t.text((p as Record<string, unknown>)[field]);
        else if (type === 'tool_reference') t.text((p as { name?: unknown }).name);
      }
    }
  }
  t.text(m.name);
  if (typeof m.task === 'string') t.value(m.task, `messages[${i}].task`);
  if (m.role === 'assistant') {
    t.value(m.tool_calls, `messages[${i}].tool_calls`);
    t.value(m.reasoning, `messages[${i}].reasoning`);
  } else if (m.role === 'tool') t.value(m.tool_call_id, `messages[${i}].tool_call_id`);
  else if (m.role === 'developer') t.value(m.tools, `messages[${i}].tools`);
}

export function textSizeFloor(text: string, countWordsAbove = 0): SizeFloor {
  const t = new Tally();
  t.text(text);
  return t.floor(countWordsAbove);
}

/** Throws ChatTemplateError ('invalid_request') for a structured input nested deeper than MAX_INPUT_NESTING. */
export function chatSizeFloor(chat: ChatRequestLike, countWordsAbove = 0): SizeFloor {
  const t = new Tally();
  chat.messages.forEach((m, i) => {
    addMessage(t, m, i);
  });
  t.value(chat.tools, 'tools');
  t.value(chat.chat_template_kwargs, 'chat_template_kwargs');
  return t.floor(countWordsAbove);
}
