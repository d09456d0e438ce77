import { describe, expect, it } from 'vitest';
import { AdapterDirectory } from '../../src/lora/directory.js';
import { adaptersIn } from '../../src/router/adapter-discovery.js';
import { TieredIndexer } from '../../src/indexer/namespaces.js';
import type { CostWeights } from '../../src/scheduler/cost.js';
import { type RouteInput, Scheduler } from '../../src/scheduler/scheduler.js';

describe('AdapterDirectory', () => {
  it('merges configured and discovered adapters; one base model per adapter name; forgets instances', () => {
    const d = new AdapterDirectory();
    d.setConfigured('e0', 'base', ['sql-a']);
    d.setDiscovered('e1', 'base', ['sql-a', 'sql-b']);
    d.setDiscovered('x9', 'other-base', ['sql-a', 'sql-c']);
    expect(d.resolve('sql-a')).toEqual({ adapter: 'sql-a', model: 'base', instances: new Set(['e0', 'e1']) });
    expect(d.resolve('sql-c')?.model).toBe('other-base');
    expect(d.resolve('nope')).toBeNull();
    expect(d.list().map((a) => a.adapter)).toEqual(['sql-a', 'sql-b', 'sql-c']);
    expect(d.adaptersOf('e1')).toEqual(['sql-a', 'sql-b']);
    // Discovery replaces an instance's list as a whole.
    d.setDiscovered('e1', 'base', ['sql-b']);
    expect(d.resolve('sql-a')!.instances).toEqual(new Set(['e0']));
    // With base's last sql-a instance gone, the other base model's sql-a is the only one left.
    d.forget('e0');
    expect(d.resolve('sql-a')).toEqual({ adapter: 'sql-a', model: 'other-base', instances: new Set(['x9']) });
    d.forget('x9');
    expect(d.resolve('sql-a')).toBeNull();
  });

  it('reads adapters from a vLLM /v1/models answer by their parent', () => {
    const body = {
      object: 'list',
      data: [
        { id: 'base', object: 'model', parent: null },
        { id: 'sql-a', object: 'model', root: '/loras/sql', parent: 'base' },
        { id: 'other', object: 'model', parent: 'another-model' },
        { id: 7, parent: 'base' },
      ],
    };
    expect(adaptersIn(body, new Set(['base', 'alias']))).toEqual(['sql-a']);
    expect(adaptersIn({ error: 'x' }, new Set(['base']))).toBeNull();
  });
});

describe('adapter affinity', () => {
  const ns = { model: 'm', blockSize: 4, loraName: 'sql-a', salt: null, tenant: 'default' };
  const W: CostWeights = {
    model: 'time',
    overlapWeight: 1,
    medium: { cpu: 0.75, disk: 0.25, shared: 0.5 },
    trackActiveBlocks: true,
    decodeInterference: 0,
  };
  const input = (tokens: number[]): RouteInput => ({
    ns,
    candidates: [
      { instance: 'a', dpRank: 0 },
      { instance: 'b', dpRank: 0 },
    ],
    tokens,
    policy: 'kv',
    weights: W,
    temperature: 0,
    adapter: 'sql-a',
    adapterLoadMs: 200,
    adapterWarmMs: 60_000,
  });

  it('prefers the instance that served the adapter recently, until that wears off', () => {
    const s = new Scheduler(new TieredIndexer(), () => 0.5);
    const first = s.decide(input([1, 2, 3, 4, 5]), 0);
    expect(first.candidates.map((c) => c.adapterLoadMs)).toEqual([200, 200]);
    s.book(first, ns, { requestId: 'r1', now: 0, speculativeTtlMs: 0 });
    s.free('r1');
    const warm = first.chosen!.instance;
    // Another prompt (no cache in common): the adapter is the only difference.
    const next = s.decide(input([9, 8, 7, 6, 5]), 1000);
    expect(next.chosen!.instance).toBe(warm);
    expect(next.chosen!.adapterLoadMs).toBe(0);
    expect(next.candidates.find((c) => c.instance !== warm)!.ttftMs - next.chosen!.ttftMs).toBeCloseTo(200, 6);
    expect(s.decide(input([9, 8, 7, 6, 5]), 61_001).candidates.every((c) => c.adapterLoadMs === 200)).toBe(true);
    s.dropInstance(warm);
    expect(s.decide(input([9, 8, 7, 6, 5]), 1000).candidates.every((c) => c.adapterLoadMs === 200)).toBe(true);
  });
});
