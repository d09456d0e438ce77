// dynamo: Dynamo's default KV router (ai-dynamo/dynamo lib/kv-router/src/scheduling/selector/default.rs
// at 07a6c9c, defaults in scheduling/config.rs at 0243c51). Each worker's cost in blocks:
//   cost = prefill_load_scale x max(0, raw_prefill_blocks - credit) + decode_blocks + w_req x active_requests
//   credit = overlap_score_credit x decay x device + host_hit_weight x host + disk_hit_weight x disk + shared_mult x shared
//   raw_prefill_blocks = (active prefill tokens + prompt tokens) / block size; decode_blocks = active + new blocks
// with Dynamo's defaults: credit 1.0, decay 0 (so 1), prefill scale 1.0, host 0.75, disk 0.25,
// shared 0 (the CLI sets 0.5 only with a shared cache), active-request weight 0, temperature 0
// (argmin, uniform ties), KV events on, no predict-on-route (router_predicted_ttl_secs unset).
// That is kvrouter's `blocks` cost model with these weights, forced whatever routing.cost_model says.
// Not modelled: Dynamo's router queue (router_queue_threshold 16: requests wait in the router when
// every worker is over it), which is admission, not the pick.
import { byCost } from './pickers.js';
import { definePolicy } from './types.js';

export const dynamo = definePolicy({
  name: 'dynamo',
  summary: "Dynamo's default block cost on KV events: device 1, host 0.75, disk 0.25; a peer baseline",
  needs: {
    tokens: true,
    index: true,
    predictions: false,
    sessionKey: false,
    target: false,
    text: false,
    engineMetrics: false,
  },
  fallback: 'least-loaded',
  busyFilter: true,
  adminOnly: false,
  predictionTtlKey: 'speculative_ttl_ms',
  predictionTtlMs: 0,
  cost: { model: 'blocks', overlapWeight: 1, medium: { cpu: 0.75, disk: 0.25, shared: 0 }, trackActiveBlocks: true },
  peer: {
    source: 'ai-dynamo/dynamo lib/kv-router/src/scheduling/selector/default.rs, scheduling/config.rs',
    version: '07a6c9c (default.rs), 0243c51 (config.rs)',
    defaults:
      'overlap_score_credit 1.0, decay 0, prefill_load_scale 1.0, host 0.75, disk 0.25, shared 0, active-request weight 0, temperature 0; KV events, no predict-on-route',
  },
  pick: byCost,
});
