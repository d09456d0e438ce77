// Chat template rendering as vLLM's /v1/chat/completions does it: messages normalized by vLLM's rules,
// then transformers' apply_chat_template(tokenize=False) semantics on top of @huggingface/jinja.
import { Environment, Interpreter, Template } from '@huggingface/jinja';
import { ChatTemplateError } from './errors.js';
import type { ChatTemplates } from './files.js';
import {
  detectContentFormat,
  toTemplateMessages,
  toTemplateTools,
  type ContentFormat,
  type TemplateMessage,
} from './openai-messages.js';
import { patchJinjaForPython, pyStrftime, pyStrip } from './python-compat.js';
import type { ChatRequestLike } from './types.js';

interface Compiled {
  source: string;
  template: Template;
  format: ContentFormat;
}

export interface PreparedRender {
  source: string;
  template: Template;
  variables: Record<string, unknown>;
  continueFinal: boolean;
}

/** Keys vLLM refuses in chat_template_kwargs, and the ones transformers would receive twice. */
const REJECTED_KWARGS = new Set(['chat_template', 'tokenize', 'messages', 'conversation']);
/** Request-level values that chat_template_kwargs may override (vLLM merges the kwargs over them). */
const OVERRIDABLE = new Set(['add_generation_prompt', 'continue_final_message', 'tools', 'documents']);
const COMPILED_CACHE_MAX = 16;

export class ChatTemplateRenderer {
  private readonly compiled = new Map<string, Compiled>();

  constructor(
    private readonly templates: ChatTemplates | null,
    /** bos_token, eos_token, ... as transformers exposes them to every template. */
    private readonly specialTokens: Readonly<Record<string, string | string[]>>,
  ) {
    patchJinjaForPython();
    // Compile the built-in templates now so a broken one fails at load, not on the first request.
    if (typeof templates === 'string') this.compile(templates);
    else if (templates) for (const t of Object.values(templates)) this.compile(t);
  }

  render(req: ChatRequestLike): string {
    let p: PreparedRender;
    let rendered: string;
    try {
      // Preparing copies tool calls (structuredClone recurses): nesting past the stack fails there too.
      p = this.prepare(req);
      rendered = renderWith(p.template, p.variables);
    } catch (e) {
      if (e instanceof ChatTemplateError) throw e;
      throw new ChatTemplateError(`chat template failed: ${e instanceof Error ? e.message : String(e)}`, 'template', {
        cause: e,
      });
    }
    return p.continueFinal ? cutAfterFinalMessage(rendered, p.variables.messages as TemplateMessage[]) : rendered;
  }

  /** Everything but the rendering itself: the template and the (JSON-only) variables it will see. */
  prepare(req: ChatRequestLike): PreparedRender {
    const kwargs = req.chat_template_kwargs ?? {};
    if (typeof kwargs !== 'object' || Array.isArray(kwargs))
      throw new ChatTemplateError('chat_template_kwargs must be an object', 'invalid_request');
    const rejected = Object.keys(kwargs).filter((k) => REJECTED_KWARGS.has(k));
    if (rejected.length)
      throw new ChatTemplateError(
        `Found unexpected chat template kwargs from request: ${rejected.join(', ')}`,
        'invalid_request',
      );

    // vLLM lays chat_template_kwargs over the request's own flags and tools.
    const has = (k: string) => Object.prototype.hasOwnProperty.call(kwargs, k);
    const addGenerationPrompt = Boolean(
      has('add_generation_prompt') ? kwargs.add_generation_prompt : (req.add_generation_prompt ?? true),
    );
    const continueFinal = Boolean(
      has('continue_final_message') ? kwargs.continue_final_message : (req.continue_final_message ?? false),
    );
    if (addGenerationPrompt && continueFinal) {
      throw new ChatTemplateError(
        'Cannot set both `continue_final_message` and `add_generation_prompt` to True.',
        'invalid_request',
      );
    }
    const tools = toTemplateTools(has('tools') ? (kwargs.tools as unknown[] | null) : req.tools);
    const { source, template, format } = this.select(req.chat_template, tools !== null);

    // transformers: render(messages=, tools=, documents=, add_generation_prompt=, **special_tokens, **kwargs)
    const variables: Record<string, unknown> = Object.assign({}, this.specialTokens); // keys are added below: no spread
    for (const [k, v] of Object.entries(kwargs)) if (!OVERRIDABLE.has(k)) variables[k] = v;
    variables.messages = toTemplateMessages(req.messages, format);
    variables.tools = tools;
    variables.documents = has('documents') ? kwargs.documents : null;
    variables.add_generation_prompt = addGenerationPrompt;
    return { source, template, variables, continueFinal };
  }

  private select(override: string | undefined, hasTools: boolean): Compiled {
    const named = this.templates && typeof this.templates === 'object' ? this.templates : null;
    if (override !== undefined) {
      if (typeof override !== 'string')
        throw new ChatTemplateError('chat_template must be a string', 'invalid_request');
      return this.compile(named && override in named ? named[override] : override);
    }
    if (typeof this.templates === 'string') return this.compile(this.templates);
    if (named) {
      // transformers' get_chat_template: 'tool_use' when tools are passed, else 'default'.
      const pick = hasTools && 'tool_use' in named ? named.tool_use : named.default;
      if (pick !== undefined) return this.compile(pick);
      throw new ChatTemplateError(
        `no default chat template among: ${Object.keys(named).join(', ')}`,
        'invalid_request',
      );
    }
    throw new ChatTemplateError('this tokenizer has no chat template; pass chat_template', 'invalid_request');
  }

  private compile(source: string): Compiled {
    const hit = this.compiled.get(source);
    if (hit) {
      this.compiled.delete(source);
      this.compiled.set(source, hit);
      return hit;
    }
    let template: Template;
    try {
      template = new Template(source);
    } catch (e) {
      throw new ChatTemplateError(
        `invalid chat template: ${e instanceof Error ? e.message : String(e)}`,
        'invalid_request',
        { cause: e },
      );
    }
    const c: Compiled = { source, template, format: detectContentFormat(template.parsed) };
    this.compiled.set(source, c);
    if (this.compiled.size > COMPILED_CACHE_MAX) this.compiled.delete(this.compiled.keys().next().value as string);
    return c;
  }
}

/** Literals @huggingface/jinja defines as globals; jinja2 has them as keywords, so nothing overrides them. */
const LITERALS = { true: true, false: false, none: null, True: true, False: false, None: null };

const GLOBALS: Record<string, unknown> = {
  range: pyRange,
  raise_exception: (msg: unknown) => {
    throw new ChatTemplateError(String(msg), 'template');
  },
  strftime_now: (fmt: unknown) => pyStrftime(new Date(), String(fmt)),
};

const scopes = new WeakMap<Template, Environment>();

/**
 * A template's outer scope, made once: our globals, the literals, and every identifier the template
 * names declared undefined. The library answers a name nobody declared (`enable_thinking is
 * defined`) by catching the Error its lookup throws, stack trace and all, several microseconds
 * each; declared undefined, the lookup finds the same undefined without one. A render's own
 * variables go in a scope of its own below this one (a `set` or loop variable shadows them as
 * before, and nothing a render does writes here: the interpreter sets names in the scope it runs
 * in). Declaring them all on every render cost about 3 µs of a 19 µs render.
 */
function outerScope(template: Template): Environment {
  let env = scopes.get(template);
  if (!env) {
    env = new Environment();
    for (const [k, v] of Object.entries(GLOBALS)) env.set(k, v);
    for (const [k, v] of Object.entries(LITERALS)) env.set(k, v);
    for (const name of identifiersOf(template)) if (!env.variables.has(name)) env.set(name, undefined);
    scopes.set(template, env);
  }
  return env;
}

/**
 * Template.render, but with our globals: the library declares its own raise_exception (a plain Error)
 * and strftime_now (host locale, few directives) and refuses redeclaration, so build the scope here.
 * A variable may replace a global (chat_template_kwargs may pass its own `range`), never a literal.
 */
function renderWith(template: Template, variables: Record<string, unknown>): string {
  const env = new Environment(outerScope(template));
  for (const k of Object.keys(variables))
    if (!Object.prototype.hasOwnProperty.call(LITERALS, k)) env.set(k, variables[k]);
  const out = new Interpreter(env).run(template.parsed);
  return String(out.value);
}

const identifiers = new WeakMap<Template, readonly string[]>();

/** Every identifier a template's syntax tree names (variables, attributes, filters: a superset). */
function identifiersOf(template: Template): readonly string[] {
  let names = identifiers.get(template);
  if (!names) {
    const found = new Set<string>();
    const walk = (node: unknown): void => {
      if (Array.isArray(node)) for (const n of node) walk(n);
      else if (node && typeof node === 'object') {
        const n = node as { type?: unknown; value?: unknown };
        if (n.type === 'Identifier' && typeof n.value === 'string') found.add(n.value);
        for (const v of Object.values(node)) walk(v);
      }
    };
    walk(template.parsed);
    names = [...found];
    identifiers.set(template, names);
  }
  return names;
}

function pyRange(start: number, stop?: number, step = 1): number[] {
  if (stop === undefined) [start, stop] = [0, start];
  if (step === 0) throw new ChatTemplateError('range() arg 3 must not be zero', 'template');
  const out: number[] = [];
  for (let i = start; step > 0 ? i < stop : i > stop; i += step) out.push(i);
  return out;
}

/** transformers' continue_final_message: cut the prompt right after the final message's text. */
function cutAfterFinalMessage(rendered: string, messages: TemplateMessage[]): string {
  const last = messages.at(-1);
  let final: unknown = last?.content;
  if (Array.isArray(final)) {
    const block = [...final].reverse().find((b) => b && typeof b === 'object' && 'text' in b) as
      | { text?: unknown }
      | undefined;
    if (!block)
      throw new ChatTemplateError(
        'continue_final_message is set but we could not find any text to continue in the final message!',
        'invalid_request',
      );
    final = block.text;
  }
  const text = typeof final === 'string' ? final : '';
  const stripped = pyStrip(text);
  const at = rendered.lastIndexOf(stripped);
  if (at < 0) {
    throw new ChatTemplateError(
      'continue_final_message is set but the final message does not appear in the chat after applying the chat template!',
      'template',
    );
  }
  const lstripped = pyStrip(text, null, 'left');
  // Keep trailing whitespace only when the template kept it too.
  return rendered.slice(at, at + lstripped.length) === text
    ? rendered.slice(0, at + lstripped.length)
    : rendered.slice(0, at + stripped.length);
}
