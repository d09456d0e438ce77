// The config types are derived from the schema: these hold at compile time (tsc checks the test
// files) and say what validate() returns, key by key.
import { describe, expectTypeOf, it } from 'vitest';
import type { ClusterConfig } from '../../src/cluster/config.js';
import type { TenantSpec } from '../../src/auth/access.js';
import type {
  InstanceConfig,
  ModelConfig,
  PolicyName,
  RouterConfig,
  RoutingConfig,
  TenantConfig,
} from '../../src/config/schema.js';
import type { KvEventsConfig } from '../../src/events/config.js';

describe('config types derived from the schema', () => {
  it('carry enums, defaults (required keys) and optional keys', () => {
    expectTypeOf<RouterConfig['routing']['policy']>().toEqualTypeOf<PolicyName>();
    expectTypeOf<RouterConfig['server']['port']>().toEqualTypeOf<number>();
    expectTypeOf<RouterConfig['auth']['admin_token']>().toEqualTypeOf<string | undefined>();
    expectTypeOf<RouterConfig['routing']['seed']>().toEqualTypeOf<number | undefined>();
    expectTypeOf<RouterConfig['engine_sim']['event_format']>().toEqualTypeOf<'map' | 'array' | 'sglang' | 'mooncake'>();
    expectTypeOf<RouterConfig['auth']['tenants'][number]['rate_limit']>().toEqualTypeOf<{
      requests_per_second: number;
      burst: number;
    }>();
    expectTypeOf<InstanceConfig['kv_events']>().toEqualTypeOf<
      | { endpoint: string; type: 'vLLM' | 'SGLang' | 'LMCache' | 'Mooncake'; topic: string; replay_endpoint?: string }
      | undefined
    >();
    expectTypeOf<ModelConfig['aliases']>().toEqualTypeOf<string[]>();
  });

  it('makes a model routing override all-optional and the defaults all-required', () => {
    expectTypeOf<NonNullable<ModelConfig['routing']>['overlap_weight']>().toEqualTypeOf<number | undefined>();
    expectTypeOf<RoutingConfig['overlap_weight']>().toEqualTypeOf<number>();
    expectTypeOf<RoutingConfig['medium_weights']>().toEqualTypeOf<{ cpu: number; disk: number; shared: number }>();
  });

  it('derives the sections owned by other folders too', () => {
    expectTypeOf<ClusterConfig['events']['source']>().toEqualTypeOf<'zmq' | 'jetstream'>();
    expectTypeOf<ClusterConfig['router_id']>().toEqualTypeOf<string | undefined>();
    expectTypeOf<KvEventsConfig['on_decode_error']>().toEqualTypeOf<'skip' | 'purge'>();
    expectTypeOf<RouterConfig['kv_events']>().toEqualTypeOf<KvEventsConfig>();
  });

  it('matches what Access takes for a tenant (auth cannot import config: the folders would cycle)', () => {
    expectTypeOf<TenantConfig>().toEqualTypeOf<TenantSpec>();
  });
});
