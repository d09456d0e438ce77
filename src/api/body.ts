// Request bodies: read through one size cap that stops at the limit (a body over it is never
// buffered whole), parsed losslessly where u64 hashes may appear, always a 4xx on bad input.
import { IncomingMessage } from 'node:http';
import { Readable } from 'node:stream';
import type { Context } from 'hono';
import { type JsonValue, parseJson } from '../common/json.js';
import { ApiError } from './errors.js';
import { OpenAIError } from './openai.js';
import { parseTokenIdBody } from './token-body.js';

/**
 * The body's bytes, or null as soon as it passes `limit` (declared or received): reading stops
 * there. A source that fails mid-body (the client went away) throws.
 */
export async function readCapped(
  source: AsyncIterable<Uint8Array> | Readable | null,
  limit: number,
  declaredLength?: string | null,
): Promise<Buffer | null> {
  const declared = Number(declaredLength ?? NaN);
  if (Number.isFinite(declared) && declared > limit) return null;
  if (source === null) return Buffer.alloc(0);
  if (source instanceof Readable) return readStream(source, limit);
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of source) {
    size += chunk.byteLength;
    if (size > limit) return null;
    chunks.push(chunk);
  }
  return whole(chunks, size);
}

const ignore = (): void => undefined;

// One read is the common case: its buffer is the body already, no copy.
const whole = (chunks: Uint8Array[], size: number): Buffer =>
  chunks.length === 1 && Buffer.isBuffer(chunks[0]) ? chunks[0] : Buffer.concat(chunks, size);

/**
 * A Node stream (an IncomingMessage on the hot path) read through its events: its async iterator
 * costs about 2.5 KB of garbage and several microseconds per request (docs/profile.md, round six).
 * Same rules as the loop above: over the limit reading stops (another stream is destroyed, as the
 * loop's early return does), a failure or an early close throws.
 */
function readStream(source: Readable, limit: number): Promise<Buffer | null> {
  if (source.readableEnded) return Promise.resolve(Buffer.alloc(0));
  if (source.destroyed) return Promise.reject(new Error('the stream closed before its end'));
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const stop = () => {
      source.off('data', onData);
      source.off('end', onEnd);
      source.off('error', onError);
      source.off('close', onClose);
    };
    const onData = (chunk: Buffer) => {
      size += chunk.byteLength;
      if (size > limit) {
        stop();
        // A request's socket must stay for its 413: the rest of the body is left unread, and the
        // answer closes the connection (Node's own iterator keeps the socket the same way).
        if (source instanceof IncomingMessage) source.pause();
        else {
          // A destroyed body may still emit an error (undici's: "Request aborted"): with no listener
          // left, that would be an uncaught exception. The loop's iterator kept one for the same reason.
          source.on('error', ignore);
          source.destroy();
        }
        resolve(null);
      } else chunks.push(chunk);
    };
    const onEnd = () => {
      stop();
      resolve(whole(chunks, size));
    };
    const onError = (err: Error) => {
      stop();
      reject(err);
    };
    const onClose = () => {
      stop();
      reject(new Error('the stream closed before its end'));
    };
    source.on('data', onData);
    source.on('end', onEnd);
    source.on('error', onError);
    source.on('close', onClose);
  });
}

const tooLargeMessage = (limit: number) => `request body exceeds ${limit} bytes`;

/** node:http hot path: the OpenAI body's bytes (413 over the limit, 499 when the client left). */
export async function readRequestBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  let buf: Buffer | null;
  try {
    buf = await readCapped(req, limit, req.headers['content-length']);
  } catch {
    throw new OpenAIError(499, 'client closed the request', 'client_error');
  }
  if (buf === null) throw new OpenAIError(413, tooLargeMessage(limit), 'invalid_request_error', null, 'body_too_large');
  return buf;
}

async function honoBody(c: Context, limit: number): Promise<Buffer | null> {
  const stream = c.req.raw.body as AsyncIterable<Uint8Array> | null;
  try {
    return await readCapped(stream, limit, c.req.header('content-length'));
  } catch {
    // The client went away (or the request timed out) mid-body: nobody is left to answer.
    throw new ApiError(499, 'client_closed_request', 'the client closed the request before its body arrived');
  }
}

/** Indexer routes: JSON with u64 hashes kept exact (Conductor error shape). */
export async function readJson(c: Context, maxBytes: number): Promise<JsonValue> {
  const buf = await honoBody(c, maxBytes);
  if (buf === null) throw new ApiError(413, 'body_too_large', tooLargeMessage(maxBytes));
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

/** An optional OpenAI-style JSON object: an empty body is `{}`. */
export async function readOptionalOpenAIJson(c: Context, maxBytes: number): Promise<Record<string, unknown>> {
  const buf = await honoBody(c, maxBytes);
  if (buf === null)
    throw new OpenAIError(413, tooLargeMessage(maxBytes), 'invalid_request_error', null, 'body_too_large');
  return buf.byteLength === 0 ? {} : parseOpenAIBody(buf);
}

/** OpenAI-style bodies on hono routes (/v1/route, /debug/route): a JSON object, OpenAI errors. */
export async function readOpenAIJson(c: Context, maxBytes: number): Promise<Record<string, unknown>> {
  const buf = await honoBody(c, maxBytes);
  if (buf === null)
    throw new OpenAIError(413, tooLargeMessage(maxBytes), 'invalid_request_error', null, 'body_too_large');
  return parseOpenAIBody(buf);
}

/** Where a body holds a token-id prompt, the scanner reads it (src/api/token-body.ts). */
const PROMPT_KEY = Buffer.from('"prompt"');

/**
 * Parse an OpenAI request body (token ids are small: plain JSON; a token-id prompt comes as
 * TokenIds). `completion`: false for chat bodies, which have no prompt to scan for.
 */
export function parseOpenAIBody(buf: Buffer, completion = true): Record<string, unknown> {
  if (completion && buf.indexOf(PROMPT_KEY) >= 0) {
    const fast = parseTokenIdBody(buf);
    if (fast !== null) return fast;
  }
  let raw: unknown;
  try {
    raw = JSON.parse(buf.toString('utf8'));
  } catch (err) {
    throw new OpenAIError(
      400,
      `request body is not valid JSON: ${(err as Error).message}`,
      'invalid_request_error',
      'body',
    );
  }
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw))
    throw new OpenAIError(400, 'request body must be a JSON object', 'invalid_request_error', 'body');
  return raw as Record<string, unknown>;
}

/**
 * The body as the engine gets it after a rewrite (alias, tenant salt). What JSON cannot carry
 * faithfully is refused rather than changed: a number JSON.parse made Infinity (1e400) would be
 * written as null, and nesting deeper than the stack makes JSON.stringify throw.
 */
export function reserialize(body: Record<string, unknown>): Buffer {
  let text: string;
  try {
    text = JSON.stringify(body, (_k, v: unknown) => {
      if (typeof v === 'number' && !Number.isFinite(v))
        throw new OpenAIError(
          400,
          'the body holds a number JSON cannot represent (e.g. 1e400)',
          'invalid_request_error',
          'body',
        );
      return v;
    });
  } catch (err) {
    if (err instanceof OpenAIError) throw err;
    throw new OpenAIError(400, 'the body nests too deeply to forward', 'invalid_request_error', 'body');
  }
  return Buffer.from(text);
}
