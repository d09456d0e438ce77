// Field readers for JSON bodies: each names the offending field in its 400.
import type { JsonValue } from '../common/json.js';
import { toU64 } from '../common/u64.js';
import { ApiError, badField } from './errors.js';

export type JsonObject = { [key: string]: JsonValue };

export function asObject(v: JsonValue, what = 'body'): JsonObject {
  if (v === null || typeof v !== 'object' || Array.isArray(v))
    throw new ApiError(400, 'invalid_body', `${what} must be a JSON object`);
  return v as JsonObject;
}

function present(o: JsonObject, f: string): boolean {
  return o[f] !== undefined && o[f] !== null;
}

/** First present field among aliases, with the name it was found under. */
export function pick(o: JsonObject, ...names: string[]): [string, JsonValue] | undefined {
  for (const n of names) if (present(o, n)) return [n, o[n]];
  return undefined;
}

/** The first present alias, or undefined; a 400 naming the first alias when required and absent. */
function lookup(o: JsonObject, names: string | string[], required?: boolean): [string, JsonValue] | undefined {
  const list = Array.isArray(names) ? names : [names];
  const found = pick(o, ...list);
  if (!found && required) throw badField(list[0], 'is required');
  return found;
}

export function str(
  o: JsonObject,
  names: string | string[],
  opts: { required?: boolean; max?: number } = {},
): string | undefined {
  const found = lookup(o, names, opts.required);
  if (!found) return undefined;
  const [name, v] = found;
  if (typeof v !== 'string') throw badField(name, 'must be a string');
  if (v.length > (opts.max ?? 1024)) throw badField(name, `is longer than ${opts.max ?? 1024} characters`);
  return v;
}

/** A string id that some clients send as a number (Dynamo's numeric instance ids). */
export function id(o: JsonObject, names: string | string[], opts: { required?: boolean } = {}): string | undefined {
  const found = lookup(o, names, opts.required);
  if (!found) return undefined;
  const [name, v] = found;
  if (typeof v === 'number' && Number.isSafeInteger(v)) return String(v);
  if (typeof v === 'bigint') return v.toString();
  if (typeof v !== 'string' || v === '' || v.length > 256)
    throw badField(name, 'must be a non-empty string (at most 256 characters) or an integer');
  return v;
}

export function int(
  o: JsonObject,
  names: string | string[],
  opts: { required?: boolean; min?: number; max?: number; def?: number } = {},
): number | undefined {
  const found = lookup(o, names, opts.required);
  if (!found) return opts.def;
  const [name, v] = found;
  if (typeof v !== 'number' || !Number.isInteger(v)) throw badField(name, 'must be an integer');
  if (opts.min !== undefined && v < opts.min) throw badField(name, `must be >= ${opts.min}`);
  if (opts.max !== undefined && v > opts.max) throw badField(name, `must be <= ${opts.max}`);
  return v;
}

/** u32 token ids; any other element is a 400 naming its index. */
export function tokenIds(o: JsonObject, name: string, maxTokens: number): Uint32Array {
  const v = o[name];
  if (v === undefined || v === null) throw badField(name, 'is required');
  if (!Array.isArray(v)) throw badField(name, 'must be an array of token ids');
  if (v.length > maxTokens)
    throw new ApiError(413, 'too_many_tokens', `${name} holds ${v.length} tokens, the limit is ${maxTokens}`, name);
  const out = new Uint32Array(v.length);
  for (let i = 0; i < v.length; i++) {
    const t = v[i];
    if (typeof t !== 'number' || !Number.isInteger(t) || t < 0 || t > 0xffffffff)
      throw badField(`${name}[${i}]`, 'must be a u32 integer');
    out[i] = t;
  }
  return out;
}

/** u64 hashes as integers (exact, parsed losslessly), decimal or 0x strings, or negative i64. */
export function hashList(o: JsonObject, names: string[], maxItems: number): bigint[] {
  const found = pick(o, ...names);
  if (!found) throw badField(names[0], 'is required');
  const [name, v] = found;
  if (!Array.isArray(v)) throw badField(name, 'must be an array of u64 hashes');
  if (v.length > maxItems)
    throw new ApiError(413, 'too_many_hashes', `${name} holds ${v.length} hashes, the limit is ${maxItems}`, name);
  return v.map((x, i) => {
    const h = toU64(x);
    if (h === null) throw badField(`${name}[${i}]`, 'must be a u64 (integer, decimal string or 0x hex string)');
    return h;
  });
}

export function optHash(o: JsonObject, name: string): bigint | null {
  if (!present(o, name)) return null;
  const h = toU64(o[name]);
  if (h === null) throw badField(name, 'must be a u64 (integer, decimal string or 0x hex string)');
  return h;
}
