// Request bodies: read through the project's one capped reader (src/api/body.ts), parsed as JSON
// whatever the content-type (curl -d sends a form type), objects only.
import type { IncomingMessage } from 'node:http';
import { readCapped } from '../../api/body.js';
import { HttpError, badRequest } from './errors.js';

const MAX_BODY_BYTES = 64 * 1024 * 1024;

export async function readJsonObject(req: IncomingMessage): Promise<Record<string, unknown>> {
  const bytes = await readCapped(req, MAX_BODY_BYTES, req.headers['content-length']);
  if (bytes === null) throw new HttpError(413, `request body exceeds ${MAX_BODY_BYTES} bytes`);
  let value: unknown;
  try {
    value = JSON.parse(bytes.toString('utf8'));
  } catch (err) {
    throw badRequest(`invalid JSON body: ${(err as Error).message}`);
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value))
    throw badRequest('request body must be a JSON object');
  return value as Record<string, unknown>;
}
