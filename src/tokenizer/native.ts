// HF's Rust `tokenizers` through its Node binding: encode/decode run as async tasks on libuv's thread
// pool, so a long prompt costs the event loop only the copy of its ids.
import { Tokenizer } from 'tokenizers';

export class NativeTokenizer {
  private constructor(private readonly tok: Tokenizer) {}

  /** Parses tokenizer.json synchronously (about half a second for a 150k vocabulary): load time only. */
  static fromFile(path: string): NativeTokenizer {
    return new NativeTokenizer(Tokenizer.fromFile(path));
  }

  async encode(text: string, addSpecialTokens: boolean): Promise<Uint32Array> {
    const enc = await this.tok.encode(text, null, { addSpecialTokens });
    return Uint32Array.from(enc.getIds());
  }

  /** One trip to the thread pool for many texts (the crate parallelises the batch itself). */
  async encodeBatch(texts: string[], addSpecialTokens: boolean): Promise<Uint32Array[]> {
    if (texts.length === 0) return [];
    if (texts.length === 1) return [await this.encode(texts[0], addSpecialTokens)];
    const encs = await this.tok.encodeBatch(texts, { addSpecialTokens });
    return encs.map((e) => Uint32Array.from(e.getIds()));
  }

  decode(ids: ArrayLike<number>, skipSpecialTokens: boolean): Promise<string> {
    return this.tok.decode(Array.from(ids), skipSpecialTokens);
  }

  tokenToId(token: string): number | null {
    return this.tok.tokenToId(token);
  }
}
