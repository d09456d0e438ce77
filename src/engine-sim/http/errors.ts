// OpenAI/vLLM-style errors: `{"error": {"message", "type", "param", "code"}}` with the HTTP status
// as `code`, as vLLM's ErrorResponse does.
import type { ServerResponse } from 'node:http';

const TYPES: Record<number, string> = {
  400: 'BadRequestError',
  404: 'NotFoundError',
  405: 'MethodNotAllowed',
  413: 'RequestEntityTooLarge',
  500: 'InternalServerError',
  503: 'ServiceUnavailableError',
};

export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly param: string | null = null,
  ) {
    super(message);
  }
}

export const badRequest = (message: string, param: string | null = null): HttpError => new HttpError(400, message, param);

export function errorBody(status: number, message: string, param: string | null = null): string {
  return JSON.stringify({ error: { message, type: TYPES[status] ?? 'Error', param, code: status } });
}

export function sendError(res: ServerResponse, err: HttpError): void {
  if (res.headersSent) {
    res.end();
    return;
  }
  res.writeHead(err.status, { 'content-type': 'application/json' });
  res.end(errorBody(err.status, err.message, err.param));
}
