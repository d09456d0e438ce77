// A `--workers` process's dashboard merges the other processes' parts into its own source.
import { describe, expect, it } from 'vitest';
import type { DashboardSnapshot, DashboardSource, DecisionRecord } from '../../src/dashboard/source.js';
import { type DashboardPart, wholeRouterSource } from '../../src/dashboard/whole-router.js';
import { DashboardHub } from '../../src/dashboard/hub.js';
import { emptySnapshot } from '../helpers/dashboard.js';

const decision = (time: number, prompt: number): DecisionRecord => ({
  time,
  model: 'm',
  policy: 'kv',
  prompt_tokens: prompt,
  chosen: 'e0',
  chosen_dp_rank: 0,
  overlap_tokens: 0,
  attempt: 0,
  candidates: [],
});

function localSource(): DashboardSource & { emit(d: DecisionRecord): void } {
  const listeners = new Set<(d: DecisionRecord) => void>();
  const own = [decision(10, 1)];
  return {
    snapshot: (): DashboardSnapshot =>
      emptySnapshot({
        instances: [
          {
            id: 'e0',
            url: '',
            model: 'm',
            state: 'healthy',
            dp_size: 1,
            role: 'both',
            last_error: null,
            load: { active_prefill_tokens: 0, active_blocks: 0, active_requests: 0 },
            cached_blocks: { GPU: 0, CPU: 0, DISK: 0, EXTERNAL: 0 },
            listeners: [],
            engine_load: null,
            hit_check: { agree: 1, over: 0, under: 0, alarm: null, distrusted: false },
          },
        ],
        prefix: { prompt_tokens: 100, overlap_tokens: 50 },
        requests: { total: 3, errors: 1 },
        queue_depth: 1,
      }),
    recentDecisions: (limit) => own.slice(-limit),
    onDecision: (l) => {
      listeners.add(l);
      return () => listeners.delete(l);
    },
    emit: (d) =>
      listeners.forEach((l) => {
        l(d);
      }),
  };
}

const part = (pid: number, seq: number, decisions: DecisionRecord[]): DashboardPart => ({
  pid,
  seq,
  decisions,
  prefix: { prompt_tokens: 10, overlap_tokens: 5 },
  requests: { total: 2, errors: 0 },
  queue_depth: 2,
  hit_check: { e0: { agree: 0, over: 3, under: 1 }, gone: { agree: 9, over: 9, under: 9 } },
});

describe('wholeRouterSource', () => {
  it("adds the other processes' counts, streams their new decisions and asks from the last seen", async () => {
    const asked: Array<Record<string, number>> = [];
    const answers = [[part(7, 4, [decision(5, 2), decision(12, 3)])], [part(7, 5, [decision(20, 4)])]];
    const src = wholeRouterSource(localSource(), async (cursors) => {
      asked.push(cursors);
      return answers.shift() ?? [];
    });
    const seen: number[] = [];
    const off = src.onDecision((d) => seen.push(d.prompt_tokens));
    await src.refresh!();
    const s = src.snapshot();
    expect([s.prefix, s.requests, s.queue_depth]).toEqual([
      { prompt_tokens: 110, overlap_tokens: 55 },
      { total: 5, errors: 1 },
      3,
    ]);
    expect(s.instances[0].hit_check).toMatchObject({ agree: 1, over: 3, under: 1 });
    expect(src.recentDecisions(10).map((d) => d.prompt_tokens)).toEqual([2, 1, 3]); // by time
    await src.refresh!();
    expect(asked).toEqual([{}, { '7': 4 }]);
    expect(seen).toEqual([2, 3, 4]);
    off();
    await src.refresh!();
    expect(seen).toEqual([2, 3, 4]);
  });
});

describe('DashboardHub over a source with other processes', () => {
  it('sends the first snapshot and backfill after asking them, without the same decisions again as events', async () => {
    let answer!: (parts: DashboardPart[]) => void;
    const src = wholeRouterSource(localSource(), () => new Promise<DashboardPart[]>((r) => (answer = r)));
    const hub = new DashboardHub(src, {
      intervalMs: 60_000,
      maxClients: 4,
      maxDecisionsPerSecond: 50,
      maxBufferedBytes: 1 << 20,
      backfill: 25,
    });
    const reader = hub.open()!.getReader();
    const frames: string[] = [];
    const read = async () => frames.push(new TextDecoder().decode((await reader.read()).value));
    await read(); // the comment: nothing else until the other processes answer
    answer([part(7, 2, [decision(5, 2), decision(12, 3)])]);
    await read();
    await read();
    expect(frames[1]).toMatch(/^event: snapshot\n/);
    expect(frames[1]).toContain('"total":5'); // 3 here + 2 there
    expect(frames[2]).toMatch(/^event: decisions\n/);
    expect([...frames[2].matchAll(/"prompt_tokens":(\d+)/g)].map((m) => Number(m[1]))).toEqual([2, 1, 3]);
    hub.close();
    expect((await reader.read()).done).toBe(true); // no `decision` event repeated the backfill
  });
});
