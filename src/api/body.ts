// Request bodies: size-capped, parsed losslessly (u64 hashes survive), always a 4xx on bad input.
import type { Context } from 'hono';
import { type JsonValue, parseJson } from '../common/json.js';
import { ApiError } from './errors.js';

export async function readJson(c: Context, maxBytes: number): Promise<JsonValue> {
  const declared = Number(c.req.header('content-length') ?? NaN);
  if (Number.isFinite(declared) && declared > maxBytes) throw tooLarge(maxBytes);
  const buf = await c.req.arrayBuffer();
  if (buf.byteLength > maxBytes) throw tooLarge(maxBytes);
  if (buf.byteLength === 0) throw new ApiError(400, 'invalid_json', 'request body is empty; expected JSON');
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(buf);
  } catch {
    throw new ApiError(400, 'invalid_json', 'request body is not valid UTF-8');
  }
  try {
    return parseJson(text);
  } catch (err) {
    throw new ApiError(400, 'invalid_json', `request body is not valid JSON: ${(err as Error).message}`);
  }
}

function tooLarge(maxBytes: number): ApiError {
  return new ApiError(413, 'body_too_large', `request body exceeds ${maxBytes} bytes`);
}
