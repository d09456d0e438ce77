// The worker thread behind NativeTokenizer (native.ts): loads tokenizer.json into HF's Rust
// tokenizer, then answers encode and decode requests, ids as transferred Uint32Array buffers.
import { parentPort, workerData } from 'node:worker_threads';
import { Tokenizer } from 'tokenizers';

export interface NativeWorkerData {
  file: string;
  /** Native encodes at once. */
  threads: number;
}

/** Posted with an `id` that the reply carries back. */
export type NativeRequest = { op: 'encode'; texts: string[]; addSpecialTokens: boolean } | { op: 'decode'; ids: Uint32Array; skipSpecialTokens: boolean };

/** The first message: whether tokenizer.json loaded. */
export type NativeReady = { ready: true } | { ready: false; error: string };

/** Encode answers `ids` (all texts' ids end to end) and `lens` (per text); decode answers `text`. */
export interface NativeReply {
  id: number;
  error?: string;
  ids?: Uint32Array;
  lens?: Uint32Array;
  text?: string;
}

const messageOf = (e: unknown) => String((e instanceof Error && e.message) || e);

function pack(arrays: number[][]): { ids: Uint32Array<ArrayBuffer>; lens: Uint32Array<ArrayBuffer> } {
  let total = 0;
  for (const a of arrays) total += a.length;
  const ids = new Uint32Array(total);
  const lens = new Uint32Array(arrays.length);
  let at = 0;
  arrays.forEach((a, i) => {
    ids.set(a, at);
    lens[i] = a.length;
    at += a.length;
  });
  return { ids, lens };
}

function serve(port: NonNullable<typeof parentPort>, data: NativeWorkerData): void {
  let tok: Tokenizer;
  try {
    tok = Tokenizer.fromFile(data.file);
  } catch (e) {
    port.postMessage({ ready: false, error: messageOf(e) } satisfies NativeReady);
    return;
  }
  port.postMessage({ ready: true } satisfies NativeReady);

  // At most data.threads native encodes at once (encodeBatch is avoided: its rayon pool takes every
  // core), so tokenizing never crowds the event loop's thread off the CPU.
  let active = 0;
  const waiting: Array<() => void> = [];
  async function slot<T>(fn: () => Promise<T>): Promise<T> {
    if (active >= data.threads) await new Promise<void>((r) => waiting.push(r));
    active++;
    try {
      return await fn();
    } finally {
      active--;
      waiting.shift()?.();
    }
  }

  port.on('message', async (m: NativeRequest & { id: number }) => {
    try {
      if (m.op === 'encode') {
        const opts = { addSpecialTokens: m.addSpecialTokens };
        const arrays = await Promise.all(m.texts.map((t) => slot(() => tok.encode(t, null, opts)).then((e) => e.getIds())));
        const { ids, lens } = pack(arrays);
        port.postMessage({ id: m.id, ids, lens } satisfies NativeReply, [ids.buffer, lens.buffer]);
      } else {
        port.postMessage({ id: m.id, text: await tok.decode(Array.from(m.ids), m.skipSpecialTokens) } satisfies NativeReply);
      }
    } catch (e) {
      port.postMessage({ id: m.id, error: messageOf(e) } satisfies NativeReply);
    }
  });
}

if (parentPort) serve(parentPort, workerData as NativeWorkerData);
