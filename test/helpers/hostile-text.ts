// Hostile text for tokenizer tests: character pools chosen for what tokenizers treat specially (whitespace
// kinds, combining marks NFC composes, scripts, emoji sequences, special tokens and near misses).

export const POOLS = [
  'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ',
  '0123456789',
  ' ',
  '   \n\n\t\r\n\u00a0\u3000\u2028\u000b\u000c',
  '!"#$%&\'()*+,-./:;<=>?@[\\]^_`{|}~',
  'àéîõüçñßøåæœÀÉÎ',
  'e\u0301a\u0308o\u0303\u0345', // combining marks: NFC (Qwen3's normalizer) composes some of them
  '日本語中文한국어漢字かなカナ',
  'مرحبا שלום नमस्ते สวัสดี Привет Ελληνικά',
  ['😀', '👍🏽', '👩‍👩‍👧', '🇫🇷', '🏳️‍🌈', '∑∫√∞≠', '𝔘𝔫𝔦𝔠𝔬𝔡𝔢', '\u200d', '\ufeff'],
  [
    '<|im_start|>',
    '<|im_end|>',
    '<|endoftext|>',
    '<think>',
    '</think>',
    '<tool_call>',
    '<|begin_of_text|>',
    '<|start_header_id|>',
    '<|eot_id|>',
    '<|reserved_special_token_7|>',
    '<|im_start',
    '|>',
  ],
  ["'s", "'t", "'re", "'LL", ' I', 'the', ' of', 'ing', 'tion', '  ', '    ', '1234567', '3.14159'],
];

export function randomText(next: () => number, maxLen: number): string {
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

/** Edge cases of every kind, code and ~20k characters of prose. */
export function fixedInputs(): string[] {
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
