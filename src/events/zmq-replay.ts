// Replay client: a DEALER to the publisher's ROUTER replay socket. Sends ["", start_seq BE8] and reads
// replies in either layout until the end marker (seq FF x 8, empty payload). Bounded by an inactivity
// timeout and a batch cap; the socket is always closed.
import { Dealer } from 'zeromq';
import { encodeSeq, parseReplayFrames } from './decode/frames.js';
import type { ReplayOutcome, SeqBatch } from './stream-sequencer.js';

export interface ReplayRequest {
  endpoint: string;
  from: bigint;
  /** Max silence between two replies (ms). */
  timeoutMs: number;
  /** Max batches accepted before giving up (the publisher's window is 10k batches by default). */
  maxBatches: number;
  /** Receives the socket so an owner closing mid-replay can close it too. */
  onSocket?: (socket: Dealer | null) => void;
}

const EMPTY = Buffer.alloc(0);

export async function requestReplay(req: ReplayRequest): Promise<ReplayOutcome> {
  const sock = new Dealer({ linger: 0, receiveTimeout: req.timeoutMs, sendTimeout: req.timeoutMs });
  req.onSocket?.(sock);
  const batches: SeqBatch[] = [];
  try {
    sock.connect(req.endpoint);
    await sock.send([EMPTY, encodeSeq(req.from)]);
    for (;;) {
      const frames = await sock.receive();
      const r = parseReplayFrames(frames);
      if (!r.ok) return { ok: false, kind: 'failed', error: r.error };
      if (r.value.end) return { ok: true, batches };
      batches.push({ seq: r.value.seq, payload: r.value.payload });
      if (batches.length > req.maxBatches)
        return { ok: false, kind: 'overflow', error: `replay exceeded ${req.maxBatches} batches` };
    }
  } catch (err) {
    const e = err as Error & { code?: string };
    if (e.code === 'EAGAIN')
      return { ok: false, kind: 'timeout', error: `replay from ${req.from} timed out after ${req.timeoutMs} ms` };
    return { ok: false, kind: 'failed', error: `replay: ${e.message}` };
  } finally {
    req.onSocket?.(null);
    sock.close();
  }
}
