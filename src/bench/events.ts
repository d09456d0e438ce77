// `kvrouter bench events`: KV block-events decoded and applied end to end through a real ZMQ socket.
// A forked publisher process (so it does not share the measured thread) sends pre-encoded 16-block
// batches to a ListenerPool; we report, for the built-in ZMTP client and the libzmq binding,
//   - max block-events/s for vLLM events (engine hashes + token_ids: the router re-hashes every block)
//     and standardized events (router seq hashes, nothing to re-hash);
//   - the CPU share of ingestion at a steady 100k block-events/s (built-in client) (process CPU incl. libzmq threads,
//     and main-thread event-loop utilization);
//   - in-process decode-only and decode+apply costs per batch, which show where the time goes, and
//     the same for the vLLM batch in the relay's normalized form (what decoding once and forwarding
//     would cost the other processes of `serve --workers`).
import { type ChildProcess, fork } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { performance } from 'node:perf_hooks';
import { encode } from '@msgpack/msgpack';
import { Publisher } from 'zeromq';
import { intOption, type OptionTable, parseCommand } from '../common/args.js';
import { decodeBatch, encodeBatch, encodeOp } from '../cluster/event-wire.js';
import { RelayedIndex } from '../cluster/relayed-index.js';
import { KvIndexWriter } from '../indexer/writer.js';
import { decodeContext, decodePayload } from '../events/decode/index.js';
import { StreamIngest } from '../events/listener-ingest.js';
import { ListenerPool } from '../events/listener-pool.js';
import { NOOP_METRICS } from '../events/metrics.js';
import type { ZmqClient } from '../events/sub-transport.js';
import { type PublisherType, type Registration, Registry } from '../events/registry.js';
import { TieredIndexer } from '../indexer/namespaces.js';
import { type Table, writeReport } from './report.js';

const OPTIONS: OptionTable = {
  batches: {
    type: 'string',
    default: '40000',
    arg: 'N',
    help: '16-block batches per throughput run (default 40000 = 640k block-events)',
  },
  rate: { type: 'string', default: '100000', arg: 'N', help: 'block-events/s for the CPU-share run' },
  seconds: { type: 'string', default: '5', arg: 'S', help: 'duration of the CPU-share run' },
  out: { type: 'string', arg: 'DIR', help: 'report directory (default bench/results/events-<time>)' },
};

const BLOCKS = 16;
const BS = 16;
const RING = 1024;
const PUBLISHER_FLAG = '--kv-events-bench-publisher';

type Kind = 'vllm' | 'standard';
type PubCommand =
  | { type: 'blast'; batches: number; doneFile?: string }
  | { type: 'paced'; batchesPerSec: number; seconds: number }
  | { type: 'exit' };
type PubMessage = { type: 'ready'; endpoint: string } | { type: 'done'; sent: number };

// ---------------------------------------------------------------- payloads

/** RING distinct 16-block batches: vLLM map-form BlockStored with 256 tokens, or standardized events. */
export function buildPayloads(kind: Kind): Buffer[] {
  const out: Buffer[] = [];
  let eventId = 0;
  for (let i = 0; i < RING; i++) {
    const hashes = Array.from({ length: BLOCKS }, (_, j) => (0x8000_0000_0000_0000n | (BigInt(i) << 20n)) + BigInt(j));
    const ev =
      kind === 'vllm'
        ? {
            type: 'BlockStored',
            block_hashes: hashes,
            parent_block_hash: null,
            token_ids: Array.from({ length: BLOCKS * BS }, (_, t) => (i * 7919 + t * 31) % 151_000),
            block_size: BS,
            lora_id: null,
            medium: 'GPU',
            lora_name: null,
            extra_keys: hashes.map(() => null),
            group_idx: 0,
            kv_cache_spec_kind: 'full_attention',
          }
        : {
            event_type: 'stored',
            event_id: eventId++,
            seq_hashes: hashes,
            base_block_idx: 0,
            parent_hash: null,
            token_ids: null,
          };
    out.push(Buffer.from(encode([Date.now() / 1000, [ev], 0], { useBigInt64: true })));
  }
  return out;
}

// Standardized events carry event_id; a ring replayed many times would look like regressions, so
// the publisher re-encodes ids on the fly for that kind (cheap: only the id changes).
function standardPayload(i: number): Buffer {
  const base = i % RING;
  const hashes = Array.from({ length: BLOCKS }, (_, j) => (0x8000_0000_0000_0000n | (BigInt(base) << 20n)) + BigInt(j));
  return Buffer.from(
    encode(
      [
        Date.now() / 1000,
        [
          {
            event_type: 'stored',
            event_id: i,
            seq_hashes: hashes,
            base_block_idx: 0,
            parent_hash: null,
            token_ids: null,
          },
        ],
        0,
      ],
      { useBigInt64: true },
    ),
  );
}

// ---------------------------------------------------------------- publisher process

async function publisherMain(kind: Kind, preEncode: number): Promise<void> {
  const pub = new Publisher({ linger: 0, sendHighWaterMark: 0 });
  await pub.bind('tcp://127.0.0.1:*');
  const ring = buildPayloads('vllm');
  let seq = 0n;
  const seqBuf = () => {
    const b = Buffer.alloc(8);
    b.writeBigUInt64BE(seq++);
    return b;
  };
  const payload = (i: number) => (kind === 'vllm' ? ring[i % RING] : standardPayload(i));
  let n = 0;
  // Pre-encode standardized payloads for the blast so the sender is never the bottleneck.
  const pre: Buffer[] = kind === 'standard' ? Array.from({ length: preEncode }, (_, i) => standardPayload(i)) : [];
  const send = (p: Buffer) => pub.send(['', seqBuf(), p]);
  process.on('message', (cmd: PubCommand) => {
    void (async () => {
      if (cmd.type === 'exit') {
        pub.close();
        process.exit(0);
      }
      if (cmd.type === 'blast') {
        for (let i = 0; i < cmd.batches; i++)
          await send(kind === 'standard' && n + i < pre.length ? pre[n + i] : payload(n + i));
        n += cmd.batches;
        if (cmd.doneFile) writeFileSync(cmd.doneFile, String(n));
      } else {
        const total = Math.round(cmd.batchesPerSec * cmd.seconds);
        const start = performance.now();
        for (let i = 0; i < total; ) {
          const due = Math.min(total, Math.floor(((performance.now() - start) / 1000) * cmd.batchesPerSec));
          for (; i < due; i++) await send(payload(n + i));
          await new Promise((r) => setTimeout(r, 2));
        }
        n += total;
      }
      process.send!({ type: 'done', sent: n } satisfies PubMessage);
    })();
  });
  process.send!({ type: 'ready', endpoint: pub.lastEndpoint! } satisfies PubMessage);
}

// ---------------------------------------------------------------- subscriber side

function registration(type: PublisherType, endpoint: string, instance: string): Registration {
  return {
    endpoint,
    replayEndpoint: null,
    type,
    model: 'bench',
    loraName: null,
    tenant: 'default',
    instanceId: instance,
    blockSize: BS,
    dpRank: 0,
    additionalSalt: null,
    topic: '',
    backendId: instance,
    shared: false,
    key: `${instance}|default|0`,
    status: 'pending',
    lastError: null,
    registeredAt: Date.now(),
  };
}

async function waitFor(cond: () => boolean, what: string, timeoutMs: number, stepMs = 1): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!cond()) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, stepMs));
  }
}

interface Session {
  child: ChildProcess;
  pool: ListenerPool;
  indexer: TieredIndexer;
  key: string;
  send(cmd: PubCommand): Promise<PubMessage>;
  close(): Promise<void>;
}

async function session(kind: Kind, preEncode = 0, zmqClient: ZmqClient = 'builtin'): Promise<Session> {
  const child = fork(fileURLToPath(import.meta.url), [PUBLISHER_FLAG, kind, String(preEncode)], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const [ready] = (await once(child, 'message')) as [PubMessage];
  if (ready.type !== 'ready') throw new Error('publisher did not start');
  const indexer = new TieredIndexer();
  const registry = new Registry();
  const pool = new ListenerPool({
    registry,
    writer: new KvIndexWriter(indexer),
    options: { receiveHwm: 0, bootstrapReplay: false, heartbeatMs: 0, disconnectPurgeMs: 0, tailCheckMs: 0, zmqClient },
  });
  const reg = registration(kind === 'vllm' ? 'vLLM' : 'Mooncake', ready.endpoint, `bench-${kind}`);
  pool.add(reg);
  await waitFor(() => pool.stat(reg.key)?.status === 'active', 'listener connect', 5_000);
  await new Promise((r) => setTimeout(r, 300)); // the subscription must reach the PUB first
  return {
    child,
    pool,
    indexer,
    key: reg.key,
    async send(cmd) {
      const reply = once(child, 'message') as Promise<[PubMessage]>;
      child.send(cmd);
      return (await reply)[0];
    },
    async close() {
      child.send({ type: 'exit' } satisfies PubCommand);
      await Promise.race([once(child, 'exit'), new Promise((r) => setTimeout(r, 2_000))]);
      if (child.exitCode === null) child.kill();
      await pool.close();
    },
  };
}

interface Throughput {
  kind: Kind;
  client: ZmqClient;
  /** live: the publisher sends while we apply (bounded by its send rate); backlog: it queues every
   * batch while our thread is blocked, then we drain (the router side's own capacity). */
  mode: 'live' | 'backlog';
  batches: number;
  blockEvents: number;
  seconds: number;
  blockEventsPerSec: number;
  cpuPerBlockUs: number;
  mainThreadUtilization: number;
  gaps: number;
  purges: number;
  decodeErrors: number;
  indexedBlocks: number;
}

/** Block this thread (no event loop) until `file` exists: the socket's data piles up unread. */
function blockUntilExists(file: string, timeoutMs: number): void {
  const cell = new Int32Array(new SharedArrayBuffer(4));
  const deadline = performance.now() + timeoutMs;
  while (!existsSync(file)) {
    if (performance.now() > deadline) throw new Error('publisher did not finish queueing the backlog');
    Atomics.wait(cell, 0, 0, 5);
  }
}

async function throughput(
  kind: Kind,
  batches: number,
  client: ZmqClient,
  mode: 'live' | 'backlog',
): Promise<Throughput> {
  const s = await session(kind, batches, client);
  const dir = mkdtempSync(join(tmpdir(), 'kvr-bench-'));
  try {
    let start = s.pool.stat(s.key)?.messages ?? 0;
    let done: Promise<PubMessage>;
    if (mode === 'backlog') {
      const doneFile = join(dir, 'done');
      const cmd: PubCommand = { type: 'blast', batches, doneFile };
      const reply = once(s.child, 'message') as Promise<[PubMessage]>;
      await new Promise<void>((resolve, reject) => s.child.send(cmd, (err) => (err ? reject(err) : resolve())));
      blockUntilExists(doneFile, 120_000);
      done = reply.then((r) => r[0]);
      start = s.pool.stat(s.key)?.messages ?? 0; // nothing was read while blocked
    } else {
      done = s.send({ type: 'blast', batches });
    }
    const elu0 = performance.eventLoopUtilization();
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    await waitFor(() => (s.pool.stat(s.key)?.messages ?? 0) >= batches, 'all batches applied', 120_000);
    const t1 = performance.now();
    const cpu = process.cpuUsage(cpu0);
    const elu = performance.eventLoopUtilization(elu0);
    await done;
    const st = s.pool.stat(s.key)!;
    const seconds = (t1 - t0) / 1000;
    const blockEvents = (batches - start) * BLOCKS;
    return {
      kind,
      client,
      mode,
      batches,
      blockEvents,
      seconds,
      blockEventsPerSec: blockEvents / seconds,
      cpuPerBlockUs: (cpu.user + cpu.system) / blockEvents,
      mainThreadUtilization: elu.utilization,
      gaps: st.gaps,
      purges: st.purges,
      decodeErrors: st.applied.decode_error,
      indexedBlocks: s.indexer.stats().blocks,
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
    await s.close();
  }
}

interface Steady {
  targetBlockEventsPerSec: number;
  achievedBlockEventsPerSec: number;
  seconds: number;
  /** Process CPU (main thread + libzmq I/O threads) as a share of one core. */
  cpuShareOfOneCore: number;
  mainThreadUtilization: number;
  gaps: number;
}

async function steady(rate: number, seconds: number): Promise<Steady> {
  const s = await session('vllm');
  try {
    const batchesPerSec = rate / BLOCKS;
    const before = s.pool.stat(s.key)!.messages;
    const elu0 = performance.eventLoopUtilization();
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    await s.send({ type: 'paced', batchesPerSec, seconds });
    const expected = before + Math.round(batchesPerSec * seconds);
    await waitFor(() => s.pool.stat(s.key)!.messages >= expected, 'paced batches applied', 10_000);
    const wall = (performance.now() - t0) / 1000;
    const cpu = process.cpuUsage(cpu0);
    const elu = performance.eventLoopUtilization(elu0);
    const got = s.pool.stat(s.key)!.messages - before;
    return {
      targetBlockEventsPerSec: rate,
      achievedBlockEventsPerSec: (got * BLOCKS) / wall,
      seconds: wall,
      cpuShareOfOneCore: (cpu.user + cpu.system) / 1e6 / wall,
      mainThreadUtilization: elu.utilization,
      gaps: s.pool.stat(s.key)!.gaps,
    };
  } finally {
    await s.close();
  }
}

interface Stage {
  kind: Kind | 'relayed';
  /** What the relaying process spends to encode the batch for the others (relayed only). */
  encodeUsPerBatch: number | null;
  decodeUsPerBatch: number;
  decodeApplyUsPerBatch: number;
  decodeApplyBlockEventsPerSec: number;
}

const WARM = 5_000;
const ROUNDS = 3;

/** µs per call of f(0), f(1), ...: best of a few rounds after a long warm-up (this machine is shared, single runs jump around). */
function bestOf(batches: number, f: (i: number) => void): number {
  let k = 0;
  for (let i = 0; i < WARM; i++) f(k++);
  let best = Infinity;
  for (let r = 0; r < ROUNDS; r++) {
    const t = performance.now();
    for (let i = 0; i < batches; i++) f(k++);
    best = Math.min(best, ((performance.now() - t) * 1000) / batches);
  }
  return best;
}

const STAGE_NAMES: Record<Stage['kind'], string> = {
  vllm: 'vLLM (re-hash tokens)',
  standard: 'standardized (router hashes)',
  relayed: 'the vLLM batch relayed (normalized ops, JSON)',
};

/** Without sockets: where the per-batch time goes. */
function stages(kind: Kind, batches: number): Stage {
  // Standardized events carry consecutive event ids: one payload per applied batch (warm-up
  // included), or the applier would see regressions and purge.
  const payloads =
    kind === 'vllm'
      ? buildPayloads('vllm')
      : Array.from({ length: WARM + ROUNDS * batches }, (_, i) => standardPayload(i));
  const type: PublisherType = kind === 'vllm' ? 'vLLM' : 'Mooncake';
  const ctx = decodeContext(registration(type, 'tcp://x:1', 'stage'));
  const time = (f: (i: number) => void): number => bestOf(batches, f);
  const decodeUs = time((i) => decodePayload(payloads[i % payloads.length], ctx));
  const ingest = new StreamIngest(registration(type, 'tcp://x:1', 'stage'), {
    writer: new KvIndexWriter(new TieredIndexer()),
    metrics: NOOP_METRICS,
    now: Date.now,
  });
  const applyUs = time((i) => ingest.applyPayload(payloads[kind === 'vllm' ? i % RING : i], false));
  return {
    kind,
    encodeUsPerBatch: null,
    decodeUsPerBatch: decodeUs,
    decodeApplyUsPerBatch: applyUs,
    decodeApplyBlockEventsPerSec: (BLOCKS * 1e6) / applyUs,
  };
}

/**
 * The vLLM batches as `kvrouter relay` forwards them (normalized ops, event-wire.ts): what a process
 * that receives events decoded by another would spend instead of decoding the engine's msgpack,
 * and what the decoding process spends to encode them. Decides whether `serve --workers` should
 * decode once and forward (docs/scale-out.md).
 */
function relayedStage(batches: number): Stage {
  const ctx = decodeContext(registration('vLLM', 'tcp://x:1', 'stage'));
  const events = buildPayloads('vllm').map((p) => {
    const r = decodePayload(p, ctx);
    if (!r.ok) throw new Error(r.error);
    return r.batch.events;
  });
  const forward = (i: number) =>
    encodeBatch(
      'bench',
      events[i % RING].map((event) => encodeOp({ op: 'event', event })),
    );
  const wire = events.map((_, i) => forward(i));
  const relayed = new RelayedIndex(new KvIndexWriter(new TieredIndexer()));
  const encodeUs = bestOf(batches, forward);
  const decodeUs = bestOf(batches, (i) => decodeBatch(wire[i % RING]));
  const applyUs = bestOf(batches, (i) => {
    for (const op of decodeBatch(wire[i % RING]).ops) relayed.apply(op);
  });
  return {
    kind: 'relayed',
    encodeUsPerBatch: encodeUs,
    decodeUsPerBatch: decodeUs,
    decodeApplyUsPerBatch: applyUs,
    decodeApplyBlockEventsPerSec: (BLOCKS * 1e6) / applyUs,
  };
}

export async function run(argv: string[]): Promise<number> {
  const parsed = parseCommand(
    'bench events',
    'KV events decoded and applied through a real ZMQ socket.',
    OPTIONS,
    argv,
  );
  if ('code' in parsed) return parsed.code;
  const v = parsed.values;
  const batches = intOption(v, 'batches');
  const rate = intOption(v, 'rate');
  const seconds = intOption(v, 'seconds');

  const stageRows = [stages('vllm', 20_000), stages('standard', 20_000), relayedStage(20_000)];
  const tp: Throughput[] = [];
  for (const mode of ['backlog', 'live'] as const) {
    for (const client of ['builtin', 'libzmq'] as const) {
      for (const kind of ['vllm', 'standard'] as const) tp.push(await throughput(kind, batches, client, mode));
    }
  }
  const st = await steady(rate, seconds);

  const tables: Table[] = [
    {
      title: `End to end through ZMQ (${BLOCKS}-block batches, a libzmq PUB in another process; backlog drained = it queued every batch while this thread was blocked, so the rate is the router side's capacity; live = bounded by the publisher's send rate)`,
      columns: [
        'publisher',
        'SUB client',
        'events',
        'block-events',
        'seconds',
        'block-events/s',
        'CPU us/block',
        'main thread busy',
        'gaps',
        'purges',
        'decode errors',
      ],
      rows: tp.map((r) => [
        r.mode === 'backlog' ? 'backlog drained' : 'live',
        r.client,
        r.kind === 'vllm' ? 'vLLM (re-hash tokens)' : 'standardized (router hashes)',
        r.blockEvents,
        r.seconds,
        Math.round(r.blockEventsPerSec),
        r.cpuPerBlockUs,
        `${(r.mainThreadUtilization * 100).toFixed(0)}%`,
        r.gaps,
        r.purges,
        r.decodeErrors,
      ]),
    },
    {
      title: `CPU share at a steady ${rate.toLocaleString('en-US')} block-events/s (vLLM events)`,
      columns: ['achieved block-events/s', 'seconds', 'process CPU (share of one core)', 'main thread busy', 'gaps'],
      rows: [
        [
          Math.round(st.achievedBlockEventsPerSec),
          st.seconds,
          `${(st.cpuShareOfOneCore * 100).toFixed(1)}%`,
          `${(st.mainThreadUtilization * 100).toFixed(1)}%`,
          st.gaps,
        ],
      ],
    },
    {
      title: 'In process, no sockets (per 16-block batch)',
      columns: [
        'events',
        'decode us',
        'decode + apply us',
        'block-events/s (decode + apply)',
        'encode us (the relaying process)',
      ],
      rows: stageRows.map((r) => [
        STAGE_NAMES[r.kind],
        r.decodeUsPerBatch,
        r.decodeApplyUsPerBatch,
        Math.round(r.decodeApplyBlockEventsPerSec),
        r.encodeUsPerBatch ?? '-',
      ]),
    },
  ];
  writeReport('events', { throughput: tp, steady: st, stages: stageRows }, tables, v.out as string | undefined);
  return 0;
}

// Forked publisher entry point (this file run directly with PUBLISHER_FLAG).
if (process.argv.includes(PUBLISHER_FLAG) && import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const at = process.argv.indexOf(PUBLISHER_FLAG);
  void publisherMain(process.argv[at + 1] === 'standard' ? 'standard' : 'vllm', Number(process.argv[at + 2] ?? 0));
}
