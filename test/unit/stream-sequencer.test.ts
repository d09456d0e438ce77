// The stream sequencer without sockets or timers: each row feeds inputs to a fresh sequencer, then
// one more input, and asserts the exact actions it emits (and, where it matters, its state after).
import { describe, expect, it } from 'vitest';
import type { PurgeReason, ReplayResult } from '../../src/events/metrics.js';
import type { ListenerStatus } from '../../src/events/registry.js';
import {
  type ReplayOutcome,
  type SequencerAction,
  type SequencerInput,
  type SequencerOptions,
  type SequencerTimer,
  StreamSequencer,
  TAIL_BACKOFF_MS,
} from '../../src/events/stream-sequencer.js';

const EP = 'tcp://pub:5557';
const REPLAY_EP = 'tcp://pub:5558';
// Every timer off and no bootstrap, so a row's actions show only what it is about.
const BASE: SequencerOptions = {
  maxHeld: 3,
  maxReplayRounds: 2,
  disconnectPurgeMs: 0,
  silencePurgeMs: 0,
  tailCheckMs: 0,
  bootstrapReplay: false,
  onDecodeError: 'skip',
};

const pay = (seq: number | bigint) => new TextEncoder().encode(`batch ${seq}`);
const OTHER = new TextEncoder().encode('another incarnation');

// ---------------------------------------------------------------- inputs
const START: SequencerInput = { kind: 'start' };
const CONNECT: SequencerInput = { kind: 'connected' };
const UNREADABLE: SequencerInput = { kind: 'unreadable' };
const disconnect = (reason = 'peer closed'): SequencerInput => ({ kind: 'disconnected', reason });
const retrying = (reason: string): SequencerInput => ({ kind: 'retrying', reason });
const live = (seq: number | bigint): SequencerInput => ({ kind: 'live', seq: BigInt(seq), payload: pay(seq) });
const unsequenced = (tag: number): SequencerInput => ({ kind: 'live', seq: null, payload: pay(tag) });
const tick = (timer: SequencerTimer, now: number): SequencerInput => ({ kind: 'timer', timer, now });
const problem = (detail: string, batchLost: boolean): SequencerInput => ({ kind: 'problem', detail, batchLost });
const close = (purge: boolean): SequencerInput => ({ kind: 'close', purge });
/** A replay answer: seqs carry their own payload, [seq, bytes] another one. */
const replayed = (id: number, batches: Array<number | [number, Uint8Array]>, now = 0): SequencerInput => ({
  kind: 'replayed',
  id,
  now,
  outcome: {
    ok: true,
    batches: batches.map((b) =>
      typeof b === 'number' ? { seq: BigInt(b), payload: pay(b) } : { seq: BigInt(b[0]), payload: b[1] },
    ),
  },
});
const replayFailed = (
  id: number,
  kind: Exclude<ReplayOutcome, { ok: true }>['kind'],
  error: string,
  now = 0,
): SequencerInput => ({
  kind: 'replayed',
  id,
  now,
  outcome: { ok: false, kind, error },
});

// ---------------------------------------------------------------- actions
const apply = (seq: number | bigint, replayed = false): SequencerAction => ({
  kind: 'apply',
  payload: pay(seq),
  replayed,
});
const status = (s: ListenerStatus, lastError: string | null): SequencerAction => ({
  kind: 'status',
  status: s,
  lastError,
});
const ACTIVE = status('active', null);
const purge = (reason: PurgeReason): SequencerAction => ({ kind: 'purge', reason });
/** A purge of a connected stream, and the last error it leaves. */
const purged = (reason: PurgeReason, s: ListenerStatus = 'active'): SequencerAction[] => [
  purge(reason),
  status(s, `purged: ${reason}`),
];
const replay = (id: number, from: number | bigint): SequencerAction => ({ kind: 'replay', id, from: BigInt(from) });
const result = (r: ReplayResult): SequencerAction => ({ kind: 'replayResult', result: r });
const GAP: SequencerAction = { kind: 'gap' };
const CANCEL: SequencerAction = { kind: 'cancelReplay' };
const arm = (timer: SequencerTimer, ms: number): SequencerAction => ({ kind: 'arm', timer, ms });
const disarm = (timer: SequencerTimer): SequencerAction => ({ kind: 'disarm', timer });

// ---------------------------------------------------------------- harness

interface State {
  status: ListenerStatus;
  lastError: string | null;
  lastSeq: bigint | null;
  replaying: boolean;
  gaps: number;
  replays: Partial<Record<ReplayResult, number>>;
}

interface Row {
  name: string;
  opts?: Partial<SequencerOptions>;
  /** The registration's replay endpoint (default REPLAY_EP). */
  replayEndpoint?: string | null;
  given: SequencerInput[];
  when: SequencerInput;
  then: SequencerAction[];
  state?: Partial<State>;
}

function sequencer(opts: Partial<SequencerOptions> = {}, replayEndpoint: string | null = REPLAY_EP) {
  const actions: SequencerAction[] = [];
  const s = new StreamSequencer({ endpoint: EP, replayEndpoint }, { ...BASE, ...opts }, (a) => actions.push(a));
  return { s, actions };
}

function state(s: StreamSequencer): State {
  return {
    status: s.currentStatus,
    lastError: s.currentError,
    lastSeq: s.lastSeq,
    replaying: s.replaying,
    gaps: s.gaps,
    replays: { ...s.replays },
  };
}

function table(rows: Row[]): void {
  for (const r of rows) {
    it(r.name, () => {
      const { s, actions } = sequencer(r.opts, r.replayEndpoint === undefined ? REPLAY_EP : r.replayEndpoint);
      for (const i of r.given) s.handle(i);
      actions.length = 0;
      s.handle(r.when);
      expect(actions).toEqual(r.then);
      if (r.state) expect(state(s)).toMatchObject(r.state);
    });
  }
}

/** Started and connected (no bootstrap with BASE). */
const UP = [START, CONNECT];

// ---------------------------------------------------------------- rows

describe('stream sequencer: status', () => {
  table([
    { name: 'start reports pending', given: [], when: START, then: [status('pending', null)] },
    {
      name: 'a failed connection attempt is shown while pending',
      given: [START],
      when: retrying('ECONNREFUSED'),
      then: [status('pending', `cannot connect to ${EP}: ECONNREFUSED (retrying)`)],
    },
    {
      name: 'retrying after a disconnect reports nothing new',
      given: [...UP, disconnect()],
      when: retrying('ECONNREFUSED'),
      then: [],
    },
    {
      name: 'connect goes active and keeps the last error (only a paused stream has its error cleared)',
      given: [START, retrying('ECONNREFUSED')],
      when: CONNECT,
      then: [status('active', `cannot connect to ${EP}: ECONNREFUSED (retrying)`)],
    },
    {
      name: 'disconnect pauses',
      given: UP,
      when: disconnect('peer closed'),
      then: [status('paused', `disconnected from ${EP}: peer closed`)],
    },
    { name: 'a reconnect clears the disconnect error', given: [...UP, disconnect()], when: CONNECT, then: [ACTIVE] },
    {
      name: 'a batch before the connect event makes a pending stream active',
      given: [START],
      when: live(0),
      then: [ACTIVE, apply(0)],
    },
    {
      name: 'a batch makes a paused stream active',
      given: [...UP, live(0), disconnect()],
      when: live(1),
      then: [ACTIVE, apply(1)],
    },
    { name: 'an unreadable message is traffic too', given: [...UP, disconnect()], when: UNREADABLE, then: [ACTIVE] },
    {
      name: 'failed',
      given: UP,
      when: { kind: 'failed', reason: 'receive: EFSM' },
      then: [status('failed', 'receive: EFSM')],
    },
  ]);
});

describe('stream sequencer: live ordering', () => {
  table([
    {
      name: 'the first batch is the baseline, whatever its seq',
      given: UP,
      when: live(7),
      then: [apply(7)],
      state: { lastSeq: 7n },
    },
    {
      name: 'seq == next is applied',
      given: [...UP, live(0)],
      when: live(1),
      then: [apply(1)],
      state: { lastSeq: 1n, gaps: 0 },
    },
    {
      name: 'a batch without seq is applied and leaves the position alone',
      given: [...UP, live(0)],
      when: unsequenced(9),
      then: [apply(9)],
      state: { lastSeq: 0n },
    },
    {
      name: 'gap without a replay endpoint: purge, and the batch is the new baseline',
      replayEndpoint: null,
      given: [...UP, live(0)],
      when: live(2),
      then: [GAP, ...purged('gap_no_replay'), apply(2)],
      state: { lastSeq: 2n, gaps: 1, lastError: 'purged: gap_no_replay' },
    },
    {
      name: 'gap with a replay endpoint: hold the batch and replay from next',
      given: [...UP, live(0)],
      when: live(2),
      then: [GAP, replay(1, 1)],
      state: { lastSeq: 0n, replaying: true, gaps: 1 },
    },
    {
      name: 'live batches are held while a replay runs',
      given: [...UP, live(0), live(2)],
      when: live(3),
      then: [],
      state: { lastSeq: 0n },
    },
    {
      name: 'seqs beyond 2^53 stay exact',
      given: [...UP, live(2n ** 60n)],
      when: live(2n ** 60n + 2n),
      then: [GAP, replay(1, 2n ** 60n + 1n)],
      state: { lastSeq: 2n ** 60n },
    },
    {
      name: 'seq regression without a replay endpoint: purge, the new incarnation from its first batch',
      replayEndpoint: null,
      given: [...UP, live(0), live(1), live(2)],
      when: live(0),
      then: [purge('seq_regression'), ACTIVE, apply(0)],
      state: { lastSeq: 0n, lastError: null },
    },
    {
      name: 'seq regression to a later seq without a replay endpoint: purge and follow it',
      replayEndpoint: null,
      given: [...UP, live(5), live(6)],
      when: live(2),
      then: [purge('seq_regression'), ACTIVE, apply(2)],
      state: { lastSeq: 2n, gaps: 0 },
    },
    {
      name: 'seq regression to 0 with a replay endpoint: nothing to recover',
      given: [...UP, live(10)],
      when: live(0),
      then: [purge('seq_regression'), ACTIVE, apply(0)],
    },
    {
      name: 'seq regression past 0 with a replay endpoint: recover the new incarnation from 0',
      given: [...UP, live(10)],
      when: live(3),
      then: [purge('seq_regression'), ACTIVE, GAP, replay(1, 0)],
      state: { replaying: true },
    },
    {
      name: 'seq regression past 0 with no replay round left',
      opts: { maxReplayRounds: 0 },
      given: [...UP, live(10)],
      when: live(3),
      then: [purge('seq_regression'), ACTIVE, GAP, ...purged('replay_rounds'), apply(3)],
      state: { lastSeq: 3n },
    },
  ]);
});

describe('stream sequencer: gap replay outcomes', () => {
  const GAP_AT_2 = [...UP, live(0), live(2)]; // replay 1 from seq 1, seq 2 held
  table([
    {
      name: 'filled: replayed batches, then held ones in seq order, duplicates skipped',
      given: [...GAP_AT_2, live(3)],
      when: replayed(1, [1, 2]),
      then: [result('ok'), apply(1, true), apply(2, true), apply(3)],
      state: { lastSeq: 3n, replaying: false, replays: { ok: 1 } },
    },
    {
      name: 'the recovered new incarnation after a regression',
      given: [...UP, live(10), live(3)],
      when: replayed(1, [0, 1, 2, 3]),
      then: [result('ok'), apply(0, true), apply(1, true), apply(2, true), apply(3, true)],
      state: { lastSeq: 3n },
    },
    {
      name: 'timeout: purge; the held batches are the new baseline',
      given: GAP_AT_2,
      when: replayFailed(1, 'timeout', 'replay from 1 timed out after 5000 ms'),
      then: [
        result('timeout'),
        status('active', 'replay from 1 timed out after 5000 ms'),
        ...purged('replay_failed'),
        apply(2),
      ],
      state: { lastSeq: 2n, replays: { timeout: 1 } },
    },
    {
      name: 'failure: purge',
      given: GAP_AT_2,
      when: replayFailed(1, 'failed', 'replay: connect ECONNREFUSED'),
      then: [result('failed'), status('active', 'replay: connect ECONNREFUSED'), ...purged('replay_failed'), apply(2)],
    },
    {
      name: 'more batches than a replay may return: purge',
      given: GAP_AT_2,
      when: replayFailed(1, 'overflow', 'replay exceeded 20000 batches'),
      then: [
        result('overflow'),
        status('active', 'replay exceeded 20000 batches'),
        ...purged('replay_failed'),
        apply(2),
      ],
    },
    {
      name: 'history lost: the publisher no longer holds next',
      given: [...UP, live(0), live(3)],
      when: replayed(1, [2, 3]),
      then: [result('history_lost'), ...purged('history_lost'), apply(2, true), apply(3, true)],
      state: { lastSeq: 3n, replays: { history_lost: 1, ok: 0 } },
    },
    {
      name: 'history lost: the replay returns nothing',
      given: [...UP, live(0), live(3)],
      when: replayed(1, []),
      then: [result('history_lost'), ...purged('history_lost'), apply(3)],
      state: { lastSeq: 3n },
    },
    {
      name: 'a hole inside the replay purges before the batch after it',
      given: [...UP, live(0), live(3)],
      when: replayed(1, [1, 3]),
      then: [result('ok'), apply(1, true), ...purged('history_lost'), apply(3, true)],
      state: { lastSeq: 3n },
    },
    {
      name: 'a held batch that opens another gap starts the next replay and keeps holding',
      given: [...GAP_AT_2, live(5), live(6)],
      when: replayed(1, [1, 2]),
      then: [result('ok'), apply(1, true), apply(2, true), GAP, replay(2, 3)],
      state: { lastSeq: 2n, replaying: true, gaps: 2 },
    },
    {
      name: '... and that replay then drains the rest',
      given: [...GAP_AT_2, live(5), live(6), replayed(1, [1, 2])],
      when: replayed(2, [3, 4]),
      then: [result('ok'), apply(3, true), apply(4, true), apply(5), apply(6)],
      state: { lastSeq: 6n, replaying: false },
    },
    {
      name: 'too many held batches: abandon the replay, purge, resume from the held batches',
      given: [...GAP_AT_2, live(3), live(4)],
      when: live(5),
      then: [result('overflow'), CANCEL, ...purged('held_overflow'), apply(2), apply(3), apply(4), apply(5)],
      state: { lastSeq: 5n, replaying: false },
    },
    {
      name: 'an abandoned replay answers too late: ignored',
      given: [...GAP_AT_2, live(3), live(4), live(5)],
      when: replayed(1, [1]),
      then: [],
      state: { lastSeq: 5n },
    },
    {
      name: 'max replay rounds: a gap after rounds of replays without an in-order live batch purges',
      given: [...GAP_AT_2, replayed(1, [1]), live(4), replayed(2, [3])],
      when: live(6),
      then: [GAP, ...purged('replay_rounds'), apply(6)],
      state: { lastSeq: 6n, gaps: 3 },
    },
    {
      name: 'max replay rounds: an in-order live batch starts the count again',
      opts: { maxReplayRounds: 1 },
      given: [...GAP_AT_2, replayed(1, [1]), live(3)],
      when: live(5),
      then: [GAP, replay(2, 4)],
    },
    {
      name: 'max replay rounds: held batches do not start the count again',
      opts: { maxReplayRounds: 1 },
      given: [...GAP_AT_2, replayed(1, [1])],
      when: live(4),
      then: [GAP, ...purged('replay_rounds'), apply(4)],
    },
  ]);
});

describe('stream sequencer: reconnect (re-read of the last applied batch)', () => {
  const DOWN = [...UP, live(0), live(1), disconnect()];
  const BACK = [...DOWN, CONNECT]; // replay 1 from seq 1
  table([
    { name: 'a reconnect re-reads the last applied batch', given: DOWN, when: CONNECT, then: [ACTIVE, replay(1, 1)] },
    {
      name: 'no replay endpoint: nothing to re-read',
      replayEndpoint: null,
      given: DOWN,
      when: CONNECT,
      then: [ACTIVE],
    },
    {
      name: 'blip: the same batch and nothing after it',
      given: BACK,
      when: replayed(1, [1]),
      then: [result('ok')],
      state: { lastSeq: 1n, lastError: null },
    },
    {
      name: 'blip: the batches missed while down are applied',
      given: BACK,
      when: replayed(1, [1, 2, 3]),
      then: [result('ok'), apply(2, true), apply(3, true)],
      state: { lastSeq: 3n },
    },
    {
      name: 'blip, but a hole after the verified batch: history lost',
      given: BACK,
      when: replayed(1, [1, 3]),
      then: [result('history_lost'), ...purged('history_lost'), apply(3, true)],
      state: { lastSeq: 3n },
    },
    {
      name: 'restart: the re-read batch differs',
      given: BACK,
      when: replayed(1, [[1, OTHER]]),
      then: [result('history_lost'), ...purged('publisher_changed')],
      state: { lastSeq: null, replaying: false },
    },
    {
      name: 'restart: the re-read batch is gone',
      given: BACK,
      when: replayed(1, []),
      then: [result('history_lost'), ...purged('publisher_changed')],
      state: { lastSeq: null },
    },
    {
      name: 'restart with bootstrap on: the new incarnation is bootstrapped',
      opts: { bootstrapReplay: true },
      given: [...UP, replayed(1, []), live(0), live(1), disconnect(), CONNECT], // replay 2 re-reads seq 1
      when: replayed(2, [[1, OTHER], 2]),
      then: [result('history_lost'), ...purged('publisher_changed'), replay(3, 0)],
      state: { lastSeq: null, replaying: true },
    },
    {
      name: 'a failed re-read purges',
      given: BACK,
      when: replayFailed(1, 'timeout', 'replay from 1 timed out after 5000 ms'),
      then: [result('timeout'), status('active', 'replay from 1 timed out after 5000 ms'), ...purged('replay_failed')],
      state: { lastSeq: null },
    },
  ]);
});

describe('stream sequencer: bootstrap replay', () => {
  const ON = { bootstrapReplay: true };
  table([
    {
      name: 'on: the first connect replays from 0',
      opts: ON,
      given: [START],
      when: CONNECT,
      then: [ACTIVE, replay(1, 0)],
    },
    { name: 'off: the first connect only goes active', given: [START], when: CONNECT, then: [ACTIVE] },
    {
      name: 'on, without a replay endpoint: nothing to replay',
      opts: ON,
      replayEndpoint: null,
      given: [START],
      when: CONNECT,
      then: [ACTIVE],
    },
    {
      name: 'the buffer is applied, then the live batches held meanwhile',
      opts: ON,
      given: [...UP, live(2), live(3)],
      when: replayed(1, [0, 1, 2]),
      then: [result('ok'), apply(0, true), apply(1, true), apply(2, true), apply(3)],
      state: { lastSeq: 3n },
    },
    {
      name: 'a buffer that starts after 0 is no loss',
      opts: ON,
      given: UP,
      when: replayed(1, [5, 6]),
      then: [result('ok'), apply(5, true), apply(6, true)],
    },
    {
      name: 'a failed bootstrap purges nothing; the live stream is the baseline',
      opts: ON,
      given: [...UP, live(4)],
      when: replayFailed(1, 'failed', 'replay: boom'),
      then: [result('failed'), status('active', 'replay: boom'), apply(4)],
      state: { lastSeq: 4n, lastError: 'replay: boom' },
    },
    {
      name: 'a reconnect after a purge bootstraps again',
      opts: { ...ON, disconnectPurgeMs: 1_000 },
      given: [...UP, replayed(1, []), live(0), disconnect(), tick('disconnect', 1_000)],
      when: CONNECT,
      then: [ACTIVE, replay(2, 0)],
    },
  ]);
});

describe('stream sequencer: tail check', () => {
  const ON = { tailCheckMs: 1_000 };
  const TAIL = [...UP, live(0)]; // tail armed
  const CHECKING = [...TAIL, tick('tail', 1_000)]; // replay 1 re-reads seq 0
  const TIMEOUT = 'replay from 0 timed out after 5000 ms';
  table([
    { name: 'every live batch (re)arms it', opts: ON, given: UP, when: live(0), then: [arm('tail', 1_000), apply(0)] },
    { name: 'so does an unreadable message', opts: ON, given: UP, when: UNREADABLE, then: [arm('tail', 1_000)] },
    { name: 'off at 0', given: UP, when: live(0), then: [apply(0)] },
    {
      name: 'off without a replay endpoint',
      opts: ON,
      replayEndpoint: null,
      given: UP,
      when: live(0),
      then: [apply(0)],
    },
    {
      name: 'due: re-read the last applied batch',
      opts: ON,
      given: TAIL,
      when: tick('tail', 1_000),
      then: [replay(1, 0)],
    },
    {
      name: 'match, nothing after it: keep the stream',
      opts: ON,
      given: CHECKING,
      when: replayed(1, [0]),
      then: [result('ok')],
      state: { lastSeq: 0n, lastError: null },
    },
    {
      name: 'match, then the batch dropped at the end of the burst',
      opts: ON,
      given: CHECKING,
      when: replayed(1, [0, 1]),
      then: [result('ok'), apply(1, true)],
      state: { lastSeq: 1n },
    },
    {
      name: 'mismatch: the publisher changed',
      opts: ON,
      given: CHECKING,
      when: replayed(1, [[0, OTHER]]),
      then: [result('history_lost'), ...purged('publisher_changed')],
      state: { lastSeq: null },
    },
    {
      name: 'the replay endpoint failing keeps the stream and says so',
      opts: ON,
      given: CHECKING,
      when: replayFailed(1, 'timeout', TIMEOUT, 1_000),
      then: [result('timeout'), status('active', `tail check: ${TIMEOUT}`)],
      state: { lastSeq: 0n, replaying: false },
    },
    {
      name: `after a failure, no check for ${TAIL_BACKOFF_MS} ms`,
      opts: ON,
      given: [...CHECKING, replayFailed(1, 'timeout', TIMEOUT, 1_000), live(1)],
      when: tick('tail', 1_000 + TAIL_BACKOFF_MS - 1),
      then: [],
    },
    {
      name: `after a failure, checks resume ${TAIL_BACKOFF_MS} ms later`,
      opts: ON,
      given: [...CHECKING, replayFailed(1, 'timeout', TIMEOUT, 1_000), live(1)],
      when: tick('tail', 1_000 + TAIL_BACKOFF_MS),
      then: [replay(2, 1)],
    },
    { name: 'not while disconnected', opts: ON, given: [...TAIL, disconnect()], when: tick('tail', 1_000), then: [] },
    { name: 'not while another replay runs', opts: ON, given: [...TAIL, live(2)], when: tick('tail', 1_000), then: [] },
    {
      name: 'not before a batch with a seq',
      opts: ON,
      given: [...UP, unsequenced(1)],
      when: tick('tail', 1_000),
      then: [],
    },
    {
      name: 'a tick of a timer that is not armed is ignored',
      opts: ON,
      given: UP,
      when: tick('tail', 1_000),
      then: [],
    },
  ]);
});

describe('stream sequencer: disconnect purge', () => {
  const ON = { disconnectPurgeMs: 60_000 };
  const DOWN = [...UP, live(0), disconnect()];
  const PAUSED = status('paused', `disconnected from ${EP}: peer closed`);
  table([
    {
      name: 'a disconnect arms the deadline',
      opts: ON,
      replayEndpoint: null,
      given: [...UP, live(0)],
      when: disconnect(),
      then: [PAUSED, arm('disconnect', 60_000)],
    },
    { name: 'off at 0', replayEndpoint: null, given: [...UP, live(0)], when: disconnect(), then: [PAUSED] },
    {
      name: 'another disconnect does not push the deadline back',
      opts: ON,
      replayEndpoint: null,
      given: DOWN,
      when: disconnect('again'),
      then: [status('paused', `disconnected from ${EP}: again`)],
    },
    {
      name: 'shorter: the reconnect cancels it',
      opts: ON,
      replayEndpoint: null,
      given: DOWN,
      when: CONNECT,
      then: [disarm('disconnect'), ACTIVE],
      state: { lastSeq: 0n },
    },
    {
      name: 'longer: the deadline purges',
      opts: ON,
      replayEndpoint: null,
      given: DOWN,
      when: tick('disconnect', 60_000),
      then: purged('disconnected', 'paused'),
      state: { lastSeq: null, status: 'paused', lastError: 'purged: disconnected' },
    },
    {
      name: 'after it, the next batch is a new baseline',
      opts: ON,
      replayEndpoint: null,
      given: [...DOWN, tick('disconnect', 60_000)],
      when: live(5),
      then: [ACTIVE, apply(5)],
    },
    {
      name: 'a batch before the connect event keeps the stream',
      opts: ON,
      replayEndpoint: null,
      given: [...DOWN, live(1)],
      when: tick('disconnect', 60_000),
      then: [],
      state: { lastSeq: 1n },
    },
  ]);
});

describe('stream sequencer: silence purge', () => {
  const ON = { silencePurgeMs: 30_000 };
  table([
    { name: 'a connect arms it', opts: ON, given: [START], when: CONNECT, then: [ACTIVE, arm('silence', 30_000)] },
    { name: 'every batch re-arms it', opts: ON, given: UP, when: live(0), then: [arm('silence', 30_000), apply(0)] },
    {
      name: 'silence purges',
      opts: ON,
      given: [...UP, live(0)],
      when: tick('silence', 30_000),
      then: purged('silence'),
      state: { lastSeq: null },
    },
    {
      name: 'after it, the next batch is a new baseline',
      opts: ON,
      given: [...UP, live(0), tick('silence', 30_000)],
      when: live(9),
      then: [arm('silence', 30_000), apply(9)],
    },
    {
      name: 'a disconnect disarms it',
      opts: ON,
      given: [...UP, live(0)],
      when: disconnect(),
      then: [status('paused', `disconnected from ${EP}: peer closed`), disarm('silence')],
    },
    { name: 'off: never armed', given: UP, when: live(0), then: [apply(0)] },
  ]);
});

describe('stream sequencer: problems found applying a batch', () => {
  table([
    {
      name: 'skip: reported, nothing purged',
      given: [...UP, live(0)],
      when: problem('decode_error: bad msgpack', true),
      then: [status('active', 'decode_error: bad msgpack')],
      state: { lastSeq: 0n },
    },
    {
      name: 'purge: a lost batch purges the stream (its position stays)',
      opts: { onDecodeError: 'purge' },
      given: [...UP, live(0)],
      when: problem('decode_error: bad msgpack', true),
      then: [status('active', 'decode_error: bad msgpack'), ...purged('decode_error')],
      state: { lastSeq: 0n },
    },
    {
      name: 'purge: an unreadable frame loses nothing (its gap is replayed)',
      opts: { onDecodeError: 'purge' },
      given: [...UP, live(0)],
      when: problem('decode_error: seq frame is 3 bytes, expected 8', false),
      then: [status('active', 'decode_error: seq frame is 3 bytes, expected 8')],
    },
  ]);

  it('a problem reported while its apply runs lands before what follows it', () => {
    const actions: SequencerAction[] = [];
    const s: StreamSequencer = new StreamSequencer({ endpoint: EP, replayEndpoint: REPLAY_EP }, BASE, (a) => {
      actions.push(a);
      // What the listener does when applying seq 1 finds an orphan.
      if (a.kind === 'apply' && a.replayed && new TextDecoder().decode(a.payload) === 'batch 1')
        s.handle(problem('orphan: parent unknown', false));
    });
    for (const i of [...UP, live(0), live(3)]) s.handle(i);
    actions.length = 0;
    s.handle(replayed(1, [1, 3]));
    expect(actions).toEqual([
      result('ok'),
      apply(1, true),
      status('active', 'orphan: parent unknown'),
      ...purged('history_lost'),
      apply(3, true),
    ]);
    expect(s.currentError).toBe('purged: history_lost');
  });
});

describe('stream sequencer: close', () => {
  table([
    {
      name: 'remove: disarm every timer, purge, close the running replay',
      opts: { tailCheckMs: 1_000, silencePurgeMs: 30_000 },
      given: [...UP, live(0), live(2)],
      when: close(true),
      then: [disarm('silence'), disarm('tail'), purge('unregistered'), CANCEL],
    },
    { name: 'close without purge', given: [...UP, live(0)], when: close(false), then: [] },
    {
      name: 'nothing after close: a replay outcome',
      given: [...UP, live(0), live(2), close(true)],
      when: replayed(1, [1, 2]),
      then: [],
    },
    { name: 'nothing after close: a live batch', given: [...UP, live(0), close(false)], when: live(1), then: [] },
    {
      name: 'nothing after close: a timer',
      opts: { silencePurgeMs: 30_000 },
      given: [...UP, close(false)],
      when: tick('silence', 30_000),
      then: [],
    },
  ]);
});
