// Quiet windows (EngineCore.planQuiet / runQuiet): an engine driven by quiet passes where it can, `step` where
// it cannot, runs the same passes as one driven by `step` alone: the same starts and ends, KV
// events, first and last tokens, token counts, stats between passes and cached blocks (their
// tokens: every output token drawn), whatever arrives, aborts or resets mid-window.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { rangeVocab, type CoreConfig } from '../../src/engine-sim/core/config.js';
import { EngineCore } from '../../src/engine-sim/core/engine-core.js';
import type { CoreKvEvent } from '../../src/engine-sim/core/kv-events.js';
import { mockerModel } from '../../src/engine-sim/core/mocker-model.js';
import type { SimRequestSpec } from '../../src/engine-sim/core/request.js';
import { loadPerfModel } from '../../src/engine-sim/perf-models.js';

const VOCAB = rangeVocab(1000, 5000);
/** Decode time grows with the batch's context (the mocker's reads the KV usage only). */
const H200 = loadPerfModel('h200-qwen3-8b').model;

type Act =
  | { at: number; kind: 'add'; spec: SimRequestSpec }
  | { at: number; kind: 'abort'; id: string }
  | { at: number; kind: 'reset' }
  | { at: number; kind: 'stats' }
  | { at: number; kind: 'snapshot' };

interface Run {
  /** One line per pass (at its start) and per act, in order. */
  trace: string[];
  quietPasses: number;
  passes: number;
  /** Summed end - start, pass by pass (as the fleet's busy counter). */
  busyMs: number;
  tokens: number;
}

const json = (v: unknown): string => JSON.stringify(v, (_, x) => (typeof x === 'bigint' ? x.toString() : x));

function eventLine(evs: readonly CoreKvEvent[]): string {
  return json(
    evs.map((ev) =>
      ev.type === 'cleared'
        ? ev
        : { type: ev.type, medium: ev.medium, blocks: ev.blocks.map((b) => [b.hash, b.parent, Array.from(b.tokens)]) },
    ),
  );
}

function snapshotLine(e: EngineCore): string {
  const s = e.snapshot();
  const gpu = s.gpu.map((b) => `${b.hash}:${b.refs}:${Array.from(b.tokens)}`).sort();
  const cpu = s.cpu.map((b) => `${b.hash}:${Array.from(b.tokens)}`).sort();
  return json({ gpu, cpu });
}

/**
 * One engine on a virtual clock, as the fleet simulation drives it: a pass starts when the previous
 * one ends (or at an act that finds it idle); acts due at a pass's end run before the next pass.
 * `quiet`: as EngineNode drives it, a window's passes run without a call each, and every act first
 * closes the window (the passes started so far are applied; the running one is its last).
 */
function drive(cfg: Partial<CoreConfig>, acts: readonly Act[], quiet: boolean): Run {
  const e = new EngineCore({ blockSize: 4, numGpuBlocks: 64, outputVocab: VOCAB, ...cfg });
  const run: Run = { trace: [], quietPasses: 0, passes: 0, busyMs: 0, tokens: 0 };
  let passEnd: number | null = null;
  // (Set in the closures: a cast keeps the compiler from narrowing it to null.)
  let win = null as { ends: Float64Array; next: number; start: number; batch: number } | null;
  const close = (): void => {
    if (!win) return;
    const started = win.next + 1;
    let at = win.start;
    for (let p = 0; p < started; p++) {
      const end = win.ends[p];
      run.trace.push(`pass ${at} ${end} tokens ${win.batch} ${QUIET_LINE}`);
      run.busyMs += end - at;
      at = end;
    }
    run.quietPasses += started;
    run.passes += started;
    run.tokens += started * win.batch;
    e.runQuiet(started);
    passEnd = win.ends[win.next];
    win = null;
  };
  const start = (now: number): void => {
    const n = quiet ? e.planQuiet(now) : 0;
    if (n > 0) {
      win = { ends: e.quietEnds.slice(0, n), next: 0, start: e.quietStartMs, batch: e.quietTokens };
      passEnd = win.ends[0];
      return;
    }
    const out = e.step(now);
    if (!out) {
      passEnd = null;
      return;
    }
    const visible = out.tokens.filter((t) => t.index === 0 || t.finishReason);
    run.trace.push(
      `pass ${out.startMs} ${out.endMs} tokens ${out.tokens.length} events ${eventLine(out.events)} visible ${json(visible)}` +
        ` admitted ${json(out.admitted.map((a) => [a.req.id, a.queried, a.gpuHitTokens, a.hostHitTokens, a.first]))}` +
        ` preempted ${json(out.preempted)} rejected ${json(out.rejected)}`,
    );
    run.passes++;
    run.busyMs += out.endMs - out.startMs;
    run.tokens += out.tokens.length;
    passEnd = out.endMs;
  };
  let i = 0;
  for (let guard = 0; guard < 100_000; guard++) {
    const next = i < acts.length ? acts[i].at : Number.POSITIVE_INFINITY;
    if (win) {
      // The window's pass ends before the next act go by without a call, but for its last.
      const last = win.ends.length - 1;
      while (win.next < last && win.ends[win.next] < next) win.next++;
      if (win.next === last && win.ends[last] < next) {
        close();
        start(passEnd!);
        continue;
      }
      close();
    } else if (passEnd !== null && passEnd < next) {
      start(passEnd);
      continue;
    }
    if (i === acts.length) break;
    const act = acts[i++];
    const now = act.at;
    if (act.kind === 'add') e.add(act.spec, now);
    else if (act.kind === 'abort') run.trace.push(`abort ${act.id} ${e.abort(act.id)}`);
    else if (act.kind === 'reset') run.trace.push(`reset ${eventLine(e.resetPrefixCache())}`);
    else if (act.kind === 'stats') run.trace.push(`stats ${json(e.stats())}`);
    else run.trace.push(`snapshot ${snapshotLine(e)}`);
    if (passEnd === null) start(now);
  }
  expect(e.hasWork()).toBe(false);
  run.trace.push(`end ${json(e.stats())} ${snapshotLine(e)}`);
  return run;
}

/** What a quiet pass's trace line says after its times and tokens. */
const QUIET_LINE = 'events [] visible [] admitted [] preempted [] rejected []';

/** Both drivers, the same passes; returns the quiet one. */
function same(cfg: Partial<CoreConfig>, acts: readonly Act[]): Run {
  const byStep = drive(cfg, acts, false);
  const byWindow = drive(cfg, acts, true);
  expect(byWindow.trace).toEqual(byStep.trace);
  expect(byWindow.passes).toBe(byStep.passes);
  expect(byWindow.busyMs).toBe(byStep.busyMs);
  expect(byWindow.tokens).toBe(byStep.tokens);
  expect(byStep.quietPasses).toBe(0);
  return byWindow;
}

const prompt = (n: number, base: number): Uint32Array => Uint32Array.from({ length: n }, (_, k) => base + k);
const add = (at: number, id: string, len: number, maxTokens: number, extra: Partial<SimRequestSpec> = {}): Act => ({
  at,
  kind: 'add',
  spec: { id, prompt: prompt(len, 100 * id.length + id.charCodeAt(0) * 1000), maxTokens, ...extra },
});

describe('quiet windows', () => {
  it('a lone decode runs in windows between block boundaries; the passes are the same', () => {
    // 16-token blocks, a 20-token prompt, 60 tokens out: of the 60 passes, those that fill a block
    // or take a new one, the first and the last are not quiet.
    const run = same({ blockSize: 16, perfModel: H200 }, [add(0, 'a', 20, 60)]);
    expect(run.passes).toBe(60);
    expect(run.quietPasses).toBeGreaterThanOrEqual(45);
  });

  /** Pass ends of a lone request's run (passes 1-11 are its first window: pass 12 fills a block). */
  function loneEnds(cfg: Partial<CoreConfig>): number[] {
    const lone = drive(cfg, [add(0, 'a', 20, 60)], true);
    expect(lone.trace[12]).toContain('"stored"');
    expect(lone.trace.slice(1, 12).every((l) => l.includes('events [] visible []'))).toBe(true);
    return lone.trace.filter((l) => l.startsWith('pass')).map((l) => Number(l.split(' ')[2]));
  }

  it('an arrival inside a window joins at the next pass boundary (the window is cut there)', () => {
    for (const perfModel of [H200, mockerModel]) {
      const cfg = { blockSize: 16, perfModel };
      const ends = loneEnds(cfg);
      // Between the ends of passes 4 and 5, and exactly at the end of pass 30.
      const mid = (ends[4] + ends[5]) / 2;
      expect(
        same(cfg, [add(0, 'a', 20, 60), add(mid, 'b', 9, 30), add(ends[30], 'c', 5, 12)]).quietPasses,
      ).toBeGreaterThan(0);
      // Mid-window stats and snapshots (the snapshot settles the window) read the same state.
      same(cfg, [
        add(0, 'a', 20, 60),
        { at: mid, kind: 'stats' },
        { at: ends[6] + 0.001, kind: 'snapshot' },
        { at: ends[8] + 0.001, kind: 'stats' },
      ]);
    }
  });

  it('an abort or a reset inside a window', () => {
    const cfg = { blockSize: 16, perfModel: H200 };
    const ends = loneEnds(cfg);
    const two = [add(0, 'a', 20, 60), add(0, 'bb', 20, 60)];
    same(cfg, [...two, { at: (ends[4] + ends[5]) / 2, kind: 'abort', id: 'a' }]);
    same(cfg, [...two, { at: (ends[4] + ends[5]) / 2, kind: 'reset' }]);
    same(cfg, [add(0, 'a', 20, 60), { at: (ends[4] + ends[5]) / 2, kind: 'reset' }]);
  });

  it('stop tokens after min_tokens; no prefix caching', () => {
    const acts: Act[] = [
      add(0, 'a', 20, 60),
      add(0, 'bb', 7, 40, { stopTokenIds: [1000, 1001, 1002], minTokens: 20 }),
      { at: 30, kind: 'abort', id: 'a' },
      { at: 45, kind: 'reset' },
    ];
    expect(same({ blockSize: 16 }, acts).quietPasses).toBeGreaterThan(0);
    expect(same({ blockSize: 16, enablePrefixCaching: false }, acts).quietPasses).toBeGreaterThan(0);
    // Stop tokens drawn often: 'bb' ends at its first one from token 20 on.
    expect(same({ blockSize: 16, outputVocab: Uint32Array.of(1000, 3, 4, 5) }, acts).quietPasses).toBeGreaterThan(0);
  });

  it('random workloads: eviction, preemption, host tier, hybrid groups, the token budget', () => {
    const workload = fc.array(
      fc.record({
        gap: fc.double({ min: 0, max: 40, noNaN: true }),
        prefix: fc.integer({ min: 0, max: 3 }),
        len: fc.integer({ min: 1, max: 40 }),
        out: fc.integer({ min: 1, max: 50 }),
        stop: fc.boolean(),
        next: fc.constantFrom('none', 'abort', 'stats', 'snapshot', 'reset'),
      }),
      { minLength: 1, maxLength: 14 },
    );
    const configs: Partial<CoreConfig>[] = [
      { numGpuBlocks: 14, maxNumSeqs: 4, maxNumBatchedTokens: 32 },
      { blockSize: 16, numGpuBlocks: 6, maxNumSeqs: 3, perfModel: H200 },
      { blockSize: 8, numGpuBlocks: 10, numCpuBlocks: 4, maxNumBatchedTokens: 2 },
      { numGpuBlocks: 12, numCpuBlocks: 8, maxNumBatchedTokens: 3 },
      { numGpuBlocks: 40, hybrid: { kind: 'sliding_window', window: 9 }, hybridBlocks: 10 },
      { numGpuBlocks: 40, hybrid: { kind: 'mamba' }, perfModel: H200 },
      { numGpuBlocks: 20, enablePrefixCaching: false, enableChunkedPrefill: false, maxNumBatchedTokens: 64 },
    ];
    let quiet = 0;
    fc.assert(
      fc.property(workload, fc.integer({ min: 0, max: configs.length - 1 }), (reqs, c) => {
        const acts: Act[] = [];
        let at = 0;
        reqs.forEach((r, i) => {
          at += r.gap;
          const p = Uint32Array.from({ length: r.len }, (_, k) => (k < 8 ? r.prefix * 1000 + k : i * 1000 + k));
          const extra = r.stop ? { stopTokenIds: [1000 + i, 1001 + i], minTokens: 5 } : {};
          acts.push({ at, kind: 'add', spec: { id: `q${i}`, prompt: p, maxTokens: r.out, ...extra } });
          const later = at + r.gap / 2;
          if (r.next === 'abort') acts.push({ at: later, kind: 'abort', id: `q${i}` });
          else if (r.next !== 'none') acts.push({ at: later, kind: r.next });
        });
        acts.sort((a, b) => a.at - b.at);
        quiet += same({ outputVocab: rangeVocab(1000, 1040), ...configs[c] }, acts).quietPasses;
      }),
      { numRuns: 200, seed: 7 },
    );
    expect(quiet).toBeGreaterThan(1000);
  });
});

describe('a quiet plan', () => {
  it('is applied only as planned: at most its length, and not after anything else touched the core', () => {
    const e = new EngineCore({ blockSize: 16, numGpuBlocks: 64, outputVocab: VOCAB });
    e.add({ id: 'a', prompt: prompt(20, 1), maxTokens: 60 }, 0);
    expect(e.planQuiet(0)).toBe(0); // waiting: the next pass admits
    const first = e.step(0)!;
    const n = e.planQuiet(first.endMs);
    // Prompt 20 + first token: KV of 20 tokens in two blocks, the second full after 11 more passes.
    expect(n).toBe(11);
    expect(e.quietStartMs).toBe(first.endMs);
    expect(e.quietTokens).toBe(1);
    expect(() => e.runQuiet(n + 1)).toThrow(RangeError);
    expect(e.planQuiet(first.endMs)).toBe(n);
    e.add({ id: 'b', prompt: prompt(5, 900), maxTokens: 4 }, first.endMs);
    expect(() => e.runQuiet(1)).toThrow(RangeError);
    expect(e.planQuiet(first.endMs)).toBe(0);
  });
});
