// Python semantics that chat templates rely on and that @huggingface/jinja or JavaScript get subtly
// wrong. Any difference here changes the rendered prompt, hence the token ids, hence every cache hit.
import { Environment, Interpreter } from '@huggingface/jinja';

/** Characters Python's str.strip() removes by default (str.isspace), which differ from String.prototype.trim. */
const PY_WS = new Set(
  Array.from(
    '\t\n\v\f\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000',
  ),
);

/** Python's str.strip/lstrip/rstrip(chars=None), on code points as Python does. */
export function pyStrip(s: string, chars: string | null = null, mode: 'both' | 'left' | 'right' = 'both'): string {
  const set = chars === null ? PY_WS : new Set(Array.from(chars));
  // Scan code points from each end without splitting the whole string (contents run to megabytes).
  let a = 0;
  let b = s.length;
  if (mode !== 'right') {
    while (a < b) {
      const cp = s.codePointAt(a) as number;
      const w = cp > 0xffff ? 2 : 1;
      if (!set.has(s.slice(a, a + w))) break;
      a += w;
    }
  }
  if (mode !== 'left') {
    while (b > a) {
      const low = s.charCodeAt(b - 1);
      const w = low >= 0xdc00 && low <= 0xdfff && b - 2 >= a && (s.charCodeAt(b - 2) & 0xfc00) === 0xd800 ? 2 : 1;
      if (!set.has(s.slice(b - w, b))) break;
      b -= w;
    }
  }
  return a === 0 && b === s.length ? s : s.slice(a, b);
}

const MONTHS = [
  'January',
  'February',
  'March',
  'April',
  'May',
  'June',
  'July',
  'August',
  'September',
  'October',
  'November',
  'December',
];
const DAYS = ['Sunday', 'Monday', 'Tuesday', 'Wednesday', 'Thursday', 'Friday', 'Saturday'];

/**
 * datetime.now().strftime(fmt) in the C locale, as transformers' `strftime_now` global does
 * (Llama 3.x templates print "Today Date: 26 Jul 2024"). A naive datetime prints %Z and %z as ''.
 */
export function pyStrftime(d: Date, fmt: string): string {
  const p = (n: number, w = 2, c = '0') => String(n).padStart(w, c);
  const dayOfYear =
    Math.floor((Date.UTC(d.getFullYear(), d.getMonth(), d.getDate()) - Date.UTC(d.getFullYear(), 0, 1)) / 86_400_000) +
    1;
  const h12 = d.getHours() % 12 === 0 ? 12 : d.getHours() % 12;
  return fmt.replace(/%([a-zA-Z%])/g, (m, c: string) => {
    switch (c) {
      case 'a':
        return DAYS[d.getDay()].slice(0, 3);
      case 'A':
        return DAYS[d.getDay()];
      case 'b':
      case 'h':
        return MONTHS[d.getMonth()].slice(0, 3);
      case 'B':
        return MONTHS[d.getMonth()];
      case 'd':
        return p(d.getDate());
      case 'e':
        return p(d.getDate(), 2, ' ');
      case 'H':
        return p(d.getHours());
      case 'I':
        return p(h12);
      case 'j':
        return p(dayOfYear, 3);
      case 'm':
        return p(d.getMonth() + 1);
      case 'M':
        return p(d.getMinutes());
      case 'p':
        return d.getHours() < 12 ? 'AM' : 'PM';
      case 'S':
        return p(d.getSeconds());
      case 'f':
        return p(d.getMilliseconds() * 1000, 6);
      case 'w':
        return String(d.getDay());
      case 'y':
        return p(d.getFullYear() % 100);
      case 'Y':
        return String(d.getFullYear());
      case 'F':
        return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}`;
      case 'T':
        return `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
      case 'D':
        return `${p(d.getMonth() + 1)}/${p(d.getDate())}/${p(d.getFullYear() % 100)}`;
      case 'z':
      case 'Z':
        return '';
      case '%':
        return '%';
      default:
        return m;
    }
  });
}

// ---- @huggingface/jinja patches --------------------------------------------------------------------
// Fixed on the prototypes, once, for every template in the process (each checked against jinja2 3.1 with
// transformers' environment in test/unit/tokenizer-template.test.ts):
// - str.strip/lstrip/rstrip ignored their `chars` argument and used String.trim, so Qwen3's
//   `content.lstrip('\n')` also ate leading spaces; the `trim` filter used JavaScript's whitespace set.
// - `{% break %}` / `{% continue %}` dropped the output the iteration had produced before them, and a
//   loop left by them on its first item ran its `else` block.
// - `{{ x }}` printed booleans as true/false and None as nothing; jinja2 prints True/False/None.
// - A `set` in a loop body outlived its iteration (one scope for the whole loop).

interface RuntimeValueLike {
  type: string;
  value: unknown;
  builtins?: Map<string, unknown>;
}
type StringValueCtor = new (value: string) => RuntimeValueLike;
type FunctionValueCtor = new (fn: (args: RuntimeValueLike[]) => RuntimeValueLike) => RuntimeValueLike;

let patched = false;

export function patchJinjaForPython(): void {
  if (patched) return;
  patched = true;
  const env = new Environment();
  const sample = env.set('s', 'x') as unknown as RuntimeValueLike;
  const fnSample = env.set('f', () => null) as unknown as RuntimeValueLike;
  const StringValue = sample.constructor as StringValueCtor;
  const FunctionValue = fnSample.constructor as FunctionValueCtor;
  const proto = Object.getPrototypeOf(sample) as object;
  const desc = Object.getOwnPropertyDescriptor(proto, 'builtins');
  if (!desc?.get) throw new Error('@huggingface/jinja changed: StringValue.builtins getter not found');
  const original = desc.get;

  const stripFn = (self: RuntimeValueLike, mode: 'both' | 'left' | 'right') =>
    new FunctionValue((args) => {
      const a = args[0];
      let chars: string | null = null;
      if (a && a.type === 'StringValue') chars = a.value as string;
      else if (a && a.type !== 'NullValue' && a.type !== 'UndefinedValue')
        throw new Error('strip arg must be None or str');
      return new StringValue(pyStrip(self.value as string, chars, mode));
    });

  Object.defineProperty(proto, 'builtins', {
    configurable: true,
    get(this: RuntimeValueLike & { _pyBuiltins?: Map<string, unknown> }) {
      if (this._pyBuiltins) return this._pyBuiltins;
      const m = new Map(original.call(this) as Map<string, unknown>);
      m.set('strip', stripFn(this, 'both'));
      m.set('lstrip', stripFn(this, 'left'));
      m.set('rstrip', stripFn(this, 'right'));
      this._pyBuiltins = m;
      return m;
    },
  });

  patchLoopControls();

  type ApplyFilter = (
    operand: RuntimeValueLike,
    filterNode: { type: string; value?: unknown },
    env: unknown,
  ) => RuntimeValueLike;
  const iproto = Interpreter.prototype as unknown as { applyFilter: ApplyFilter };
  const applyFilter = iproto.applyFilter;
  if (typeof applyFilter !== 'function')
    throw new Error('@huggingface/jinja changed: Interpreter.applyFilter not found');
  iproto.applyFilter = function (this: unknown, operand, filterNode, e) {
    if (filterNode.type === 'Identifier' && filterNode.value === 'trim' && operand.type === 'StringValue') {
      return new StringValue(pyStrip(operand.value as string));
    }
    return applyFilter.call(this, operand, filterNode, e);
  };
}

/** Statement nodes: they print what their blocks render, never a value of their own. */
const STATEMENTS = new Set([
  'Program',
  'If',
  'For',
  'Break',
  'Continue',
  'Set',
  'Macro',
  'Comment',
  'CallStatement',
  'FilterStatement',
]);
const PARTIAL = Symbol('partialOutput');

interface ForNode {
  type: string;
  body: Array<{ type: string }>;
  defaultBlock: Array<{ type: string }>;
}
interface InterpreterProto {
  evaluate: (node: { type: string }, env: unknown) => RuntimeValueLike;
  evaluateBlock: (statements: Array<{ type: string }>, env: unknown) => RuntimeValueLike;
  evaluateFor: (node: ForNode, env: unknown) => RuntimeValueLike;
}
/** Per running loop: a break is due at the next iteration; some iteration ran its body to the end. */
interface LoopState {
  breakDue: boolean;
  completed: boolean;
}

function patchLoopControls(): void {
  const iproto = Interpreter.prototype as unknown as InterpreterProto;
  const { evaluate, evaluateFor } = iproto;
  if (typeof iproto.evaluateBlock !== 'function' || typeof evaluateFor !== 'function') {
    throw new Error('@huggingface/jinja changed: evaluateBlock/evaluateFor not found');
  }
  const controlClass = (type: string): (new () => Error) => {
    try {
      evaluate.call(new Interpreter() as unknown as InterpreterProto, { type }, new Environment());
    } catch (e) {
      return (e as object).constructor as new () => Error;
    }
    throw new Error(`@huggingface/jinja changed: ${type} does not throw`);
  };
  const Break = controlClass('Break');
  const Continue = controlClass('Continue');
  const StringValue = (new Environment().set('s', '') as unknown as RuntimeValueLike).constructor as StringValueCtor;
  const loopBodies = new WeakSet<object>();
  const loops: LoopState[] = []; // rendering is synchronous, so one stack serves every interpreter

  // jinja2 runs a loop's `else` unless some iteration reached the end of its body (one left by break or
  // continue does not count), so the library's own else handling is bypassed.
  iproto.evaluateFor = function (this: InterpreterProto, node, env) {
    loopBodies.add(node.body);
    const state: LoopState = { breakDue: false, completed: false };
    const elseBlock = node.defaultBlock;
    loops.push(state);
    node.defaultBlock = [];
    let out: RuntimeValueLike;
    try {
      out = evaluateFor.call(this, node, env);
    } finally {
      node.defaultBlock = elseBlock;
      loops.pop();
    }
    if (state.completed || elseBlock.length === 0) return out;
    return new StringValue(
      String(out.value) + String(this.evaluateBlock(elseBlock, new Environment(env as Environment)).value),
    );
  };

  // A loop body that hits break/continue returns what it printed so far; after a break the next
  // iteration's body throws at once, which the library's loop takes as its break.
  iproto.evaluateBlock = function (this: InterpreterProto, statements, env) {
    const loop = loopBodies.has(statements) ? loops.at(-1) : undefined;
    if (loop?.breakDue) throw new Break();
    // jinja2 runs each iteration in a scope of its own: a `set` in the body is gone at the next one
    // (the library keeps one scope for the whole loop).
    if (loop) env = new Environment(env as Environment);
    let out = '';
    try {
      for (const st of statements) {
        const v = this.evaluate(st, env);
        if (v.type === 'UndefinedValue') continue;
        if (v.type === 'NullValue' && STATEMENTS.has(st.type)) continue;
        out += pyStr(v);
      }
    } catch (e) {
      if (!(e instanceof Break) && !(e instanceof Continue)) throw e;
      const partial = out + ((e as { [PARTIAL]?: string })[PARTIAL] ?? '');
      if (!loop) {
        (e as { [PARTIAL]?: string })[PARTIAL] = partial;
        throw e;
      }
      if (e instanceof Break) loop.breakDue = true;
      return new StringValue(partial);
    }
    if (loop) loop.completed = true;
    return new StringValue(out);
  };
}

/** str(value) as jinja2 prints it: True/False/None, and Python reprs inside lists and dicts. */
function pyStr(v: RuntimeValueLike): string {
  switch (v.type) {
    case 'StringValue':
      return v.value as string;
    case 'ArrayValue':
    case 'ObjectValue':
      return pyRepr(v);
    default:
      return v.type === 'BooleanValue' || v.type === 'NullValue' ? pyRepr(v) : String(v);
  }
}

function pyRepr(v: RuntimeValueLike): string {
  switch (v.type) {
    case 'NullValue':
    case 'UndefinedValue':
      return 'None';
    case 'BooleanValue':
      return v.value ? 'True' : 'False';
    case 'StringValue':
      return pyStringRepr(v.value as string);
    case 'ArrayValue':
      return `[${(v.value as RuntimeValueLike[]).map(pyRepr).join(', ')}]`;
    case 'TupleValue': {
      const items = (v.value as RuntimeValueLike[]).map(pyRepr);
      return items.length === 1 ? `(${items[0]},)` : `(${items.join(', ')})`;
    }
    case 'ObjectValue':
      return `{${[...(v.value as Map<string, RuntimeValueLike>)].map(([k, x]) => `${pyStringRepr(k)}: ${pyRepr(x)}`).join(', ')}}`;
    default:
      return String(v);
  }
}

/** Python's repr(str): quote choice, escapes, and \x/\u/\U for characters str.isprintable() rejects. */
export function pyStringRepr(s: string): string {
  const quote = s.includes("'") && !s.includes('"') ? '"' : "'";
  let out = quote;
  for (const ch of s) {
    const cp = ch.codePointAt(0) as number;
    if (ch === quote || ch === '\\') out += '\\' + ch;
    else if (ch === '\n') out += '\\n';
    else if (ch === '\r') out += '\\r';
    else if (ch === '\t') out += '\\t';
    else if (ch !== ' ' && /^[\p{C}\p{Z}]$/u.test(ch)) {
      out += cp < 0x100 ? `\\x${hex(cp, 2)}` : cp < 0x10000 ? `\\u${hex(cp, 4)}` : `\\U${hex(cp, 8)}`;
    } else out += ch;
  }
  return out + quote;
}

const hex = (n: number, w: number) => n.toString(16).padStart(w, '0');
