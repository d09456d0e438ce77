// The routing variants the cluster benchmark compares, and how each is configured on the router.
import { ROUTING_KEYS } from '../../config/schema.js';

export interface PolicyVariant {
  /** Name in flags and reports. */
  name: string;
  /** routing.policy of the router. */
  policy: string;
  /** Extra lines under `routing:`. */
  routingYaml: string[];
  /** Whether the router subscribes to the engines' KV events. */
  kvEvents: boolean;
  /** Extra top-level YAML sections of the router. */
  extraYaml?: string[];
  /** Disaggregated: prefill and decode engines (bench cluster --pd), with or without the bypass; `yaml`: more `disaggregation` keys. */
  pd?: { bypass: boolean; yaml?: string[] };
  summary: string;
}

/** The engines' gauges as GIE's data layer reads them: refreshed every 50 ms, stale after 2 s. */
const PEER_SCRAPE = 'engine_metrics: { scrape: true, interval_ms: 50, stale_ms: 2000 }';

export const VARIANTS: readonly PolicyVariant[] = [
  {
    name: 'kv',
    policy: 'kv',
    routingYaml: [],
    kvEvents: true,
    summary: 'predicted-TTFT cost with co-location on the index fed by KV events, host-tier credit 0.75',
  },
  {
    name: 'kv-blocks',
    policy: 'kv',
    routingYaml: ['  cost_model: blocks'],
    kvEvents: true,
    summary: "kv with Dynamo's block cost (overlap_weight x prefill_blocks + decode_blocks), the default before 0.2",
  },
  {
    name: 'kv-no-tier',
    policy: 'kv',
    routingYaml: ['  medium_weights: { cpu: 0, disk: 0, shared: 0 }'],
    kvEvents: true,
    summary: 'kv without tier credit (cpu=0, disk=0, shared=0)',
  },
  {
    name: 'kv-fa-only',
    policy: 'kv',
    routingYaml: [],
    extraYaml: ['kv_events: { kv_cache_groups: full_attention }'],
    kvEvents: true,
    summary:
      "kv on an index of the full-attention KV-cache groups only (hybrid engines' sliding-window and Mamba groups ignored, the behaviour before issue 39)",
  },
  {
    name: 'kv-scrape',
    policy: 'kv',
    routingYaml: [],
    extraYaml: ['engine_metrics: { scrape: true, interval_ms: 250, stale_ms: 2000 }'],
    kvEvents: true,
    summary:
      "kv plus the engines' own load (num_requests_running / waiting scraped every 250 ms) blended with bookings",
  },
  {
    name: 'pd',
    policy: 'kv',
    routingYaml: [],
    kvEvents: true,
    pd: { bypass: true },
    summary:
      'kv over disaggregated prefill and decode pools (--pd), vLLM connector protocol; a prompt the decode side holds all but 1,024 tokens of skips remote prefill',
  },
  {
    name: 'pd-no-bypass',
    policy: 'kv',
    routingYaml: [],
    kvEvents: true,
    pd: { bypass: false },
    summary: 'pd, every request prefilled remotely',
  },
  {
    name: 'approx',
    policy: 'approx',
    routingYaml: [],
    kvEvents: false,
    summary: 'cost on router-predicted blocks; KV events ignored',
  },
  { name: 'round-robin', policy: 'round-robin', routingYaml: [], kvEvents: false, summary: 'rotation' },
  {
    name: 'random',
    policy: 'random',
    routingYaml: [],
    kvEvents: false,
    summary: 'uniform (router Math.random: not seeded)',
  },
  {
    name: 'least-loaded',
    policy: 'least-loaded',
    routingYaml: [],
    kvEvents: false,
    summary: 'fewest in-flight requests, then prefill tokens, then blocks',
  },
  {
    name: 'power-of-two',
    policy: 'power-of-two',
    routingYaml: [],
    kvEvents: false,
    summary: 'less loaded of two random instances',
  },
  {
    name: 'session',
    policy: 'session',
    routingYaml: [],
    kvEvents: false,
    summary: 'rendezvous hash of the session header',
  },
  // The peers' default algorithms (docs/benchmarks.md, "Peer baselines"), each with the inputs it
  // reads: KV events where the peer subscribes to them, the engines' gauges scraped as its
  // endpoint picker does (GIE and llm-d: every 50 ms, stale after 2 s), nothing else.
  {
    name: 'dynamo',
    policy: 'dynamo',
    routingYaml: [],
    kvEvents: true,
    summary: "Dynamo's default block cost on KV events (device 1, host 0.75, disk 0.25)",
  },
  {
    name: 'sglang',
    policy: 'sglang',
    routingYaml: [],
    kvEvents: false,
    summary: 'SGLang Model Gateway cache_aware: its approximate tree of request text, CLI defaults',
  },
  {
    name: 'gie',
    policy: 'gie',
    routingYaml: [],
    kvEvents: false,
    extraYaml: [PEER_SCRAPE],
    summary: 'Gateway API Inference Extension default profile: queue 2, KV utilisation 2, approximate prefix 3',
  },
  {
    name: 'llm-d',
    policy: 'llm-d',
    routingYaml: [],
    kvEvents: true,
    extraYaml: [PEER_SCRAPE],
    summary: 'llm-d v0.8 precise prefix profile: KV-event prefix with tier weights 2, KV utilisation 1, queue 1',
  },
  {
    name: 'llm-d-sticky',
    policy: 'llm-d-sticky',
    routingYaml: [],
    kvEvents: false,
    summary: 'llm-d sticky until saturated: prefix affinity filter (>= 0.8, TTFT gate 18 s), in-flight token load',
  },
  {
    name: 'aibrix',
    policy: 'aibrix',
    routingYaml: [],
    kvEvents: false,
    summary: 'AIBrix prefix-cache: 4-character block table, imbalance gate 8, mean + 1 sd',
  },
  {
    name: 'vllm-router',
    policy: 'vllm-router',
    routingYaml: [],
    kvEvents: true,
    summary: 'vllm-project/router kv_aware: longest KV-event prefix, else least loaded',
  },
];

/** Every peer variant's name, in the order of docs/benchmarks.md's table. */
export const PEER_POLICIES = ['dynamo', 'sglang', 'gie', 'llm-d', 'llm-d-sticky', 'aibrix', 'vllm-router'];

/** The default selection: every variant the issue asks for (power-of-two on request). */
export const DEFAULT_POLICIES = ['kv', 'kv-no-tier', 'approx', 'round-robin', 'random', 'least-loaded', 'session'];

const INLINE = /^([\w-]+)\[(.*)\]$/;
// (The bench speaks the vLLM protocol: engine-sim's SGLang bootstrap port is its HTTP port, which the bench does not configure.)
const PD_KEYS = ['uncached_token_threshold', 'min_prompt_tokens'];
const VALUE = /^[\w.+-]+$/;
// Routing blocks set key by key inline: the per-model tier weights, and the router-wide capacity
// queue (busy thresholds: a router holding requests while every candidate is busy, to A/B it).
const NESTED = ['medium_weights', 'busy'];

/**
 * A variant by name, or a named variant with routing keys set inline:
 * `kv[prefix_affinity=0.25,decode_interference=0]`, `kv[medium_weights.cpu=0.5]`,
 * `kv[busy.max_active_prefill_tokens=40000]`. Keys are routing keys a model may set, or a key of the
 * router's `routing.busy` block (docs/configuration.md); the router validates the values.
 */
export function variant(name: string): PolicyVariant {
  const m = INLINE.exec(name);
  const baseName = m ? m[1] : name;
  const v = VARIANTS.find((x) => x.name === baseName);
  if (!v) throw new Error(`unknown policy '${baseName}' (one of ${VARIANTS.map((x) => x.name).join(', ')})`);
  if (!m) return v;
  const lines: string[] = [];
  const nested = new Map<string, string[]>();
  const pdKeys: string[] = [];
  for (const part of m[2]
    .split(',')
    .map((x) => x.trim())
    .filter(Boolean)) {
    const eq = part.indexOf('=');
    const key = eq > 0 ? part.slice(0, eq).trim() : '';
    const value = eq > 0 ? part.slice(eq + 1).trim() : '';
    // pd variants also take the model's disaggregation keys.
    if (v.pd && PD_KEYS.includes(key) && VALUE.test(value)) {
      pdKeys.push(`${key}: ${value}`);
      continue;
    }
    const [top, sub, ...rest] = key.split('.');
    if (
      !((ROUTING_KEYS as string[]).includes(top) || top === 'busy') ||
      rest.length > 0 ||
      (sub === undefined ? top === 'busy' : !NESTED.includes(top)) ||
      !VALUE.test(value)
    ) {
      throw new Error(
        `policy '${name}': "${part}" is not routing_key=value (routing keys: ${ROUTING_KEYS.join(', ')}; medium_weights.cpu|disk|shared; busy.max_active_prefill_tokens|max_active_blocks|queue_size|queue_timeout_ms)`,
      );
    }
    if (sub !== undefined) nested.set(top, [...(nested.get(top) ?? []), `${sub}: ${value}`]);
    else lines.push(`  ${top}: ${value}`);
  }
  for (const [k, kv] of nested) lines.push(`  ${k}: { ${kv.join(', ')} }`);
  // YAML refuses duplicate keys: an inline key replaces the base variant's line.
  const keys = new Set(lines.map((l) => l.trim().split(':')[0]));
  const base = v.routingYaml.filter((l) => !keys.has(l.trim().split(':')[0]));
  return {
    ...v,
    name,
    routingYaml: [...base, ...lines],
    summary: `${v.summary}; ${m[2]}`,
    ...(v.pd ? { pd: { ...v.pd, yaml: [...(v.pd.yaml ?? []), ...pdKeys] } } : {}),
  };
}
