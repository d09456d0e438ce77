// POST /debug/route: the proxy path's preparation (model, overrides, tokens) and the scheduler's
// full scoring of every candidate, booking nothing.
import type { Hono } from 'hono';
import { json } from '../api/indexer-routes.js';
import { readOpenAIJson } from '../api/body.js';
import { type CompletionDeps, prepareRoute, routeFields } from './completions.js';
import { overlapTokens } from '../scheduler/scheduler.js';

export function mountDebugRoute(app: Hono, deps: CompletionDeps): void {
  app.post('/debug/route', async (c) => {
    const raw = await readOpenAIJson(c, deps.cfg.server.max_body_bytes);
    const kind = c.req.query('kind') === 'completion' || 'prompt' in raw ? 'completion' : 'chat';
    const headers = Object.fromEntries(c.req.raw.headers);
    const p = await prepareRoute(
      kind,
      raw,
      headers,
      deps,
      deps.access.identify(headers) ?? { kind: 'anonymous' },
      true,
    );
    const { ns, route } = routeFields(p, deps.cfg, deps);
    const t = deps.now();
    const candidates = p.instances
      .filter((i) => i.health.available(t))
      .flatMap((i) => Array.from({ length: i.dpSize }, (_, r) => ({ instance: i.id, dpRank: r })));
    const d = deps.scheduler.decide({ ns, candidates, ...route }, t);
    return json(c, {
      model: p.model.name,
      policy: d.policy,
      prompt_tokens: d.isl,
      block_size: d.blockSize,
      chosen: d.chosen ? { instance: d.chosen.instance, dp_rank: d.chosen.dpRank } : null,
      reason: d.reason,
      steps: {
        filters: d.filtered.map((f) => ({ filter: f.filter, instance: f.instance, dp_rank: f.dpRank })),
        scorer: d.steps.scorer,
        picker: d.steps.picker,
      },
      candidates: d.candidates.map((x) => ({
        instance: x.instance,
        dp_rank: x.dpRank,
        overlap_tokens: overlapTokens(x, d.blockSize),
        credited_blocks: x.creditedBlocks,
        prefill_blocks: x.prefillBlocks,
        decode_blocks: x.decodeBlocks,
        new_blocks: x.newBlocks,
        predicted: {
          queue_ms: x.queueMs,
          prefill_ms: x.prefillMs,
          ttft_ms: x.ttftMs,
          interference_ms: x.interferenceMs,
          prefill_tokens_per_s: x.tokensPerS,
        },
        cost: x.cost,
        load: {
          active_prefill_tokens: x.load.activePrefillTokens,
          active_blocks: x.load.activeBlocks,
          active_requests: x.load.activeRequests,
        },
        busy: x.busy,
        filtered_by: d.filtered.find((f) => f.instance === x.instance && f.dpRank === x.dpRank)?.filter ?? null,
        indexed_tokens: x.indexedBlocks * d.blockSize,
        unbooked_requests: x.unbookedRequests,
        // The scraped gauges as the policy read them (null: no fresh scrape, or scraping is off).
        engine: x.engine ? { running: x.engine.running, waiting: x.engine.waiting, kv_usage: x.engine.kvUsage } : null,
        adapter_load_ms: x.adapterLoadMs,
        distrusted: x.distrusted,
      })),
    });
  });
}
