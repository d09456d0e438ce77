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
  504: 'Timeout',
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

export const badRequest = (message: string, param: string | null = null): HttpError =>
  new HttpError(400, message, param);

/** The one error shape of the engine's answers (JSON bodies and SSE error events). */
export function errorObject(
  status: number,
  message: string,
  param: string | null = null,
): { error: { message: string; type: string; param: string | null; code: number } } {
  return { error: { message, type: TYPES[status] ?? 'Error', param, code: status } };
}

export function errorBody(status: number, message: string, param: string | null = null): string {
  return JSON.stringify(errorObject(status, message, param));
}

export function sendError(res: ServerResponse, err: HttpError): void {
  if (res.headersSent) {
    res.end();
    return;
  }
  res.writeHead(err.status, { 'content-type': 'application/json' });
  res.end(errorBody(err.status, err.message, err.param));
}
