// Adapter: a real ZMQ PUB socket sending `[topic, seq u64 BE, payload]`, plus vLLM's ROUTER
// replay socket serving the ring buffer. --drop-rate skips the PUB send of a batch (its seq is
// still consumed and it stays replayable) so subscribers see a gap they can repair.
import { Publisher, Router } from 'zeromq';
import { asListenError, ListenError } from '../../common/listen.js';
import { ReplayBuffer } from './replay-buffer.js';

/** What each socket of a simulated engine is, as named in a ListenError (hints are added by callers). */
export const ENGINE_ROLES = {
  http: "simulated engine's HTTP server",
  pub: "simulated engine's KV-event PUB socket",
  replay: "simulated engine's KV-event replay socket",
} as const;

export type ReplayLayout = 'topic' | 'no-topic';

export interface PublisherOptions {
  /** tcp://host:port to bind; port 0 picks a free port. */
  endpoint: string;
  /** ROUTER endpoint to bind, or null for no replay. */
  replayEndpoint: string | null;
  topic: string;
  replayBuffer: number;
  /** vLLM >= 0.26 replies `[topic, seq, payload]`; older vLLM and SGLang `[seq, payload]`. */
  replayLayout: ReplayLayout;
  dropRate: number;
  /** Uniform [0, 1) source for drops (seeded by the engine). */
  random: () => number;
  onError?: (err: unknown) => void;
}

export const END_SEQ = new Uint8Array(8).fill(0xff);

export function seqBytes(seq: bigint): Uint8Array {
  const b = new Uint8Array(8);
  new DataView(b.buffer).setBigUint64(0, seq, false);
  return b;
}

function bindAddress(endpoint: string): string {
  // ZMQ spells "any free port" as `*`.
  return endpoint.replace(/:0$/, ':*');
}

export interface PublishStats {
  published: number;
  dropped: number;
  replayRequests: number;
}

export class ZmqEventPublisher {
  private seq = 0n;
  private sending: Promise<void> = Promise.resolve();
  private closed = false;
  private readonly buffer: ReplayBuffer;
  private readonly topic: Uint8Array;
  readonly stats: PublishStats = { published: 0, dropped: 0, replayRequests: 0 };
  private replayLoop: Promise<void> = Promise.resolve();

  private constructor(
    private readonly opts: PublisherOptions,
    private readonly pub: Publisher,
    private readonly router: Router | null,
    readonly endpoint: string,
    readonly replayEndpoint: string | null,
  ) {
    this.buffer = new ReplayBuffer(opts.replayBuffer);
    this.topic = Buffer.from(opts.topic, 'utf8');
    if (router) this.replayLoop = this.serveReplay(router);
  }

  static async open(opts: PublisherOptions): Promise<ZmqEventPublisher> {
    const pub = new Publisher({ linger: 0, sendHighWaterMark: 100_000 });
    let router: Router | null = null;
    let opening: { endpoint: string; role: string } = { endpoint: opts.endpoint, role: ENGINE_ROLES.pub };
    try {
      await pub.bind(bindAddress(opts.endpoint));
      if (opts.replayEndpoint) {
        opening = { endpoint: opts.replayEndpoint, role: ENGINE_ROLES.replay };
        router = new Router({ linger: 0 });
        await router.bind(bindAddress(opts.replayEndpoint));
      }
    } catch (err) {
      pub.close();
      router?.close();
      const e = asListenError(err, opening.endpoint, opening.role);
      throw e instanceof ListenError ? e : new Error(`cannot bind ${opening.endpoint}: ${(err as Error).message}`);
    }
    return new ZmqEventPublisher(opts, pub, router, pub.lastEndpoint ?? opts.endpoint, router?.lastEndpoint ?? null);
  }

  /** Next seq to be assigned. */
  get nextSeq(): bigint {
    return this.seq;
  }

  /** Publish one encoded batch; returns its seq and whether --drop-rate skipped the PUB send. */
  publish(payload: Uint8Array): { seq: bigint; dropped: boolean } {
    const seq = this.seq++;
    this.buffer.push(seq, payload);
    if (this.closed) return { seq, dropped: true };
    if (this.opts.dropRate > 0 && this.opts.random() < this.opts.dropRate) {
      this.stats.dropped++;
      return { seq, dropped: true };
    }
    this.stats.published++;
    const frames = [this.topic, seqBytes(seq), payload];
    // zeromq.js allows one send in flight per socket; chaining also keeps seq order.
    this.sending = this.sending.then(() => this.pub.send(frames)).catch((err) => this.opts.onError?.(err));
    return { seq, dropped: false };
  }

  private async serveReplay(router: Router): Promise<void> {
    try {
      for await (const frames of router) {
        // ROUTER receives [identity, "", start_seq] (DEALER/REQ); tolerate a missing delimiter.
        const start = frames[frames.length - 1];
        if (frames.length < 2 || frames.length > 3 || start.length !== 8) continue;
        this.stats.replayRequests++;
        const id = frames[0];
        const from = new DataView(start.buffer, start.byteOffset, 8).getBigUint64(0, false);
        const withTopic = this.opts.replayLayout === 'topic';
        // Snapshot first: publishing continues while the replies are sent.
        for (const [seq, payload] of [...this.buffer.from(from)]) {
          await router.send(
            withTopic ? [id, '', this.topic, seqBytes(seq), payload] : [id, '', seqBytes(seq), payload],
          );
        }
        await router.send(withTopic ? [id, '', '', END_SEQ, ''] : [id, '', END_SEQ, '']);
      }
    } catch (err) {
      if (!this.closed) this.opts.onError?.(err);
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.sending;
    this.pub.close();
    this.router?.close();
    await this.replayLoop;
  }
}
