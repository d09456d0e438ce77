// One error shape for every non-OpenAI route: {"error": {"code", "message", "field"?}}.
export class ApiError extends Error {
  constructor(
    readonly status: 400 | 401 | 403 | 404 | 405 | 409 | 413 | 415 | 422 | 429 | 500 | 503,
    readonly code: string,
    message: string,
    readonly field?: string,
  ) {
    super(message);
  }

  body(): { error: { code: string; message: string; field?: string } } {
    return { error: { code: this.code, message: this.message, ...(this.field ? { field: this.field } : {}) } };
  }
}

export const badField = (field: string, message: string): ApiError => new ApiError(400, 'invalid_field', `${field}: ${message}`, field);
