// The routing variants the cluster benchmark compares, and how each is configured on the router.

export interface PolicyVariant {
  /** Name in flags and reports. */
  name: string;
  /** routing.policy of the router. */
  policy: string;
  /** Extra lines under `routing:`. */
  routingYaml: string[];
  /** Whether the router subscribes to the engines' KV events. */
  kvEvents: boolean;
  summary: string;
}

export const VARIANTS: readonly PolicyVariant[] = [
  { name: 'kv', policy: 'kv', routingYaml: [], kvEvents: true, summary: 'predicted-TTFT cost with co-location on the index fed by KV events, host-tier credit 0.75' },
  {
    name: 'kv-blocks',
    policy: 'kv',
    routingYaml: ['  cost_model: blocks'],
    kvEvents: true,
    summary: 'kv with Dynamo\'s block cost (overlap_weight x prefill_blocks + decode_blocks), the default before 0.2',
  },
  {
    name: 'kv-no-tier',
    policy: 'kv',
    routingYaml: ['  medium_weights: { cpu: 0, disk: 0, shared: 0 }'],
    kvEvents: true,
    summary: 'kv without tier credit (cpu=0, disk=0, shared=0)',
  },
  { name: 'approx', policy: 'approx', routingYaml: [], kvEvents: false, summary: 'cost on router-predicted blocks; KV events ignored' },
  { name: 'round-robin', policy: 'round-robin', routingYaml: [], kvEvents: false, summary: 'rotation' },
  { name: 'random', policy: 'random', routingYaml: [], kvEvents: false, summary: 'uniform (router Math.random: not seeded)' },
  { name: 'least-loaded', policy: 'least-loaded', routingYaml: [], kvEvents: false, summary: 'fewest in-flight requests, then prefill tokens, then blocks' },
  { name: 'power-of-two', policy: 'power-of-two', routingYaml: [], kvEvents: false, summary: 'less loaded of two random instances' },
  { name: 'session', policy: 'session', routingYaml: [], kvEvents: false, summary: 'rendezvous hash of the session header' },
];

/** The default selection: every variant the issue asks for (power-of-two on request). */
export const DEFAULT_POLICIES = ['kv', 'kv-no-tier', 'approx', 'round-robin', 'random', 'least-loaded', 'session'];

export function variant(name: string): PolicyVariant {
  const v = VARIANTS.find((x) => x.name === name);
  if (!v) throw new Error(`unknown policy '${name}' (one of ${VARIANTS.map((x) => x.name).join(', ')})`);
  return v;
}
