// Cutting a long text into pieces for the native tokenizer (native-worker.ts). Pieces bound the work
// spent on a prompt over the token limit (counting stops once the limit is passed) and the time one
// prompt holds the tokenizer from the others (they take turns piece by piece). Pure.
//
// A cut is exact (the pieces' ids end to end equal the whole text's) only where the tokenizer cannot
// join across it. That holds for `cutsAreExact` tokenizers, at two kinds of points:
// - before a single space between two non-space characters ("x| y");
// - after a newline that a non-space character follows ("\n|x").
// Why: the tokenizer first splits on added tokens (none of these tokenizers has one containing
// whitespace or eating it), normalizes (NFC at most: it never composes across a space or a newline,
// both starters), pre-tokenizes with one of the known split regexes below, then runs the model on
// each pre-token alone. In those regexes no match holds a non-space followed by a space, nor a
// newline followed by a non-space: the point is a pre-token boundary. A match depends only on the
// text from its start onward (no look-behind), so the text after the cut splits as before; the text
// before it ends on a non-space (first kind) or on a newline that `\s*[\r\n]+` or the punctuation
// rule takes before `\s+(?!\S)` is tried (second kind), so the look-ahead `(?!\S)` cannot see the
// missing end either. The load-time probe (prompt-tokenizer.ts) checks the claim on hostile text.
//
// Elsewhere (no such point within a piece's length, or a tokenizer not recognised) a cut is inexact:
// its pieces are only counted (to refuse a prompt over the limit), and a text that stays under the
// limit is tokenized again whole. What an inexact cut adds to the pieces' count (a long token split
// in two, an added token cut apart, digits regrouped) is measured where it happens: the count of
// CUT_WINDOW characters on each side of it less the count of both sides together, plus one, is taken
// off, so the count stays under the whole text's (not proven: the effect of a cut inside a pre-token
// is assumed to stay within the window; tokenizer-pieces.test.ts checks it on hostile text cut every
// 5-12 characters).
import { isSpace } from './size-floor.js';

/** Characters per piece: ~3 ms of tokenizing for prose, ~9 ms for digits (the slowest text). */
export const PIECE_CHARS = 8192;

/** Characters on each side of an inexact cut tokenized to measure what the cut adds to the count. */
export const CUT_WINDOW = 64;

export interface PieceOptions {
  /** Longest piece, in UTF-16 code units (at least 2, or a surrogate pair may be cut). */
  chars: number;
  /** Cut at exact points (`cutsAreExact` for this tokenizer and its probe passed). */
  exactCuts: boolean;
}

/**
 * The end of the piece of `text` that starts at `start`: the last exact cut point at most
 * `opts.chars` after it, else `start + opts.chars` (never inside a surrogate pair) as an inexact cut.
 * The last piece ends at `text.length`, exactly.
 */
export function pieceEnd(text: string, start: number, opts: PieceOptions): { end: number; exact: boolean } {
  const limit = start + opts.chars;
  if (limit >= text.length) return { end: text.length, exact: true };
  if (opts.exactCuts) for (let i = limit; i > start; i--) if (isExactCut(text, i)) return { end: i, exact: true };
  const c = text.charCodeAt(limit - 1);
  return { end: c >= 0xd800 && c <= 0xdbff && limit - 1 > start ? limit - 1 : limit, exact: false };
}

/** Whether cutting `text` before index `i` (0 < i < length) is an exact cut point of either kind. */
export function isExactCut(text: string, i: number): boolean {
  const c = text.charCodeAt(i);
  if (c === 0x20) return i + 1 < text.length && solid(text.charCodeAt(i - 1)) && solid(text.charCodeAt(i + 1));
  return text.charCodeAt(i - 1) === 0x0a && solid(c);
}

/**
 * Certainly not whitespace to any regex engine: not Unicode White_Space, not a control character
 * (Python counts \x1c-\x1f as space), not one of the format characters some engines have counted.
 */
function solid(c: number): boolean {
  return (
    c > 0x20 &&
    c !== 0x7f &&
    !isSpace(c) &&
    c !== 0x180e &&
    !(c >= 0x200b && c <= 0x200d) &&
    c !== 0x2060 &&
    c !== 0xfeff
  );
}

/** The split regexes the exact-cut argument above was made for (Qwen2/3; Llama 3 and cl100k). */
const KNOWN_SPLIT_PATTERNS = new Set([
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
]);

/** The parts of tokenizer.json the exact-cut argument depends on. */
export interface TokenizerShape {
  normalizer?: unknown;
  pre_tokenizer?: unknown;
  truncation?: unknown;
  added_tokens?: Array<{ content: string; lstrip?: boolean; rstrip?: boolean; single_word?: boolean }>;
}

const typeOf = (x: unknown): unknown => (x && typeof x === 'object' ? (x as { type?: unknown }).type : undefined);

/**
 * Whether the exact cut points of `pieceEnd` are exact for this tokenizer: no normalizer or NFC,
 * a known split regex followed by a byte-level pre-tokenizer, no truncation, and no added token that
 * holds or eats whitespace. Anything else is cut inexactly.
 */
export function cutsAreExact(tok: TokenizerShape): boolean {
  const norm = tok.normalizer;
  if (norm != null && typeOf(norm) !== 'NFC') return false;
  if (tok.truncation != null) return false;
  for (const t of tok.added_tokens ?? [])
    if (/\s/u.test(t.content) || t.lstrip || t.rstrip || t.single_word) return false;
  // GPT-2's own ByteLevel regex is not among them: it tries `\s+(?!\S)` before any newline rule.
  const pre = tok.pre_tokenizer as { type?: unknown; pretokenizers?: unknown[] } | null | undefined;
  if (typeOf(pre) !== 'Sequence' || !Array.isArray(pre?.pretokenizers) || pre.pretokenizers.length !== 2) return false;
  const [split, bytes] = pre.pretokenizers as Array<Record<string, unknown>>;
  const pattern = (split?.pattern as { Regex?: unknown } | undefined)?.Regex;
  return (
    typeOf(split) === 'Split' &&
    typeof pattern === 'string' &&
    KNOWN_SPLIT_PATTERNS.has(pattern) &&
    split.behavior === 'Isolated' &&
    split.invert === false &&
    typeOf(bytes) === 'ByteLevel' &&
    bytes.use_regex === false &&
    bytes.add_prefix_space !== true
  );
}
