// The engine's own account of a request's prompt: `usage.prompt_tokens` and
// `usage.prompt_tokens_details.cached_tokens`, read from the tail of the response bytes as they pass
// through (a JSON body or an SSE stream whose last data event carries usage). Only a bounded tail is
// kept, and nothing is parsed until the end: the proxy's stream is not slowed or changed.

/** Bytes kept from the end of a response; usage sits in its last few hundred. */
export const USAGE_TAIL_BYTES = 8192;

export interface EngineUsage {
  promptTokens: number;
  /** null when the engine did not report prompt_tokens_details (vLLM without --enable-prompt-tokens-details). */
  cachedTokens: number | null;
}

export class UsageTail {
  private chunks: Buffer[] = [];
  private bytes = 0;

  push(chunk: Buffer): void {
    this.chunks.push(chunk);
    this.bytes += chunk.length;
    // Drop whole chunks from the front while what remains still covers the tail.
    while (this.chunks.length > 1 && this.bytes - this.chunks[0].length >= USAGE_TAIL_BYTES)
      this.bytes -= this.chunks.shift()!.length;
  }

  /** The last usage in the response, or null when it carried none (e.g. a stream without include_usage). */
  read(): EngineUsage | null {
    const all = Buffer.concat(this.chunks);
    return parseUsage(all.subarray(Math.max(0, all.length - USAGE_TAIL_BYTES)).toString('latin1'));
  }
}

const PROMPT = /"prompt_tokens"\s*:\s*(\d+)/g;
const CACHED = /"cached_tokens"\s*:\s*(\d+)/g;

/** The last `prompt_tokens` in the text and the `cached_tokens` that follows it, if any. */
export function parseUsage(text: string): EngineUsage | null {
  let prompt: RegExpExecArray | null = null;
  for (let m = PROMPT.exec(text); m; m = PROMPT.exec(text)) prompt = m;
  PROMPT.lastIndex = 0;
  if (!prompt) return null;
  CACHED.lastIndex = prompt.index;
  const cached = CACHED.exec(text);
  CACHED.lastIndex = 0;
  return { promptTokens: Number(prompt[1]), cachedTokens: cached ? Number(cached[1]) : null };
}
