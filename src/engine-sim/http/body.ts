// Request bodies: bounded read, parsed as JSON whatever the content-type (curl -d sends a form
// type), objects only.
import type { IncomingMessage } from 'node:http';
import { HttpError, badRequest } from './errors.js';

const MAX_BODY_BYTES = 64 * 1024 * 1024;

export async function readJsonObject(req: IncomingMessage): Promise<Record<string, unknown>> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY_BYTES) throw new HttpError(413, `request body exceeds ${MAX_BODY_BYTES} bytes`);
    chunks.push(chunk as Buffer);
  }
  let value: unknown;
  try {
    value = JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch (err) {
    throw badRequest(`invalid JSON body: ${(err as Error).message}`);
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw badRequest('request body must be a JSON object');
  return value as Record<string, unknown>;
}
