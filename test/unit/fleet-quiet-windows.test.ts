// Quiet windows (EngineCore.planQuiet, the queue's Recurrence, EngineNode closing a window on any
// access) are a speed change only: the same fleet run with windows and with every pass stepped and
// delivered on its own gives the same records, engine and router tallies and event count, with
// scrapes reading the engines mid-window, replicas syncing, and a run deadline cutting requests
// in the middle of their windows.
import { describe, expect, it } from 'vitest';
import { simulateFleet } from '../../src/fleet-sim/simulation.js';
import type { FleetOutput } from '../../src/fleet-sim/types.js';
import { prefixPrompts, smallFleet } from '../helpers/fleet.js';

const ids = ['e0', 'e1', 'e2'];
const prompts = prefixPrompts(11, 60, { prefixes: 4, prefixLen: 200, tailMin: 40, tailSpan: 300 });

interface Case {
  policy: string;
  scrapeIntervalMs: number | null;
  routers: number;
  drainTimeoutMs: number;
}

function run(c: Case, quietWindows: boolean): { out: FleetOutput; windows: number } {
  const { input, engines } = smallFleet(c.policy, ids, prompts, {
    atMs: (i) => i * 15,
    maxTokens: 90,
    numGpuBlocks: 300,
  });
  input.scrapeIntervalMs = c.scrapeIntervalMs;
  input.routers = c.routers;
  input.syncDelayMs = c.routers > 1 ? 1 : null;
  input.drainTimeoutMs = c.drainTimeoutMs;
  input.quietWindows = quietWindows;
  let windows = 0;
  for (const core of engines) {
    const plan = core.planQuiet.bind(core);
    core.planQuiet = (now: number) => {
      const n = plan(now);
      if (n > 0) windows++;
      return n;
    };
  }
  return { out: simulateFleet(input), windows };
}

/** Everything the run returns but the real-clock decision times. */
function figures(out: FleetOutput): string {
  const { wallDecisions: _, ...rest } = out;
  return JSON.stringify(rest);
}

describe('fleet simulation: quiet windows change nothing but speed', () => {
  const cases: Case[] = [
    { policy: 'kv', scrapeIntervalMs: null, routers: 1, drainTimeoutMs: 600_000 },
    { policy: 'gie', scrapeIntervalMs: 7, routers: 1, drainTimeoutMs: 600_000 },
    { policy: 'kv', scrapeIntervalMs: null, routers: 2, drainTimeoutMs: 600_000 },
    // The deadline cuts requests that are decoding (aborts reach engines inside their windows).
    { policy: 'kv', scrapeIntervalMs: null, routers: 1, drainTimeoutMs: 150 },
  ];
  for (const c of cases)
    it(`${c.policy}, ${c.routers} router(s), scrapes ${c.scrapeIntervalMs ?? 'off'}, drain ${c.drainTimeoutMs} ms`, () => {
      const stepped = run(c, false);
      const windowed = run(c, true);
      expect(stepped.windows).toBe(0);
      // Windows did run (the short run ends early: fewer of them).
      expect(windowed.windows).toBeGreaterThan(c.drainTimeoutMs < 1000 ? 3 : 20);
      const passes = stepped.out.engines.reduce((a, e) => a + e.passes, 0);
      expect(passes).toBeGreaterThan(windowed.windows);
      if (c.drainTimeoutMs < 1000) expect(stepped.out.records.some((r) => r.status === 0)).toBe(true);
      else expect(stepped.out.records.every((r) => r.status === 200)).toBe(true);
      expect(figures(windowed.out)).toBe(figures(stepped.out));
    });
});
