// The fleet simulation's engine-metrics scrapes: policies that read the engines' gauges (gie,
// llm-d, kv-scrape) see them as a scrape left them, taken every interval of virtual time through
// the router's own reader, and never fresher; the run stays a function of its inputs. Its expiry
// sweep drops the router's expired predictions, as the server's timer does.
import { describe, expect, it } from 'vitest';
import { simulateFleet } from '../../src/fleet-sim/simulation.js';
import type { FleetOutput } from '../../src/fleet-sim/types.js';
import type { EngineLoad } from '../../src/engine-load/load-view.js';
import { prefixPrompts, smallFleet } from '../helpers/fleet.js';

const ENGINES = 3;
const N = 90;
const ids = Array.from({ length: ENGINES }, (_, k) => `e${k}`);

/** Prompts over 6 shared prefixes of 256 tokens with distinct tails: prefix scorers have something to find. */
const prompts = prefixPrompts(7, N, { prefixes: 6, prefixLen: 256, tailMin: 128, tailSpan: 512 });

interface Seen {
  i: number;
  now: number;
  engine: number;
  load: EngineLoad | null;
  /** The engine's true gauges at the decision. */
  live: { running: number; waiting: number };
}

function run(policy: string, scrapeIntervalMs: number | null): { out: FleetOutput; seen: Seen[] } {
  const { input, engines } = smallFleet(policy, ids, prompts, {
    atMs: (i) => i * 20,
    maxTokens: 24,
    numGpuBlocks: 400,
  });
  const seen: Seen[] = [];
  input.scrapeIntervalMs = scrapeIntervalMs;
  input.onDecision = (i, d, now) => {
    for (const c of d.candidates) {
      const k = ids.indexOf(c.instance);
      const s = engines[k].stats();
      seen.push({ i, now, engine: k, load: c.engine, live: { running: s.running, waiting: s.waiting } });
    }
  };
  return { out: simulateFleet(input), seen };
}

describe('fleet simulation: engine-metrics scrapes', () => {
  it('gie reads gauges taken at scrape instants only, stale between them', () => {
    const every = 200;
    const { out, seen } = run('gie', every);
    expect(out.records.every((r) => r.status === 200)).toBe(true);
    expect(out.scrapes).toBeGreaterThan(ENGINES * 5);
    const scraped = seen.filter((s) => s.load !== null);
    // Before an engine's first scrape (at its phase k/N of the interval) it has none.
    expect(scraped.length).toBeGreaterThan(seen.length / 2);
    for (const s of scraped) {
      const at = s.load!.at;
      const phase = (s.engine * every) / ENGINES;
      // Taken at one of engine k's scrape instants, the latest one at or before the decision.
      expect(Math.abs((at - phase) / every - Math.round((at - phase) / every))).toBeLessThan(1e-9);
      expect(at).toBeLessThanOrEqual(s.now);
      // (A decision at the very instant of the next scrape may run just before it.)
      expect(s.now - at).toBeLessThanOrEqual(every);
    }
    // Per engine, the value a decision reads changes only where a scrape lies in between.
    for (let k = 0; k < ENGINES; k++) {
      const xs = scraped.filter((s) => s.engine === k);
      for (let j = 1; j < xs.length; j++) {
        const [a, b] = [xs[j - 1].load!, xs[j].load!];
        if (a.at === b.at) expect([b.running, b.waiting, b.kvUsage]).toEqual([a.running, a.waiting, a.kvUsage]);
      }
    }
    // The load changes between scrapes: some decisions read a queue the engine no longer has.
    const stale = scraped.filter((s) => s.load!.running !== s.live.running || s.load!.waiting !== s.live.waiting);
    expect(stale.length).toBeGreaterThan(0);
    expect(scraped.some((s) => s.load!.waiting > 0)).toBe(true);
  });

  it('is deterministic for a seed, and the scrape interval changes the routing', () => {
    const a = run('gie', 50);
    const b = run('gie', 50);
    expect(JSON.stringify(b.out.records)).toBe(JSON.stringify(a.out.records));
    expect(b.out.scrapes).toBe(a.out.scrapes);
    // Scraped once at the start (idle engines) and never again: the queue and KV scorers read zeros.
    const blind = run('gie', 1e9);
    expect(blind.seen.every((s) => s.load === null || (s.load.waiting === 0 && s.load.running === 0))).toBe(true);
    expect(blind.out.records.map((r) => r.instance)).not.toEqual(a.out.records.map((r) => r.instance));
  });

  it('llm-d and kv-scrape run on scraped gauges; without scrapes every candidate reads none', () => {
    for (const p of ['llm-d', 'kv-scrape']) {
      const { out, seen } = run(p, 100);
      expect(out.records.every((r) => r.status === 200)).toBe(true);
      expect(seen.some((s) => s.load !== null && s.load.running > 0)).toBe(true);
    }
    const off = run('gie', null);
    expect(off.out.scrapes).toBe(0);
    expect(off.seen.every((s) => s.load === null)).toBe(true);
  });
  it("llm-d's picks follow the gauges: scraped queues and KV usage move requests that a blind run places elsewhere", () => {
    const live = run('llm-d', 50);
    // Scraped once at the start (idle engines) and never again: queue and KV scorers read equal values.
    const blind = run('llm-d', 1e9);
    expect(live.seen.some((s) => s.load !== null && s.load.waiting > 0)).toBe(true);
    const [a, b] = [live.out.records.map((r) => r.instance), blind.out.records.map((r) => r.instance)];
    expect(a).not.toEqual(b);
    // Not a reshuffle by the random tie-break alone: the live run spreads over every engine.
    expect(new Set(a).size).toBe(ENGINES);
  });
});

describe('fleet simulation: the index sweeps expired predictions as the server does', () => {
  it("kv's speculative inserts leave the index once their TTL passes (the server's one-second expiry timer)", () => {
    const { out } = run('kv', null);
    expect(out.records.every((r) => r.status === 200)).toBe(true);
    // The last booking is over 2 s (kv's speculative_ttl_ms) before the run ends: what the index still
    // holds is what the engines reported, at most their 400 GPU blocks each (without the sweep: 1,375).
    expect(out.routers[0].index.records).toBeLessThanOrEqual(ENGINES * 400);
    expect(out.routers[0].index.records).toBeGreaterThan(ENGINES * 300);
  });
});
