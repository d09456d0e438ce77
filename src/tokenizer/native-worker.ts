// The worker thread behind NativeTokenizer (native.ts): loads tokenizer.json into HF's Rust
// tokenizer, then answers encode and decode requests, ids as transferred Uint32Array buffers.
//
// Long texts are tokenized in pieces (pieces.ts), one piece of a request at a time, requests taking
// turns: a short request waits for at most one piece of each request ahead of it, never for a whole
// long prompt. A request with `maxTokens` stops as soon as its count is certainly above it.
import { parentPort, workerData } from 'node:worker_threads';
import { Tokenizer } from 'tokenizers';
import { CUT_WINDOW, PIECE_CHARS, pieceEnd, type PieceOptions } from './pieces.js';

export interface NativeWorkerData {
  file: string;
  /** Native encodes at once. */
  threads: number;
}

/** Posted with an `id` that the reply carries back. */
export type NativeRequest =
  | { op: 'encode'; texts: string[]; addSpecialTokens: boolean; pieces: PieceOptions | null; maxTokens: number }
  | { op: 'decode'; ids: Uint32Array; skipSpecialTokens: boolean };

/** The first message: whether tokenizer.json loaded. */
export type NativeReady = { ready: true } | { ready: false; error: string };

/**
 * Encode answers `ids` (all texts' ids end to end) and `lens` (per text), or `over` (a lower bound on
 * the tokens, above maxTokens, when it stopped early); `chars` is what it tokenized (pieces counted
 * and re-tokenized texts included). Decode answers `text`.
 */
export interface NativeReply {
  id: number;
  error?: string;
  ids?: Uint32Array;
  lens?: Uint32Array;
  over?: number;
  chars?: number;
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

/**
 * One piece of work: ids of a text's piece (`ids`), its count only (`count`: the text has an inexact
 * cut, and is tokenized again whole if the request stays under its limit), or a whole text.
 */
interface Task {
  text: number;
  start: number;
  end: number;
  mode: 'ids' | 'count' | 'whole';
  /** The cut at `end` is inexact: what it adds to the count is measured and taken off this piece's. */
  inexactEnd: boolean;
}

/** An encode request and how far it got. */
class EncodeJob {
  /** Text being cut, and where its next piece starts. */
  private text = 0;
  private at = 0;
  /** Per text: its pieces' ids, or its whole ids. */
  private readonly ids: number[][][];
  /** Per text: a lower bound on its tokens so far. */
  private readonly lower: number[];
  /** Texts met an inexact cut: counted, to be tokenized again whole. */
  private readonly redo: number[] = [];
  private counted = 0;
  chars = 0;

  constructor(
    readonly id: number,
    private readonly texts: string[],
    private readonly pieces: PieceOptions | null,
    readonly maxTokens: number,
  ) {
    this.ids = texts.map(() => []);
    this.lower = texts.map(() => 0);
  }

  /** The next piece of work, or null when every text is done. */
  next(): Task | null {
    while (this.text < this.texts.length) {
      const i = this.text;
      const t = this.texts[i];
      if (this.at === 0 && (this.pieces === null || t.length <= this.pieces.chars)) return this.whole(i);
      if (this.at >= t.length) {
        this.text++;
        this.at = 0;
        continue;
      }
      const { end, exact } = pieceEnd(t, this.at, this.pieces as PieceOptions);
      const counting = this.redo.at(-1) === i;
      if (!exact && !counting) {
        // Counting first pays only when the text could pass the limit (tokens <= UTF-8 bytes, +1 for
        // a prepended word marker); otherwise the text goes whole at once.
        if (!Number.isFinite(this.maxTokens) || Buffer.byteLength(t) + 1 <= this.maxTokens) return this.whole(i);
        this.ids[i] = [];
        this.redo.push(i);
      }
      const task: Task = {
        text: i,
        start: this.at,
        end,
        mode: counting || !exact ? 'count' : 'ids',
        inexactEnd: !exact,
      };
      this.at = end;
      return task;
    }
    const again = this.redo.shift();
    return again === undefined
      ? null
      : { text: again, start: 0, end: this.texts[again].length, mode: 'whole', inexactEnd: false };
  }

  /** Text `i` whole, now: what its pieces gave so far is dropped. */
  private whole(i: number): Task {
    this.ids[i] = [];
    this.counted -= this.lower[i];
    this.lower[i] = 0;
    this.text++;
    this.at = 0;
    return { text: i, start: 0, end: this.texts[i].length, mode: 'whole', inexactEnd: false };
  }

  /** Records a task's result (a count with its cut's share taken off); true once certainly over maxTokens. */
  done(task: Task, ids: number[] | null, count: number): boolean {
    const i = task.text;
    let lower = count;
    if (task.mode === 'whole') {
      this.ids[i] = [ids as number[]];
      lower = count - this.lower[i]; // the text's exact count replaces what its pieces counted
    } else if (task.mode === 'ids') this.ids[i].push(ids as number[]);
    this.lower[i] += lower;
    this.counted += lower;
    return this.counted > this.maxTokens;
  }

  get atLeast(): number {
    return this.counted;
  }

  textOf(task: Task): string {
    return this.texts[task.text];
  }

  result(): number[][] {
    return this.ids.map((parts) => (parts.length === 1 ? parts[0] : parts.flat()));
  }
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

  // At most data.threads native encodes of pieces at once (encodeBatch is avoided: its rayon pool takes
  // every core), so tokenizing never crowds the event loop's thread off the CPU. Requests with work
  // left wait in `ready` with their next piece, one piece in flight each at most, and go to the back
  // after each piece. A text that must go whole and is longer than a piece (no exact cut point, under
  // the limit) runs in a lane of its own (as many at once): short requests never wait for one.
  interface Entry {
    job: EncodeJob;
    task: Task;
    opts: { addSpecialTokens: boolean };
  }
  const ready: Entry[] = [];
  const active = { piece: 0, long: 0 };
  const laneOf = (t: Task): keyof typeof active => (t.end - t.start > PIECE_CHARS ? 'long' : 'piece');

  /** Queues the job's next piece, or answers when it has none left. */
  function advance(job: EncodeJob, opts: Entry['opts']): void {
    const task = job.next();
    if (task !== null) {
      ready.push({ job, task, opts });
      return;
    }
    const { ids, lens } = pack(job.result());
    port.postMessage({ id: job.id, ids, lens, chars: job.chars } satisfies NativeReply, [ids.buffer, lens.buffer]);
  }

  async function run({ job, task, opts }: Entry): Promise<boolean> {
    const t = job.textOf(task);
    const piece = task.start === 0 && task.end === t.length ? t : t.slice(task.start, task.end);
    job.chars += piece.length;
    const e = await tok.encode(piece, null, opts);
    // A cut's share comes off the piece before it, so no count ever holds a cut's excess on its own.
    if (task.mode === 'count')
      return job.done(task, null, e.getLength() - (task.inexactEnd ? await cutShare(job, t, task.end, opts) : 0));
    const ids = e.getIds();
    return job.done(task, ids, ids.length);
  }

  /**
   * What an inexact cut at `at` adds to the pieces' count, at most (pieces.ts): measured on CUT_WINDOW
   * characters each side, as the two sides' counts less the count of both together, plus one.
   */
  async function cutShare(job: EncodeJob, t: string, at: number, opts: Entry['opts']): Promise<number> {
    // Window edges never leave half a surrogate pair.
    const edge = (i: number) =>
      i > 0 && i < t.length && (t.charCodeAt(i) & 0xfc00) === 0xdc00 ? i - 1 : Math.min(Math.max(i, 0), t.length);
    const from = edge(at - CUT_WINDOW);
    const to = edge(at + CUT_WINDOW);
    let share = 1;
    for (const [a, b, sign] of [
      [from, at, 1],
      [at, to, 1],
      [from, to, -1],
    ] as const) {
      job.chars += b - a;
      share += sign * (await tok.encode(t.slice(a, b), null, opts)).getLength();
    }
    return Math.max(1, share);
  }

  function pump(): void {
    for (let k = 0; k < ready.length; ) {
      const entry = ready[k];
      const lane = laneOf(entry.task);
      if (active[lane] >= data.threads) {
        k++;
        continue;
      }
      ready.splice(k, 1);
      const { job } = entry;
      active[lane]++;
      run(entry).then(
        (over) => {
          active[lane]--;
          if (over) port.postMessage({ id: job.id, over: job.atLeast, chars: job.chars } satisfies NativeReply);
          else advance(job, entry.opts);
          pump();
        },
        (e: unknown) => {
          active[lane]--;
          port.postMessage({ id: job.id, error: messageOf(e), chars: job.chars } satisfies NativeReply);
          pump();
        },
      );
    }
  }

  port.on('message', async (m: NativeRequest & { id: number }) => {
    if (m.op === 'encode') {
      advance(new EncodeJob(m.id, m.texts, m.pieces, m.maxTokens), { addSpecialTokens: m.addSpecialTokens });
      pump();
      return;
    }
    try {
      port.postMessage({
        id: m.id,
        text: await tok.decode(Array.from(m.ids), m.skipSpecialTokens),
      } satisfies NativeReply);
    } catch (e) {
      port.postMessage({ id: m.id, error: messageOf(e) } satisfies NativeReply);
    }
  });
}

if (parentPort) serve(parentPort, workerData as NativeWorkerData);
