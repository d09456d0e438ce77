// OpenAI chat messages -> the `messages` and `tools` a template sees, as vLLM's chat_utils.py builds them
// (parse_chat_messages, _postprocess_messages, ChatCompletionToolsParam.model_dump). The template never
// sees the raw request: content parts are joined or wrapped, tool-call arguments are parsed, unknown
// message fields are dropped. Reproducing that is as much a part of exact tokens as the template itself.
import { ChatTemplateError } from './errors.js';
import type { ChatMessage } from './types.js';

/** 'string': content is one string; 'openai': content is a list of {type, text} parts. */
export type ContentFormat = 'string' | 'openai';

export type TemplateMessage = Record<string, unknown>;

/** Content part types the template sees as text, and the field holding it. */
export const TEXT_PART_FIELD: Readonly<Record<string, string>> = {
  text: 'text',
  input_text: 'text',
  output_text: 'text',
  refusal: 'refusal',
  thinking: 'thinking',
};
const MEDIA_PART_TYPES = new Set([
  'image_url',
  'input_image',
  'image_embeds',
  'audio_embeds',
  'prompt_embeds',
  'image_pil',
  'audio_url',
  'input_audio',
  'video_url',
]);

export function toTemplateMessages(messages: readonly ChatMessage[], format: ContentFormat): TemplateMessage[] {
  if (!Array.isArray(messages)) throw new ChatTemplateError('messages must be a list', 'invalid_request');
  const out = messages.map((m) => toTemplateMessage(m, format));
  postprocessToolCalls(out);
  return out;
}

function toTemplateMessage(msg: ChatMessage, format: ContentFormat): TemplateMessage {
  if (!msg || typeof msg !== 'object' || typeof msg.role !== 'string') {
    throw new ChatTemplateError('each message needs a string role', 'invalid_request');
  }
  const role = msg.role;
  const wrap = format === 'openai';
  const raw = msg.content;
  const parts: unknown[] =
    raw == null ? [] : typeof raw === 'string' ? [{ type: 'text', text: raw }] : Array.isArray(raw) ? raw : [];
  if (raw != null && typeof raw !== 'string' && !Array.isArray(raw)) {
    throw new ChatTemplateError('message content must be a string, a list of parts or null', 'invalid_request');
  }
  const items: Array<string | Record<string, unknown>> = [];
  for (const part of parts) {
    const item = parsePart(part, wrap);
    if (item !== null) items.push(item);
  }
  const result: TemplateMessage = { role, content: wrap ? items : (items as string[]).join('\n') };

  if (role === 'assistant') {
    if (msg.tool_calls != null) {
      if (!Array.isArray(msg.tool_calls)) throw new ChatTemplateError('tool_calls must be a list', 'invalid_request');
      // Copied: arguments are parsed in place below and the caller's request must stay untouched.
      result.tool_calls = structuredClone(msg.tool_calls);
    }
    if (msg.reasoning != null) {
      result.reasoning = msg.reasoning;
      result.reasoning_content = msg.reasoning;
    }
  } else if (role === 'tool') {
    if ('tool_call_id' in msg) result.tool_call_id = msg.tool_call_id;
    const c = result.content;
    if (
      Array.isArray(c) &&
      !c.some((it) => typeof it === 'object' && it !== null && (it as { type?: unknown }).type !== 'text')
    ) {
      const texts = c.map((it) => String((it as { text?: unknown }).text ?? ''));
      result.content = texts.length ? texts.join('\n') : '';
    }
  }
  if (typeof msg.name === 'string') result.name = msg.name;
  if (typeof msg.task === 'string') result.task = msg.task;
  if (role === 'developer') result.tools = msg.tools ?? null;
  return result;
}

function parsePart(part: unknown, wrap: boolean): string | Record<string, unknown> | null {
  if (typeof part === 'string') return wrap ? { type: 'text', text: part } : part;
  if (!part || typeof part !== 'object') throw new ChatTemplateError('invalid content part', 'invalid_request');
  const p = part as Record<string, unknown>;
  const type = p.type;
  if (type === undefined || type === null || p.uuid != null) {
    if (
      [
        'image_url',
        'image_pil',
        'image_embeds',
        'audio_embeds',
        'prompt_embeds',
        'audio_url',
        'input_audio',
        'video_url',
      ].some((k) => k in p)
    ) {
      throw new ChatTemplateError('multimodal content is not supported by the router tokenizer', 'unsupported');
    }
    if ('tool_reference' in p)
      return wrap ? { type: 'tool_reference', name: p.tool_reference } : (p.tool_reference as string);
    throw new ChatTemplateError("Missing 'type' field in multimodal part.", 'invalid_request');
  }
  if (typeof type !== 'string')
    throw new ChatTemplateError("Invalid 'type' field in multimodal part.", 'invalid_request');
  const field = TEXT_PART_FIELD[type];
  if (field) {
    const text = p[field];
    // vLLM skips text/refusal parts without content; a thinking part without text would fail there.
    if (text == null) {
      if (type === 'text' || type === 'refusal') return null;
      throw new ChatTemplateError(`content part '${type}' has no ${field}`, 'invalid_request');
    }
    return wrap ? { type: 'text', text } : (text as string);
  }
  if (type === 'tool_reference') return wrap ? { type: 'tool_reference', name: p.name } : (p.name as string);
  if (MEDIA_PART_TYPES.has(type))
    throw new ChatTemplateError(`content part '${type}' is not supported by the router tokenizer`, 'unsupported');
  throw new ChatTemplateError(`Unsupported chat content part type: '${type}'.`, 'invalid_request');
}

/** vLLM's _postprocess_messages: templates expect tool-call arguments as objects, not JSON strings. */
function postprocessToolCalls(messages: TemplateMessage[]): void {
  for (const m of messages) {
    if (m.role !== 'assistant' || !('tool_calls' in m)) continue;
    const calls = m.tool_calls;
    if (!Array.isArray(calls)) continue;
    if (calls.length === 0) {
      delete m.tool_calls;
      continue;
    }
    for (const call of calls) {
      const fn = call && typeof call === 'object' ? (call as { function?: unknown }).function : undefined;
      if (!fn || typeof fn !== 'object') throw new ChatTemplateError('tool call without a function', 'invalid_request');
      const f = fn as Record<string, unknown>;
      const args = f.arguments;
      if (typeof args === 'string') {
        try {
          f.arguments = JSON.parse(args);
        } catch {
          f.arguments = {};
        }
      } else if (args === null || typeof args !== 'object') {
        f.arguments = {};
      }
    }
  }
}

/**
 * The request's tools as vLLM hands them to the template: ChatCompletionToolsParam.model_dump(), so
 * declared fields come first in declaration order, unset optional ones as null, extra fields after.
 */
export function toTemplateTools(tools: readonly unknown[] | undefined | null): unknown[] | null {
  if (tools == null) return null;
  if (!Array.isArray(tools)) throw new ChatTemplateError('tools must be a list', 'invalid_request');
  return tools.map((t) => {
    if (!t || typeof t !== 'object') throw new ChatTemplateError('each tool must be an object', 'invalid_request');
    const { type = 'function', function: fn, ...rest } = t as Record<string, unknown>;
    if (!fn || typeof fn !== 'object' || typeof (fn as { name?: unknown }).name !== 'string') {
      throw new ChatTemplateError('each tool needs function.name', 'invalid_request');
    }
    const { name, description = null, parameters = null, ...fnRest } = fn as Record<string, unknown>;
    return { type, function: { name, description, parameters, ...fnRest }, ...rest };
  });
}

// ---- content format detection ------------------------------------------------------------------------
// vLLM's _detect_content_format: a template that loops over `message['content']` (for a message taken
// from `messages`, directly or through `set` aliases) gets 'openai' parts, any other gets strings.

interface Node {
  type: string;
  [k: string]: unknown;
}

const isNode = (x: unknown): x is Node => !!x && typeof x === 'object' && typeof (x as Node).type === 'string';

function* walk(x: unknown): Generator<Node> {
  if (Array.isArray(x)) {
    for (const v of x) yield* walk(v);
  } else if (x instanceof Map) {
    for (const [k, v] of x) {
      yield* walk(k);
      yield* walk(v);
    }
  } else if (isNode(x)) {
    yield x;
    for (const [k, v] of Object.entries(x)) if (k !== 'type' && v && typeof v === 'object') yield* walk(v);
  }
}

const isVar = (n: unknown, name: string) => isNode(n) && n.type === 'Identifier' && n.value === name;

function isAttr(n: unknown, name: string, key: string): boolean {
  if (!isNode(n) || n.type !== 'MemberExpression' || !isVar(n.object, name)) return false;
  const prop = n.property;
  if (!isNode(prop)) return false;
  return n.computed
    ? prop.type === 'StringLiteral' && prop.value === key
    : prop.type === 'Identifier' && prop.value === key;
}

function isVarOrElems(n: unknown, name: string, key?: string): boolean {
  if (!isNode(n)) return false;
  if (n.type === 'FilterExpression' || n.type === 'TestExpression') return isVarOrElems(n.operand, name, key);
  if (n.type === 'SelectExpression') return isVarOrElems(n.lhs, name, key);
  if (n.type === 'MemberExpression' && isNode(n.property) && n.property.type === 'SliceExpression')
    return isVarOrElems(n.object, name, key);
  return key ? isAttr(n, name, key) : isVar(n, name);
}

function aliasesOf(nodes: Node[], root: string): string[] {
  const names = [root];
  for (let i = 0; i < names.length; i++) {
    for (const n of nodes) {
      if (n.type !== 'Set' || !n.value || !isNode(n.assignee) || n.assignee.type !== 'Identifier') continue;
      const lhs = n.assignee.value as string;
      if (!names.includes(lhs) && isVarOrElems(n.value, names[i])) names.push(lhs);
    }
  }
  return names;
}

function loopTargets(nodes: Node[], over: (iter: unknown) => boolean): string[] {
  const out: string[] = [];
  for (const n of nodes) {
    if (n.type === 'For' && over(n.iterable) && isNode(n.loopvar) && n.loopvar.type === 'Identifier')
      out.push(n.loopvar.value as string);
  }
  return out;
}

export function detectContentFormat(program: unknown): ContentFormat {
  const nodes = [...walk(program)];
  const messageLists = aliasesOf(nodes, 'messages');
  const messageVars = loopTargets(nodes, (it) => messageLists.some((v) => isVarOrElems(it, v)));
  const contentLoops = loopTargets(nodes, (it) => messageVars.some((v) => isVarOrElems(it, v, 'content')));
  return contentLoops.length > 0 ? 'openai' : 'string';
}
