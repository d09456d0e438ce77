// Cutting a rendered prompt into segments that tokenize independently.
//
// The tokenizer first splits its input on added tokens (leftmost-longest match), and never merges or
// pre-tokenizes across such a split. So a special token that the tokenizer is certain to match starts
// a new, independent piece of work. A segment is that token plus the text up to the next one; the text
// before the first one is a segment too. Because each segment after the first starts with its special
// token, the tokenizer sees its text exactly as it does inside the whole prompt: never at position 0 of
// the input (that matters to pre-tokenizers such as Metaspace with prepend_scheme 'first').
//
// A token that matches only depending on its neighbours (lstrip eats whitespace before it, single_word
// looks at the previous character, normalized matches after normalization) does not start a segment.
import type { AddedTokenSpec } from './files.js';

export class SegmentSplitter {
  private readonly pattern: RegExp | null;
  private readonly boundary: Set<string>;

  constructor(addedTokens: readonly AddedTokenSpec[]) {
    // Every non-normalized added token takes part in matching, so a special token overlapped by an
    // earlier match is not a boundary. Longest first makes the alternation leftmost-longest.
    const raw = addedTokens.filter((t) => !t.normalized && t.content.length > 0);
    const alternatives = [...new Set(raw.map((t) => t.content))].sort((a, b) => b.length - a.length);
    this.pattern = alternatives.length ? new RegExp(alternatives.map(escapeRegExp).join('|'), 'g') : null;
    this.boundary = new Set(raw.filter((t) => t.special && !t.lstrip && !t.singleWord).map((t) => t.content));
    // A token listed twice with different flags is not safe to cut on.
    for (const t of addedTokens) if (t.normalized || t.lstrip || t.singleWord) this.boundary.delete(t.content);
  }

  /** Start offsets (UTF-16) of the segments of `text`; always begins with 0 unless text is empty. */
  starts(text: string): number[] {
    const starts: number[] = text.length ? [0] : [];
    if (!this.pattern) return starts;
    this.pattern.lastIndex = 0;
    for (let m = this.pattern.exec(text); m; m = this.pattern.exec(text)) {
      if (m.index > 0 && this.boundary.has(m[0])) starts.push(m.index);
    }
    return starts;
  }

  split(text: string): string[] {
    const s = this.starts(text);
    return s.map((a, i) => text.slice(a, i + 1 < s.length ? s[i + 1] : text.length));
  }
}

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
