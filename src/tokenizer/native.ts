// HF's Rust `tokenizers` (Node binding), hosted in a worker thread.
//
// The binding encodes on libuv's thread pool, but hands ids back as a JS array built element by element
// on the calling thread: ~0.3 us per token, 10-15 ms for a 32k-token prompt. The worker pays that and
// the tokenizer.json load (~0.5 s), and transfers each result as one Uint32Array buffer, so the event
// loop only ever posts a string and receives a buffer.
import { createRequire } from 'node:module';
import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';

/** The worker's code, CommonJS so it runs the same from src/ (vitest) and dist/. */
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const { Tokenizer } = require(workerData.modulePath);
let tok;
try {
  tok = Tokenizer.fromFile(workerData.file);
  parentPort.postMessage({ ready: true });
} catch (e) {
  parentPort.postMessage({ ready: false, error: String((e && e.message) || e) });
}
function pack(arrays) {
  let total = 0;
  for (const a of arrays) total += a.length;
  const ids = new Uint32Array(total);
  const lens = new Uint32Array(arrays.length);
  let at = 0;
  arrays.forEach((a, i) => { ids.set(a, at); lens[i] = a.length; at += a.length; });
  return { ids, lens };
}
// At most workerData.threads native encodes at once (encodeBatch is avoided: its rayon pool takes every
// core), so tokenizing never crowds the event loop's thread off the CPU.
let active = 0;
const waiting = [];
async function slot(fn) {
  if (active >= workerData.threads) await new Promise((r) => waiting.push(r));
  active++;
  try {
    return await fn();
  } finally {
    active--;
    const next = waiting.shift();
    if (next) next();
  }
}
parentPort.on('message', async (m) => {
  try {
    if (m.op === 'encode') {
      const opts = { addSpecialTokens: m.addSpecialTokens };
      const arrays = await Promise.all(m.texts.map((t) => slot(() => tok.encode(t, null, opts)).then((e) => e.getIds())));
      const { ids, lens } = pack(arrays);
      parentPort.postMessage({ id: m.id, ids, lens }, [ids.buffer, lens.buffer]);
    } else if (m.op === 'decode') {
      parentPort.postMessage({ id: m.id, text: await tok.decode(Array.from(m.ids), m.skipSpecialTokens) });
    }
  } catch (e) {
    parentPort.postMessage({ id: m.id, error: String((e && e.message) || e) });
  }
});
`;

interface Reply {
  id: number;
  error?: string;
  ids?: Uint32Array;
  lens?: Uint32Array;
  text?: string;
}

export class NativeTokenizer {
  private nextId = 1;
  private readonly pending = new Map<number, { resolve: (r: Reply) => void; reject: (e: Error) => void }>();
  private failure: Error | null = null;

  private constructor(private readonly worker: Worker) {
    worker.on('message', (r: Reply) => {
      const p = this.pending.get(r.id);
      if (!p) return;
      this.pending.delete(r.id);
      this.updateRef();
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
    const modulePath = createRequire(import.meta.url).resolve('tokenizers');
    const worker = new Worker(WORKER_SOURCE, { eval: true, workerData: { modulePath, file: path, threads } });
    await new Promise<void>((resolve, reject) => {
      const onError = (e: Error) => reject(e);
      worker.once('error', onError);
      worker.once('message', (m: { ready: boolean; error?: string }) => {
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

  /** One round trip for many texts. */
  async encodeBatch(texts: string[], addSpecialTokens: boolean): Promise<Uint32Array[]> {
    if (texts.length === 0) return [];
    const r = await this.call({ op: 'encode', texts, addSpecialTokens });
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

  private call(msg: Record<string, unknown>): Promise<Reply> {
    if (this.failure) return Promise.reject(this.failure);
    const id = this.nextId++;
    return new Promise<Reply>((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.updateRef();
      this.worker.postMessage({ ...msg, id });
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
