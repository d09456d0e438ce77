import { describe, expect, it } from 'vitest';
import { TieredIndexer } from '../../src/indexer/namespaces.js';
import { KvIndexWriter } from '../../src/indexer/writer.js';
import { FeedbackLoop, predictedCachedTokens } from '../../src/feedback/loop.js';
import { parseUsage, USAGE_TAIL_BYTES, UsageTail } from '../../src/feedback/usage-tail.js';
import { HitVerifier, judge } from '../../src/feedback/verifier.js';
import type { Decision } from '../../src/scheduler/scheduler.js';

describe('usage tail', () => {
  it('reads the last usage of a JSON body and of an SSE stream, whatever the chunking', () => {
    const json = Buffer.from(
      JSON.stringify({
        id: 'x',
        choices: [{ text: 'a'.repeat(20_000) }],
        usage: {
          prompt_tokens: 300,
          completion_tokens: 4,
          total_tokens: 304,
          prompt_tokens_details: { cached_tokens: 256 },
        },
      }),
    );
    const sse = Buffer.from(
      [
        `data: ${JSON.stringify({ choices: [{ delta: { content: 'hi' } }], usage: { prompt_tokens: 300, prompt_tokens_details: { cached_tokens: 0 } } })}`,
        `data: ${JSON.stringify({ choices: [], usage: { prompt_tokens: 300, completion_tokens: 9, prompt_tokens_details: { cached_tokens: 288 } } })}`,
        'data: [DONE]',
        '',
      ].join('\n\n'),
    );
    for (const [body, cached] of [
      [json, 256],
      [sse, 288],
    ] as const) {
      for (const size of [1, 7, 4096, body.length]) {
        const t = new UsageTail();
        for (let i = 0; i < body.length; i += size) t.push(body.subarray(i, i + size));
        expect(t.read()).toEqual({ promptTokens: 300, cachedTokens: cached });
      }
    }
    // Without prompt_tokens_details (vLLM without --enable-prompt-tokens-details) or without usage at all.
    expect(parseUsage('{"usage":{"prompt_tokens":12,"completion_tokens":3}}')).toEqual({
      promptTokens: 12,
      cachedTokens: null,
    });
    expect(parseUsage('data: {"choices":[{"delta":{"content":"x"}}]}\n\ndata: [DONE]')).toBeNull();
    expect(USAGE_TAIL_BYTES).toBeGreaterThanOrEqual(4096);
  });
});

describe('HitVerifier', () => {
  it('agrees within a block, raises after a full window mostly wrong one way, clears with hysteresis', () => {
    expect([judge(256, 240, 16), judge(256, 200, 16), judge(0, 64, 16)]).toEqual(['agree', 'over', 'under']);
    const v = new HitVerifier({ window: 10, alarmRatio: 0.8 });
    // Uninformative requests (neither side expects a hit) are not judged.
    expect(v.observe('a', 0, 0, 16, 0)).toBeNull();
    for (let i = 0; i < 9; i++) expect(v.observe('a', 512, 0, 16, i)!.raised).toBeNull();
    const o = v.observe('a', 512, 0, 16, 9)!;
    expect(o.raised).toMatchObject({
      instance: 'a',
      direction: 'over',
      count: 10,
      of: 10,
      meanPredicted: 512,
      meanReported: 0,
    });
    expect(o.raised!.message).toBe(
      'instance a: predicted 512 cached tokens, engine reported 0 in 10 of 10 requests: the index credits blocks the engine does not reuse: check block_size, hash seed, LoRA / cache_salt scoping, or an engine that lost its cache without a cleared event',
    );
    // Still wrong in 4 of the last 10 (above 0.4): the alarm holds; at 3 it clears.
    for (let i = 0; i < 6; i++) expect(v.observe('a', 512, 512, 16, 20 + i)!.cleared).toBeNull();
    expect(v.alarm('a')).not.toBeNull();
    expect(v.observe('a', 512, 512, 16, 30)!.cleared).toMatchObject({ instance: 'a' });
    expect(v.alarms()).toEqual([]);
    expect(v.totals('a')).toEqual({ agree: 7, over: 10, under: 0 });
  });
});

describe('FeedbackLoop', () => {
  const decision = (instance: string, indexedBlocks: number, isl = 1000): Decision =>
    ({ chosen: { instance, dpRank: 0, indexedBlocks }, isl, blockSize: 16, policy: 'kv' }) as unknown as Decision;

  it('predicts whole blocks and never the last token', () => {
    const p = (indexedBlocks: number) => ({ instance: 'a', isl: 1000, blockSize: 16, indexedBlocks });
    expect(predictedCachedTokens(p(100))).toBe(992);
    expect(predictedCachedTokens(p(62))).toBe(992);
    expect(predictedCachedTokens(p(10))).toBe(160);
  });

  it('distrust takes the instance out of credit while wrong and gives it back once predictions agree', () => {
    const lines: string[] = [];
    const distrusted = new Set<string>();
    const judged: string[] = [];
    const loop = new FeedbackLoop(
      { enabled: true, window: 5, alarmRatio: 0.8, action: 'distrust' },
      {
        writer: new KvIndexWriter(new TieredIndexer()),
        distrusted,
        log: (l) => lines.push(l),
        now: () => 0,
        judged: (i, v) => judged.push(`${i}:${v}`),
      },
    );
    for (let i = 0; i < 5; i++) loop.reported(decision('a', 0), { promptTokens: 1000, cachedTokens: 800 });
    expect(distrusted.has('a')).toBe(true);
    expect(lines[0]).toMatch(
      /^kvrouter: hit-prediction alarm: instance a: predicted 0 cached tokens, engine reported 800 in 5 of 5 requests: .*; its index entries earn no credit until predictions agree again$/,
    );
    loop.reported(decision('a', 0), { promptTokens: 1000, cachedTokens: null });
    expect(judged.at(-1)).toBe('a:unverified');
    for (let i = 0; i < 4; i++) loop.reported(decision('a', 50), { promptTokens: 1000, cachedTokens: 800 });
    expect(distrusted.has('a')).toBe(false);
    expect(lines.at(-1)).toMatch(
      /alarm cleared: instance a's predictions agree with the engine again; its index entries are credited again/,
    );
    expect(loop.actions.map((a) => a.action)).toEqual(['distrust', 'trust']);
    // A cache-blind policy's decisions are not judged (its routing ignores the index).
    const judgedBefore = judged.length;
    loop.reported({ ...decision('a', 0), policy: 'round-robin' } as Decision, {
      promptTokens: 1000,
      cachedTokens: 800,
    });
    expect(judged.length).toBe(judgedBefore);
    // Reloads: switching to distrust takes instances with open alarms out of credit at once;
    // switching away lets them back in; a new window starts afresh.
    loop.configure({ enabled: true, window: 5, alarmRatio: 0.8, action: 'warn' });
    for (let i = 0; i < 5; i++) loop.reported(decision('b', 0), { promptTokens: 1000, cachedTokens: 800 });
    expect(distrusted.size).toBe(0);
    loop.configure({ enabled: true, window: 5, alarmRatio: 0.8, action: 'distrust' });
    expect([...distrusted]).toEqual(['b']);
    loop.configure({ enabled: true, window: 5, alarmRatio: 0.8, action: 'warn' });
    expect(distrusted.size).toBe(0);
    loop.configure({ enabled: true, window: 7, alarmRatio: 0.8, action: 'warn' });
    expect(loop.verifier.alarms()).toEqual([]);
  });
});
