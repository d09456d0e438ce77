// HF's Rust `tokenizers` (Node binding), hosted in a worker thread.
//
// The binding encodes on libuv's thread pool, but hands ids back as a JS array built element by element
// on the calling thread: ~0.3 us per token, 10-15 ms for a 32k-token prompt. The worker pays that and
// the tokenizer.json load (~0.5 s), and transfers each result as one Uint32Array buffer, so the event
// loop only ever posts a string and receives a buffer. Long texts go in pieces (pieces.ts): requests
// take turns piece by piece, and one with `maxTokens` stops once it is certainly over it.
import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';
import { builtFile } from '../common/built-file.js';
import { PromptTooLongError } from './errors.js';
import type { NativeReady, NativeReply, NativeRequest, NativeWorkerData } from './native-worker.js';
import type { PieceOptions } from './pieces.js';

export interface NativeEncodeOptions {
  /** Cut long texts into pieces (null or absent: each text whole, in one go). */
  pieces?: PieceOptions | null;
  /** Stop, and reject with PromptTooLongError, once the texts together certainly exceed this. */
  maxTokens?: number;
}

export class NativeTokenizer {
  private nextId = 1;
  private readonly pending = new Map<number, { resolve: (r: NativeReply) => void; reject: (e: Error) => void }>();
  private failure: Error | null = null;
  /** Characters handed to the native tokenizer so far (pieces counted and texts tokenized again included). */
  encodedChars = 0;

  private constructor(private readonly worker: Worker) {
    worker.on('message', (r: NativeReply) => {
      const p = this.pending.get(r.id);
      if (!p) return;
      this.pending.delete(r.id);
      this.updateRef();
      this.encodedChars += r.chars ?? 0;
      if (r.error !== undefined) p.reject(new Error(`tokenizer: ${r.error}`));
      else p.resolve(r);
    });
    worker.on('error', (e: unknown) => this.fail(e instanceof Error ? e : new Error(String(e))));
    worker.on('exit', (code) => this.fail(new Error(`tokenizer worker exited (${code})`)));
  }

  /**
   * Starts the worker and waits until it has parsed tokenizer.json. `threads`: native encodes run at
   * once (default: all cores but one, which is left to the event loop).
   */
  static async fromFile(path: string, threads = Math.max(1, availableParallelism() - 1)): Promise<NativeTokenizer> {
    const script = builtFile(import.meta.url, 'native-worker.js');
    if (!script) throw new Error('tokenizer worker native-worker.js is not built: run `npm run build`');
    const worker = new Worker(script, { workerData: { file: path, threads } satisfies NativeWorkerData });
    await new Promise<void>((resolve, reject) => {
      const onError = (e: Error) => reject(e);
      worker.once('error', onError);
      worker.once('message', (m: NativeReady) => {
        worker.off('error', onError);
        if (m.ready) resolve();
        else reject(new Error(`cannot load ${path}: ${m.error}`));
      });
    });
    const t = new NativeTokenizer(worker);
    t.updateRef();
    return t;
  }

  async encode(text: string, addSpecialTokens: boolean): Promise<Uint32Array> {
    return (await this.encodeBatch([text], addSpecialTokens))[0];
  }

  /**
   * One round trip for many texts. Pieces need `addSpecialTokens: false` (the post-processor would
   * add its tokens around every piece).
   */
  async encodeBatch(
    texts: string[],
    addSpecialTokens: boolean,
    opts: NativeEncodeOptions = {},
  ): Promise<Uint32Array[]> {
    if (texts.length === 0) return [];
    const maxTokens = opts.maxTokens ?? Infinity;
    const r = await this.call({
      op: 'encode',
      texts,
      addSpecialTokens,
      pieces: addSpecialTokens ? null : (opts.pieces ?? null),
      maxTokens,
    });
    if (r.over !== undefined) throw new PromptTooLongError(r.over, maxTokens);
    const ids = r.ids as Uint32Array;
    const out: Uint32Array[] = [];
    let at = 0;
    for (const n of r.lens as Uint32Array) {
      out.push(ids.slice(at, at + n)); // own buffers: cache entries must not pin a whole batch
      at += n;
    }
    return out;
  }

  async decode(ids: ArrayLike<number>, skipSpecialTokens: boolean): Promise<string> {
    return (await this.call({ op: 'decode', ids: Uint32Array.from(ids), skipSpecialTokens })).text as string;
  }

  async close(): Promise<void> {
    this.failure ??= new Error('tokenizer closed');
    await this.worker.terminate();
  }

  private call(msg: NativeRequest): Promise<NativeReply> {
    if (this.failure) return Promise.reject(this.failure);
    const id = this.nextId++;
    return new Promise<NativeReply>((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.updateRef();
      this.worker.postMessage({ id, ...msg });
    });
  }

  /** An idle worker must not keep the process alive; a busy one must. */
  private updateRef(): void {
    if (this.pending.size > 0) this.worker.ref();
    else this.worker.unref();
  }

  private fail(e: Error): void {
    this.failure ??= e;
    for (const p of this.pending.values()) p.reject(this.failure);
    this.pending.clear();
  }
}
