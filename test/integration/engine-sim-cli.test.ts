// `kvrouter engine-sim` as a process: help, bad flags, the N-engine launcher line format, DP ranks,
// a calibrated perf model, and a clean exit on SIGTERM. Needs dist/ (built by the global setup).
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { Dealer } from 'zeromq';

const BIN = fileURLToPath(new URL('../../bin/kvrouter.js', import.meta.url));
const children: ChildProcess[] = [];

function cli(args: string[]): ChildProcess {
  const child = spawn(process.execPath, [BIN, 'engine-sim', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  return child;
}

function exitCode(child: ChildProcess, timeoutMs = 15_000): Promise<number | null> {
  if (child.exitCode !== null) return Promise.resolve(child.exitCode);
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error('process did not exit')), timeoutMs);
    child.once('exit', (code) => {
      clearTimeout(t);
      resolve(code);
    });
  });
}

function lines(child: ChildProcess, n: number, timeoutMs = 20_000): Promise<string[]> {
  const out: string[] = [];
  const rl = createInterface({ input: child.stdout! });
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`got ${out.length}/${n} lines`)), timeoutMs);
    rl.on('line', (l) => {
      out.push(l);
      if (out.length === n) {
        clearTimeout(t);
        rl.close();
        resolve(out);
      }
    });
  });
}

afterEach(async () => {
  for (const c of children.splice(0)) {
    if (c.exitCode === null && c.signalCode === null) {
      c.kill('SIGKILL');
      await exitCode(c).catch(() => null);
    }
  }
});

describe('kvrouter engine-sim CLI', () => {
  it('--help exits 0; a bad option or value exits non-zero with a message', async () => {
    const help = cli(['--help']);
    const text = (await lines(help, 1))[0];
    expect(text).toMatch(/Usage: kvrouter engine-sim/);
    expect(await exitCode(help)).toBe(0);
    const bad = cli(['--bogus']);
    expect(await exitCode(bad)).toBe(2);
    const badValue = cli(['--event-format', 'xml', '--tokenizer', 'none']);
    let err = '';
    badValue.stderr!.on('data', (d: Buffer) => (err += d.toString()));
    expect(await exitCode(badValue)).toBe(1);
    expect(err).toMatch(/event-format/);
  });

  it('--perf-model h200-qwen3-8b serves with the 8B name and an H200 KV capacity; a bad value fails with one line', async () => {
    const child = cli([
      '--perf-model',
      'h200-qwen3-8b',
      '--port',
      '0',
      '--zmq-port',
      '0',
      '--replay-port',
      '0',
      '--tokenizer',
      'none',
      '--speedup',
      '50',
    ]);
    const [line] = await lines(child, 1);
    const url = /^engine-sim 0 (http:\/\/127\.0\.0\.1:\d+) /.exec(line)?.[1];
    expect(url, line).toBeTruthy();
    const r = await fetch(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'Qwen/Qwen3-8B',
        prompt: Array.from({ length: 40 }, (_, i) => i + 1),
        max_tokens: 3,
      }),
    });
    expect(r.status).toBe(200);
    const body = (await r.json()) as { model: string; usage: { completion_tokens: number } };
    expect([body.model, body.usage.completion_tokens]).toEqual(['Qwen/Qwen3-8B', 3]);
    // (141 GB x 2^30 x 0.9 − 2 B x 8,190,731,264 params) / (147,456 B per token x 16) = 50,810 blocks.
    const cache = (await (await fetch(`${url}/debug/cache`)).json()) as {
      ranks: { tiers: { GPU: { capacity: number; cached_blocks: number } } }[];
    };
    expect([cache.ranks[0].tiers.GPU.capacity, cache.ranks[0].tiers.GPU.cached_blocks]).toEqual([50_810, 2]);
    child.kill('SIGTERM');
    expect(await exitCode(child)).toBe(0);

    for (const [value, want] of [
      [
        'h100-llama',
        /^kvrouter engine-sim: perf-model must be mocker\|h200-qwen3-0\.6b\|h200-qwen3-8b\|h200-qwen3-32b or a calibration JSON file\[#model\], got "h100-llama" \(no such file\)\n$/,
      ],
      [
        fileURLToPath(new URL('../../package.json', import.meta.url)),
        /^kvrouter engine-sim: perf-model \S+package\.json: no "models" array with entries\n$/,
      ],
    ] as const) {
      const bad = cli([
        '--perf-model',
        value,
        '--tokenizer',
        'none',
        '--port',
        '0',
        '--zmq-port',
        '0',
        '--replay-port',
        '0',
      ]);
      let err = '';
      bad.stderr!.on('data', (d: Buffer) => (err += d.toString()));
      expect(await exitCode(bad)).toBe(1);
      expect(err).toMatch(want);
    }
  });

  it('starts N engines, prints one line each, serves them, and exits 0 on SIGTERM', async () => {
    const child = cli([
      '--count',
      '2',
      '--port',
      '0',
      '--zmq-port',
      '0',
      '--replay-port',
      '0',
      '--tokenizer',
      'none',
      '--dp-size',
      '2',
      '--speedup',
      '50',
    ]);
    const out = await lines(child, 2);
    const re =
      /^engine-sim (\d) (http:\/\/127\.0\.0\.1:\d+) zmq (tcp:\/\/127\.0\.0\.1:\d+) replay (tcp:\/\/127\.0\.0\.1:\d+) dp 2$/;
    const parsed = out.map((l) => l.match(re));
    expect(parsed.every(Boolean), out.join('\n')).toBe(true);
    for (const m of parsed) {
      const url = m![2];
      const r = await fetch(`${url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-data-parallel-rank': '1' },
        body: JSON.stringify({ prompt: Array.from({ length: 20 }, (_, i) => i + 1), max_tokens: 2 }),
      });
      expect(r.status).toBe(200);
      const cache = (await (await fetch(`${url}/debug/cache`)).json()) as {
        ranks: { dp_rank: number; tiers: { GPU: { cached_blocks: number } } }[];
      };
      expect(cache.ranks.map((x) => [x.dp_rank, x.tiers.GPU.cached_blocks])).toEqual([
        [0, 0],
        [1, 1],
      ]);
      // Replay answers on rank 0's endpoint (nothing published there: only the end marker).
      const d = new Dealer({ linger: 0, receiveTimeout: 5000 });
      d.connect(m![4]);
      await d.send(['', Buffer.alloc(8)]);
      const end = await d.receive();
      d.close();
      expect(end.map((f) => f.toString('hex'))).toEqual(['', '', 'ffffffffffffffff', '']);
    }
    child.kill('SIGTERM');
    expect(await exitCode(child)).toBe(0);
  });
});
