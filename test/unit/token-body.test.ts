// The token-id body scanner against JSON.parse: on every input it gives JSON.parse's object (the
// prompt as TokenIds that serialize to the same array) or null, and null whenever JSON.parse
// refuses the body (src/api/token-body.ts).
import { describe, expect, it } from 'vitest';
import { parseOpenAIBody, reserialize } from '../../src/api/body.js';
import { parseCompletion } from '../../src/api/openai.js';
import { parseTokenIdBody, TokenIds } from '../../src/api/token-body.js';
import { mulberry32 } from '../../src/common/prng.js';

/** The scanner's verdict matches JSON.parse's: same keys in the same order, same values. */
function agrees(text: string | Buffer): 'fast' | 'fallback' {
  const buf = typeof text === 'string' ? Buffer.from(text) : text;
  const fast = parseTokenIdBody(buf);
  let expected: unknown;
  try {
    expected = JSON.parse(buf.toString('utf8'));
  } catch {
    expect(fast, `JSON.parse refuses ${buf.toString('utf8').slice(0, 80)}`).toBeNull();
    return 'fallback';
  }
  if (fast === null) return 'fallback';
  expect(fast.prompt).toBeInstanceOf(TokenIds);
  expect(Object.keys(fast)).toEqual(Object.keys(expected as object));
  expect(JSON.stringify(fast)).toBe(JSON.stringify(expected));
  expect(Array.from(fast.prompt as TokenIds)).toEqual((expected as { prompt: number[] }).prompt);
  return 'fast';
}

function body(rand: () => number): string {
  const ws = () => [' ', '', '\n', '\t', '\r\n  '][Math.floor(rand() * 5)];
  const n = 1 + Math.floor(rand() * 300);
  const ids = Array.from({ length: n }, () =>
    rand() < 0.05 ? [0, 4294967295, 10, 9][Math.floor(rand() * 4)] : Math.floor(rand() * 200_000),
  );
  const fields: string[] = [
    `"prompt"${ws()}:${ws()}[${ws()}${ids.join(`${ws()},${ws()}`)}${ws()}]`,
    `"model":${ws()}${JSON.stringify(['qwen', 'llama-3 "8b"', 'm\\x', 'ünï', '😀 [x] {y}'][Math.floor(rand() * 5)])}`,
    `"max_tokens":${[1, 0, 16, 1e3, -2, 1.5][Math.floor(rand() * 6)]}`,
    `"stream":${rand() < 0.5}`,
    `"stream_options":{"include_usage":true,"x":[1,{"y":"]}\\""}]}`,
    `"user":null`,
    `"logit_bias":{"50256":-100}`,
    `"stop":["\\n\\n", "]", "}"]`,
  ];
  for (let i = fields.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [fields[i], fields[j]] = [fields[j], fields[i]];
  }
  const kept = fields.filter((f) => f.startsWith('"prompt"') || rand() < 0.7);
  return `${ws()}{${ws()}${kept.join(`${ws()},${ws()}`)}${ws()}}${ws()}`;
}

describe('parseTokenIdBody', () => {
  it('gives what JSON.parse gives on generated token-id bodies', () => {
    const rand = mulberry32(18);
    for (let i = 0; i < 400; i++) expect(agrees(body(rand))).toBe('fast');
  });

  it('leaves every body it does not take whole to JSON.parse', () => {
    const cases = [
      '{"prompt":[1,2,]}',
      '{"prompt":[01]}',
      '{"prompt":[1.5]}',
      '{"prompt":[1.0]}',
      '{"prompt":[1e3]}',
      '{"prompt":[-1]}',
      '{"prompt":[4294967296]}',
      '{"prompt":[9007199254740993]}',
      '{"prompt":[[1,2],[3]]}',
      '{"prompt":[]}',
      '{"prompt":["a"]}',
      '{"prompt":[1 2]}',
      '{"prompt" [1]}',
      '{"prompt":[1],}',
      '{"prompt":[1]} x',
      '\ufeff{"prompt":[1]}',
      '{"prompt":[1]',
      '{"prompt":[1],"__proto__":{"x":1}}',
      '{"prompt":[1],"prompt":"text"}',
      '{"prompt":"text","prompt":[7]}',
      '{"pro\\u006dpt":[5,6]}',
      '{"a\tb":1,"prompt":[1]}',
      '{"model":"unterminated,"prompt":[1]}',
      '{"prompt":[1],"x":[}',
      '{"prompt":[1],"x":tru}',
      '[1,2]',
      '{}',
      '',
      '{"prompt":[1],"x":"\\ud800"}',
      '{"prompt":[1],"x":1e400}',
    ];
    const verdicts = cases.map((c) => agrees(c));
    // The scanner did take the valid ones it is meant for:
    // A prompt it does not take ends the scan at once (text prompts are not parsed twice over):
    expect(verdicts[cases.indexOf('{"prompt":"text","prompt":[7]}')]).toBe('fallback');
    expect(parseTokenIdBody(Buffer.from('{"model":"m","prompt":"hi [1, 2]","max_tokens":1}'))).toBeNull();
    expect(verdicts[cases.indexOf('{"pro\\u006dpt":[5,6]}')]).toBe('fast');
    expect(verdicts[cases.indexOf('{"prompt":[1],"x":1e400}')]).toBe('fast');
    expect(verdicts[cases.indexOf('{"prompt":[1],"__proto__":{"x":1}}')]).toBe('fallback');
  });

  it('never disagrees with JSON.parse on mutated bodies', () => {
    const rand = mulberry32(1818);
    const alphabet = '[]{}",:0123456789 -.e\\\nx';
    let fast = 0;
    for (let i = 0; i < 3000; i++) {
      const b = Buffer.from(body(rand));
      for (let m = 1 + Math.floor(rand() * 3); m > 0; m--)
        b[Math.floor(rand() * b.length)] = alphabet.charCodeAt(Math.floor(rand() * alphabet.length));
      if (agrees(b) === 'fast') fast++;
    }
    expect(fast).toBeGreaterThan(100); // the mutations left many bodies valid, and those were read
  });
});

describe('parseOpenAIBody with a token-id prompt', () => {
  it('routes by the same ids and forwards the same JSON after a rewrite', () => {
    const text = '{"model":"m","prompt":[3, 1, 4, 1, 5],"max_tokens":1}';
    const raw = parseOpenAIBody(Buffer.from(text));
    const parsed = parseCompletion('completion', raw);
    expect(parsed.prompt).toEqual({ kind: 'tokens', tokens: new Uint32Array([3, 1, 4, 1, 5]) });
    expect((parsed.prompt as { tokens: Uint32Array }).tokens.constructor).toBe(Uint32Array);
    expect(reserialize({ ...raw, model: 'alias' }).toString()).toBe(
      '{"model":"alias","prompt":[3,1,4,1,5],"max_tokens":1}',
    );
    // Bodies without a prompt key, and prompts JSON.parse reads, are unchanged:
    expect(parseOpenAIBody(Buffer.from('{"model":"m","prompt":[1.0]}')).prompt).toEqual([1]);
    expect(() => parseOpenAIBody(Buffer.from('{"model":"m","prompt":[1,]}'))).toThrow(/not valid JSON/);
    // Chat bodies are not scanned (a tool may have a "prompt" parameter): plain JSON.parse.
    expect(parseOpenAIBody(Buffer.from('{"model":"m","prompt":[1,2]}'), false).prompt).toEqual([1, 2]);
  });
});

describe('parseTokenIdBody on long prompts', () => {
  it('reads prompts longer than its kept scratch, twice in a row', () => {
    for (const n of [100_000, 70_000]) {
      const ids = Array.from({ length: n }, (_, i) => (i * 7919) % 151_936);
      const b = parseTokenIdBody(Buffer.from(JSON.stringify({ model: 'm', prompt: ids })));
      expect(b).not.toBeNull();
      expect((b!.prompt as TokenIds).length).toBe(n);
      expect(Array.from(b!.prompt as TokenIds)).toEqual(ids);
    }
  });
});
