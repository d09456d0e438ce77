// The request's text for the policies that route on characters (needs.text): a prompt string, a
// chat's message texts joined by single spaces (SMG's extract_text_for_routing: contents, text
// parts, an assistant's reasoning), or the token ids of a token-id prompt. Pure.
import type { PromptSpec } from '../api/openai.js';
import type { RequestText } from '../scheduler/policies/types.js';
import type { ChatMessage } from '../tokenizer/index.js';

export function requestText(p: PromptSpec): RequestText {
  if (p.kind === 'tokens') return { kind: 'tokens', symbols: p.tokens };
  if (p.kind === 'text') return { kind: 'chars', symbols: codePoints(p.text) };
  const pieces: string[] = [];
  for (const m of p.chat.messages) messageTexts(m, pieces);
  return { kind: 'chars', symbols: codePoints(pieces.join(' ')) };
}

function messageTexts(m: ChatMessage, out: string[]): void {
  const c = m.content;
  if (typeof c === 'string') {
    if (c !== '') out.push(c);
  } else if (Array.isArray(c)) {
    for (const part of c)
      if (part && part.type === 'text' && typeof part.text === 'string' && part.text !== '') out.push(part.text);
  }
  const r = m.role === 'assistant' ? m.reasoning_content : undefined;
  if (typeof r === 'string' && r !== '') out.push(r);
}

/** Unicode code points (a surrogate pair is one symbol, as a Rust char). */
export function codePoints(s: string): Uint32Array {
  const out = new Uint32Array(s.length);
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const cp = s.codePointAt(i)!;
    out[n++] = cp;
    if (cp > 0xffff) i++;
  }
  return n === s.length ? out : out.subarray(0, n);
}
