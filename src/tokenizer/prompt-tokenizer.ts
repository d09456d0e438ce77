// The PromptTokenizer: render (chat-template.ts), cut at special tokens (segments.ts), look segments up
// (segment-cache.ts), encode only the misses natively (native.ts), in pieces (pieces.ts), concatenate.
import { ChatTemplateRenderer } from './chat-template.js';
import { PromptTooLongError } from './errors.js';
import { readTokenizerFiles, type TokenizerFiles } from './files.js';
import { NativeTokenizer } from './native.js';
import { isExactCut, PIECE_CHARS, type PieceOptions } from './pieces.js';
import { SegmentCache, segmentKey } from './segment-cache.js';
import { SegmentSplitter } from './segments.js';
import { chatSizeFloor } from './size-floor.js';
import type {
  ChatRequestLike,
  EncodeOptions,
  LoadTokenizerOptions,
  PromptTokenizer,
  TokenizerStats,
  TokenizerSource,
} from './types.js';

const DEFAULT_CACHE_ENTRIES = 65_536;
const DEFAULT_CACHE_BYTES = 64 * 2 ** 20;
/** Chats up to this many characters and messages render inline (~0.1 ms); larger ones one per event-loop turn. */
const INLINE_RENDER_CHARS = 16_384;
const INLINE_RENDER_MESSAGES = 64;

/**
 * Whether a chat's render is certainly small: few characters in all its inputs (the size floor counts
 * them all), and few messages (an empty one still costs a loop iteration).
 */
function rendersInline(req: ChatRequestLike): boolean {
  return req.messages.length <= INLINE_RENDER_MESSAGES && chatSizeFloor(req, Infinity).chars <= INLINE_RENDER_CHARS;
}

export async function loadTokenizer(
  source: TokenizerSource,
  opts: LoadTokenizerOptions = {},
): Promise<PromptTokenizer> {
  const files = readTokenizerFiles(source);
  const renderer = new ChatTemplateRenderer(files.chatTemplates, files.specialTokens);
  const splitter = new SegmentSplitter(files.addedTokens);
  const cache = new SegmentCache(
    opts.segmentCacheEntries ?? DEFAULT_CACHE_ENTRIES,
    opts.segmentCacheBytes ?? DEFAULT_CACHE_BYTES,
  );
  const native = await NativeTokenizer.fromFile(files.tokenizerJsonPath, opts.encodeThreads);
  try {
    const affixes = await completionAffixes(native, files);
    const segmentingExact = await probeSegmenting(native, splitter, files);
    const pieces: PieceOptions = { chars: PIECE_CHARS, exactCuts: files.cutsAreExact && (await probePieces(native)) };
    return new CachedPromptTokenizer(
      files.name,
      native,
      renderer,
      splitter,
      segmentingExact ? cache : null,
      affixes,
      pieces,
    );
  } catch (e) {
    await native.close();
    throw e;
  }
}

class CachedPromptTokenizer implements PromptTokenizer {
  /** Encodes in flight, by segment key: null when one stopped short (over its caller's limit, or failed). */
  private readonly pending = new Map<bigint, Promise<Uint32Array | null>>();
  private hits = 0;
  private misses = 0;
  private closed = false;
  private lastTurn: Promise<void> = Promise.resolve();

  constructor(
    readonly name: string,
    private readonly native: NativeTokenizer,
    private readonly renderer: ChatTemplateRenderer,
    private readonly splitter: SegmentSplitter,
    /** null when the load-time probe found segmenting unsafe for this tokenizer: encode whole texts. */
    private readonly cache: SegmentCache | null,
    private readonly affixes: { prefix: Uint32Array; suffix: Uint32Array },
    private readonly pieces: PieceOptions,
  ) {}

  renderChat(req: ChatRequestLike): string {
    return this.renderer.render(req);
  }

  async encodeChat(req: ChatRequestLike, opts: EncodeOptions = {}): Promise<Uint32Array> {
    this.assertOpen();
    // A small render takes tens of microseconds: only a large one waits for a turn of its own.
    if (!rendersInline(req)) await this.nextTurn();
    // Tokenized without special tokens added: the template already wrote them, as in vLLM's chat path.
    return this.encodeSegmented(this.renderer.render(req), opts.maxTokens ?? Infinity, 0);
  }

  async encodeText(text: string, opts: EncodeOptions = {}): Promise<Uint32Array> {
    this.assertOpen();
    const { prefix, suffix } = this.affixes;
    const body = await this.encodeSegmented(text, opts.maxTokens ?? Infinity, prefix.length + suffix.length);
    if (prefix.length === 0 && suffix.length === 0) return body;
    return concat([prefix, body, suffix]);
  }

  async decode(ids: ArrayLike<number>, opts?: { skipSpecialTokens?: boolean }): Promise<string> {
    this.assertOpen();
    return this.native.decode(ids, opts?.skipSpecialTokens ?? false);
  }

  stats(): TokenizerStats {
    return {
      segmentCacheHits: this.hits,
      segmentCacheMisses: this.misses,
      segmentCacheEntries: this.cache?.size ?? 0,
      encodedChars: this.native.encodedChars,
    };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.cache?.clear();
    await this.native.close();
  }

  /**
   * Rendering is the one CPU-bound step left on this thread (~2-3 ms per 10k tokens). Large requests that
   * arrive together render one per turn of the event loop, not back to back in one long stall: each
   * caller's turn is a setImmediate scheduled only after the previous caller's turn has come.
   */
  private nextTurn(): Promise<void> {
    const turn = this.lastTurn.then(() => new Promise<void>((resolve) => setImmediate(resolve)));
    this.lastTurn = turn;
    return turn;
  }

  private assertOpen(): void {
    if (this.closed) throw new Error(`tokenizer ${this.name} is closed`);
  }

  /**
   * Natively, in pieces, within what is left of the limit once `known` tokens are counted; a stop
   * over it is reported against the whole limit.
   */
  private async encodeMisses(texts: string[], maxTokens: number, known: number): Promise<Uint32Array[]> {
    if (known > maxTokens) throw new PromptTooLongError(known, maxTokens);
    try {
      return await this.native.encodeBatch(texts, false, { pieces: this.pieces, maxTokens: maxTokens - known });
    } catch (e) {
      if (e instanceof PromptTooLongError) throw new PromptTooLongError(e.atLeast + known, maxTokens);
      throw e;
    }
  }

  /** `reserved`: tokens the caller adds around the text (completion affixes), counted against the limit. */
  private async encodeSegmented(text: string, maxTokens: number, reserved: number): Promise<Uint32Array> {
    const cache = this.cache;
    if (!cache || cache.maxEntries <= 0) return (await this.encodeMisses([text], maxTokens, reserved))[0];
    const segments = this.splitter.split(text);
    const parts = new Array<Uint32Array>(segments.length);
    const waits: Array<Promise<void>> = [];
    // Misses are encoded once per distinct text, in one batch, and published in `pending` so a
    // concurrent request needing the same segment waits for this encode instead of repeating it.
    const missTexts: string[] = [];
    const missKeys: bigint[] = [];
    const missSlots = new Map<bigint, number[]>();
    let known = reserved;
    const waitFor = (inflight: Promise<Uint32Array | null>, i: number) =>
      // An encode that stopped at its own caller's limit says nothing about this prompt: encode the segment here.
      inflight.then(async (v) => void (parts[i] = v ?? (await this.encodeMisses([segments[i]], maxTokens, known))[0]));
    for (let i = 0; i < segments.length; i++) {
      const key = segmentKey(segments[i]);
      const ids = cache.get(key);
      if (ids) {
        parts[i] = ids;
        known += ids.length;
        this.hits++;
        continue;
      }
      const slots = missSlots.get(key);
      if (slots) {
        slots.push(i);
        this.hits++;
        continue;
      }
      const inflight = this.pending.get(key);
      if (inflight) {
        this.hits++;
        waits.push(waitFor(inflight, i));
        continue;
      }
      this.misses++;
      missSlots.set(key, [i]);
      missTexts.push(segments[i]);
      missKeys.push(key);
    }
    // Handled now: should this request's own batch fail first, a wait failing later is no unhandled rejection.
    const waited = Promise.all(waits);
    waited.catch(() => undefined);
    if (missTexts.length) {
      const batch = this.encodeMisses(missTexts, maxTokens, known);
      missKeys.forEach((key, j) => {
        this.pending.set(
          key,
          batch.then(
            (all) => all[j],
            () => null, // failures surface through `batch` below
          ),
        );
      });
      try {
        const encoded = await batch;
        missKeys.forEach((key, j) => {
          cache.set(key, encoded[j]);
          for (const slot of missSlots.get(key) ?? []) parts[slot] = encoded[j];
        });
      } finally {
        for (const key of missKeys) this.pending.delete(key);
      }
    }
    if (waits.length) await waited;
    return parts.length === 1 ? parts[0].slice() : concat(parts);
  }
}

function concat(parts: Uint32Array[]): Uint32Array {
  let n = 0;
  for (const p of parts) n += p.length;
  const out = new Uint32Array(n);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/**
 * What vLLM's completions path adds around a prompt (tokenizer(prompt, add_special_tokens=True)).
 * Taken from the tokenizer.json post-processor when it adds tokens (TemplateProcessing and the like).
 * Otherwise BOS, when the config says add_bos_token, or leaves it unsaid but the chat template itself
 * starts prompts with bos_token: that is Meta's Llama 3 release, whose first tokenizer.json (the one
 * @lenml ships) lacked the BOS post-processor that later revisions and vLLM's users get.
 */
async function completionAffixes(
  native: NativeTokenizer,
  files: TokenizerFiles,
): Promise<{ prefix: Uint32Array; suffix: Uint32Array }> {
  const probe = 'kvrouter probe';
  const plain = await native.encode(probe, false);
  const full = await native.encode(probe, true);
  let at = -1;
  for (let i = 0; i + plain.length <= full.length && at < 0; i++) {
    if (plain.every((v, j) => full[i + j] === v)) at = i;
  }
  if (at < 0) throw new Error(`${files.name}: cannot locate the text inside its post-processed encoding`);
  const prefix = full.slice(0, at);
  const suffix = full.slice(at + plain.length);
  if (prefix.length || suffix.length) return { prefix, suffix };

  const bos = typeof files.specialTokens.bos_token === 'string' ? files.specialTokens.bos_token : null;
  const templateText =
    typeof files.chatTemplates === 'string' ? files.chatTemplates : Object.values(files.chatTemplates ?? {}).join('\n');
  const addBos = files.addBosToken ?? (bos !== null && templateText.includes('bos_token'));
  const bosId = files.addedTokens.find((t) => t.content === bos)?.id ?? null;
  return { prefix: addBos && bosId !== null ? Uint32Array.of(bosId) : new Uint32Array(0), suffix: new Uint32Array(0) };
}

/**
 * Load-time check that segment-wise encoding equals whole-text encoding for this tokenizer, on text
 * built to stress segment edges (spaces, newlines, digits and accents right after special tokens).
 * The tests prove it over many chats for the shipped tokenizers; this guards any other tokenizer.json.
 */
async function probeSegmenting(
  native: NativeTokenizer,
  splitter: SegmentSplitter,
  files: TokenizerFiles,
): Promise<boolean> {
  const specials = files.addedTokens
    .filter((t) => t.special)
    .slice(0, 12)
    .map((t) => t.content);
  if (specials.length === 0) return true;
  const bodies = [' leading space', '\n\nnewlines  \n', '123 456', 'ﬁ café é', '  ', 'x', '\t tab', '日本語 😀'];
  let text = ' start';
  specials.forEach((s, i) => {
    text += s + bodies[i % bodies.length] + s + s;
  });
  const whole = await native.encode(text, false);
  const parts = await native.encodeBatch(splitter.split(text), false);
  const joined = concat(parts);
  return joined.length === whole.length && joined.every((v, i) => v === whole[i]);
}

/**
 * Load-time check that text cut at every exact point of pieces.ts tokenizes exactly as the whole, on
 * text that puts every kind of character on both sides of such points. `cutsAreExact` proves it for
 * the tokenizers it recognises; this guards the argument.
 */
async function probePieces(native: NativeTokenizer): Promise<boolean> {
  const sides = [
    'x',
    'X1',
    '9',
    '.',
    "'s",
    '!?',
    'é',
    'e\u0301',
    '\u0301',
    '日本',
    '😀',
    '-',
    '\u00a0',
    '\t',
    '\r',
    '<|',
    '$',
  ];
  let text = '';
  sides.forEach((a, i) => {
    sides.forEach((b, j) => {
      text += `${a}${(i + j) % 3 === 0 ? ' ' : '\n'}${b}${j % 4 === 0 ? '  \n' : ' '}`;
    });
  });
  const cuts = [0];
  for (let i = 1; i < text.length; i++) if (isExactCut(text, i)) cuts.push(i);
  const pieces = cuts.map((c, k) => text.slice(c, cuts[k + 1] ?? text.length));
  const whole = await native.encode(text, false);
  const joined = concat(await native.encodeBatch(pieces, false));
  return cuts.length > 100 && joined.length === whole.length && joined.every((v, i) => v === whole[i]);
}
