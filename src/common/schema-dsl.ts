// A tiny schema language: one declaration drives validation (errors name the key path), defaults,
// and the generated configuration reference (docs/configuration.md).
export type Spec = StringSpec | NumberSpec | BooleanSpec | ObjectSpec | ArraySpec;

interface Base {
  doc: string;
  /** Omitted keys take the default; keys with neither default nor `optional` are required. */
  optional?: boolean;
  example?: unknown;
}
export interface StringSpec extends Base {
  kind: 'string';
  /** A credential: errors never show the value (a token written as a YAML number must not leak into logs). */
  secret?: boolean;
  default?: string;
  enum?: readonly string[];
  pattern?: RegExp;
  patternDoc?: string;
}
export interface NumberSpec extends Base {
  kind: 'number';
  default?: number;
  min?: number;
  max?: number;
  integer?: boolean;
}
export interface BooleanSpec extends Base {
  kind: 'boolean';
  default?: boolean;
}
export interface ObjectSpec extends Base {
  kind: 'object';
  fields: Record<string, Spec>;
}
export interface ArraySpec extends Base {
  kind: 'array';
  items: Spec;
  minItems?: number;
  default?: unknown[];
}

// The factories keep the literal types of their options (enums, defaults, `optional: true`), so
// Infer<typeof SCHEMA> is the exact shape validate() returns: config types are never written twice.
type Opts<S extends Spec> = Omit<S, 'kind' | 'doc'>;
export const str = <const O extends Opts<StringSpec> = {}>(doc: string, o: O = {} as O) => ({
  kind: 'string' as const,
  doc,
  ...o,
});
export const num = <const O extends Opts<NumberSpec> = {}>(doc: string, o: O = {} as O) => ({
  kind: 'number' as const,
  doc,
  ...o,
});
export const int = <const O extends Omit<Opts<NumberSpec>, 'integer'> = {}>(doc: string, o: O = {} as O) => ({
  kind: 'number' as const,
  doc,
  integer: true,
  ...o,
});
export const bool = <const O extends Opts<BooleanSpec> = {}>(doc: string, o: O = {} as O) => ({
  kind: 'boolean' as const,
  doc,
  ...o,
});
export const obj = <const F extends Record<string, Spec>, const O extends Omit<Opts<ObjectSpec>, 'fields'> = {}>(
  doc: string,
  fields: F,
  o: O = {} as O,
) => ({ kind: 'object' as const, doc, fields, ...o });
export const arr = <const I extends Spec, const O extends Omit<Opts<ArraySpec>, 'items'> = {}>(
  doc: string,
  items: I,
  o: O = {} as O,
) => ({ kind: 'array' as const, doc, items, ...o });

/** A key the validated value may lack: optional and without a default. */
type Omittable<S> = S extends { optional: true } ? (S extends { default: unknown } ? false : true) : false;
// Named keys only: the factories' constraint (Record<string, Spec>) adds an index signature.
type Named<K> = string extends K ? never : number extends K ? never : K;
type Fields<F> = { [K in keyof F as Omittable<F[K]> extends true ? never : Named<K>]: Infer<F[K]> } & {
  [K in keyof F as Omittable<F[K]> extends true ? Named<K> : never]?: Infer<F[K]>;
};
type Flat<T> = { -readonly [K in keyof T]: T[K] };

/** The value validate() returns for a spec (defaults applied). */
export type Infer<S> = S extends { kind: 'string'; enum: readonly (infer E)[] }
  ? E
  : S extends { kind: 'string' }
    ? string
    : S extends { kind: 'number' }
      ? number
      : S extends { kind: 'boolean' }
        ? boolean
        : S extends { kind: 'array'; items: infer I }
          ? Infer<I>[]
          : S extends { kind: 'object'; fields: infer F }
            ? Flat<Fields<F>>
            : never;

export interface ConfigError {
  path: string;
  message: string;
}

function closest(name: string, options: string[]): string | null {
  let best: string | null = null;
  let bestD = 3;
  for (const o of options) {
    const d = editDistance(name, o);
    if (d < bestD) {
      bestD = d;
      best = o;
    }
  }
  return best;
}

function editDistance(a: string, b: string): number {
  const dp = Array.from({ length: a.length + 1 }, (_, i) => [i, ...new Array<number>(b.length).fill(0)]);
  for (let j = 1; j <= b.length; j++) dp[0][j] = j;
  for (let i = 1; i <= a.length; i++)
    for (let j = 1; j <= b.length; j++)
      dp[i][j] = Math.min(dp[i - 1][j] + 1, dp[i][j - 1] + 1, dp[i - 1][j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
  return dp[a.length][b.length];
}

const typeName = (v: unknown) =>
  v === null
    ? 'null'
    : Array.isArray(v)
      ? 'a list'
      : typeof v === 'object'
        ? 'a mapping'
        : `${typeof v} ${JSON.stringify(v)}`;

/** Validate and fill defaults. Returns the value with defaults applied, collecting every error. */
export function validate(spec: Spec, value: unknown, path: string, errors: ConfigError[]): unknown {
  const fail = (message: string) => {
    errors.push({ path: path || '(root)', message });
    return undefined;
  };
  if (value === undefined || value === null) {
    if ('default' in spec && spec.default !== undefined) return structuredClone(spec.default);
    if (spec.optional) return undefined;
    if (spec.kind === 'object') return validate(spec, {}, path, errors);
    return fail('is required');
  }
  switch (spec.kind) {
    case 'string': {
      if (typeof value !== 'string')
        return fail(
          `must be a string, got ${spec.secret ? `a ${typeof value} (not shown: a secret)` : typeName(value)}`,
        );
      if (spec.enum && !spec.enum.includes(value))
        return fail(`must be one of ${spec.enum.join(', ')}, got "${value}"`);
      if (spec.pattern && !spec.pattern.test(value))
        return fail(`must be ${spec.patternDoc ?? `like ${spec.pattern}`}, got "${value}"`);
      return value;
    }
    case 'number': {
      if (typeof value !== 'number' || !Number.isFinite(value)) return fail(`must be a number, got ${typeName(value)}`);
      if (spec.integer && !Number.isInteger(value)) return fail(`must be an integer, got ${value}`);
      if (spec.min !== undefined && value < spec.min) return fail(`must be >= ${spec.min}, got ${value}`);
      if (spec.max !== undefined && value > spec.max) return fail(`must be <= ${spec.max}, got ${value}`);
      return value;
    }
    case 'boolean':
      if (typeof value !== 'boolean') return fail(`must be true or false, got ${typeName(value)}`);
      return value;
    case 'array': {
      if (!Array.isArray(value)) return fail(`must be a list, got ${typeName(value)}`);
      if (spec.minItems !== undefined && value.length < spec.minItems)
        return fail(`must have at least ${spec.minItems} item(s)`);
      return value.map((v, i) => validate(spec.items, v, `${path}[${i}]`, errors));
    }
    case 'object': {
      if (typeof value !== 'object' || Array.isArray(value)) return fail(`must be a mapping, got ${typeName(value)}`);
      const out: Record<string, unknown> = {};
      const known = Object.keys(spec.fields);
      for (const k of Object.keys(value)) {
        if (!(k in spec.fields)) {
          const hint = closest(k, known);
          errors.push({
            path: path ? `${path}.${k}` : k,
            message: `unknown key${hint ? ` (did you mean "${hint}"?)` : ''}`,
          });
        }
      }
      for (const [k, s] of Object.entries(spec.fields)) {
        const v = validate(s, (value as Record<string, unknown>)[k], path ? `${path}.${k}` : k, errors);
        if (v !== undefined) out[k] = v;
      }
      return out;
    }
  }
}

/** Every key path in the schema (`models[].instances[].url` style), for docs and their test. */
export function keyPaths(spec: Spec, path = ''): string[] {
  if (spec.kind === 'object')
    return Object.entries(spec.fields).flatMap(([k, s]) => [
      path ? `${path}.${k}` : k,
      ...keyPaths(s, path ? `${path}.${k}` : k),
    ]);
  if (spec.kind === 'array') return keyPaths(spec.items, `${path}[]`);
  return [];
}

/** Markdown reference: one row per key with type, default and description. */
export function renderReference(spec: Spec): string {
  const rows: string[] = [];
  const walk = (s: Spec, path: string) => {
    if (path) {
      const type =
        s.kind === 'string' && s.enum
          ? s.enum.map((e) => `\`${e}\``).join(' \\| ')
          : s.kind === 'number' && s.integer
            ? 'integer'
            : s.kind === 'array'
              ? 'list'
              : s.kind === 'object'
                ? 'mapping'
                : s.kind;
      const bounds =
        s.kind === 'number' && (s.min !== undefined || s.max !== undefined)
          ? ` (${s.min ?? '-inf'}..${s.max ?? 'inf'})`
          : '';
      const def =
        'default' in s && s.default !== undefined
          ? `\`${JSON.stringify(s.default)}\``
          : s.optional || s.kind === 'object'
            ? ''
            : '**required**';
      rows.push(`| \`${path}\` | ${type}${bounds} | ${def} | ${s.doc.replace(/\|/g, '\\|')} |`);
    }
    if (s.kind === 'object') for (const [k, f] of Object.entries(s.fields)) walk(f, path ? `${path}.${k}` : k);
    if (s.kind === 'array') walk(s.items, `${path}[]`);
  };
  walk(spec, '');
  return ['| key | type | default | meaning |', '|---|---|---|---|', ...rows].join('\n');
}
