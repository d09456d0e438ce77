// The two disaggregated-serving wire protocols, as pure body rewrites, and the choice between
// remote and local prefill. Field names follow the engines' own proxies (docs/disaggregated.md):
//   vLLM (NIXL and other KV connectors): vllm tests/v1/kv_connector/nixl_integration/toy_proxy_server.py
//   SGLang (bootstrap): sglang python/sglang/srt/disaggregation/mini_lb.py

export const DISAGG_MODES = ['auto', 'remote', 'local'] as const;
/** Per request: auto (remote prefill unless the decode side holds the prompt), remote (always), local (never). */
export type DisaggMode = (typeof DISAGG_MODES)[number];

export type OpenAIBody = Record<string, unknown>;

/**
 * Body fields that steer a KV transfer between engines: which engine a decode engine fetches KV
 * from (host, port, engine id, block ids, room) and which request's. The router owns them end to
 * end: it sets them on the legs it sends (the rewrites below), and a client's body that carries any
 * of them is refused, on every path (proxy, decision API, gateway picker). Passed through, they would
 * send a decode engine to an address the client chose, for KV the client names (another request's).
 * vLLM's connectors read `kv_transfer_params`; SGLang's disaggregation the `bootstrap_*` fields and
 * the two after them (its router sets those too).
 */
export const ROUTER_OWNED_FIELDS = [
  'kv_transfer_params',
  'bootstrap_host',
  'bootstrap_port',
  'bootstrap_room',
  'bootstrap_pair_key',
  'decode_tp_size',
  'disagg_prefill_dp_rank',
] as const;

/** The first router-owned field a client's body carries (whatever its value, null included), or null. */
export function routerOwnedField(body: OpenAIBody): string | null {
  for (const f of ROUTER_OWNED_FIELDS) if (Object.hasOwn(body, f)) return f;
  return null;
}

/**
 * The prefill leg of the vLLM protocol: ask for remote decode, one token, no streaming. Options the
 * prefill engine does not support with max_tokens 1 (min_tokens) are dropped, as vLLM's proxy does.
 */
export function vllmPrefillBody(body: OpenAIBody): OpenAIBody {
  // A clone, then assignments: keys added after a spread in one literal are V8's slow path.
  const out: OpenAIBody = { ...body };
  out.kv_transfer_params = {
    do_remote_decode: true,
    do_remote_prefill: false,
    remote_engine_id: null,
    remote_block_ids: null,
    remote_host: null,
    remote_port: null,
  };
  out.stream = false;
  out.max_tokens = 1;
  if ('max_completion_tokens' in out) out.max_completion_tokens = 1;
  delete out.stream_options;
  delete out.min_tokens;
  delete out.min_completion_tokens;
  return out;
}

/** The prefill response's kv_transfer_params (top level of its JSON body), or null when absent. */
export function transferParamsOf(response: unknown): OpenAIBody | null {
  if (typeof response !== 'object' || response === null || Array.isArray(response)) return null;
  const p = (response as OpenAIBody).kv_transfer_params;
  return typeof p === 'object' && p !== null && !Array.isArray(p) ? (p as OpenAIBody) : null;
}

/** The decode leg of the vLLM protocol: the client's request, with the prefill's params passed through untouched. */
export function vllmDecodeBody(body: OpenAIBody, params: OpenAIBody | null): OpenAIBody {
  if (!params) return body;
  const out: OpenAIBody = { ...body };
  out.kv_transfer_params = params;
  return out;
}

export interface Bootstrap {
  host: string;
  port: number;
  /** Unique per request; SGLang takes any non-negative integer (its router draws u63): kept under 2^53 so JSON carries it exactly. */
  room: number;
}

/** A bootstrap room from 53 random bits (`rand` returns [0, 1)). */
export function bootstrapRoom(rand: () => number): number {
  return Math.floor(rand() * 2 ** 21) * 2 ** 32 + Math.floor(rand() * 2 ** 32);
}

/** Both legs of the SGLang protocol carry the same bootstrap fields (a batch prompt gets one room per item). */
export function sglangBody(body: OpenAIBody, b: Bootstrap, batch = 0, rand: () => number = Math.random): OpenAIBody {
  const out: OpenAIBody = { ...body };
  if (batch > 1) {
    const rooms = [b.room, ...Array.from({ length: batch - 1 }, () => bootstrapRoom(rand))];
    out.bootstrap_host = rooms.map(() => b.host);
    out.bootstrap_port = rooms.map(() => b.port);
    out.bootstrap_room = rooms;
    return out;
  }
  out.bootstrap_host = b.host;
  out.bootstrap_port = b.port;
  out.bootstrap_room = b.room;
  return out;
}

export type PathReason =
  | 'remote'
  | 'header'
  | 'cached_tail'
  | 'short_prompt'
  | 'no_prefill_instance'
  | 'prefill_failed'
  | 'prefill_busy'
  | 'untokenized';

export interface PathInput {
  mode: DisaggMode;
  /** Prompt tokens (0 when the router could not tokenize it). */
  isl: number;
  /** Prompt tokens the chosen decode instance would have to compute itself. */
  uncachedOnDecode: number;
  /** Whether a mostly cached or short prompt may skip remote prefill. */
  bypass: boolean;
  uncachedThreshold: number;
  minPromptTokens: number;
  /** A prefill instance is available to try. */
  prefillAvailable: boolean;
}

/**
 * Remote prefill, or local on the decode instance, and why. Whether the request needs a prefill
 * leg is decided first; `no_prefill_instance` means it needs one and none is available (what
 * `prefill_fallback` then decides), never that a request the bypass would keep local lacked one.
 */
export function choosePath(p: PathInput): { remote: boolean; reason: PathReason } {
  const need = needsPrefillLeg(p);
  if (!need.remote || p.prefillAvailable) return need;
  return { remote: false, reason: 'no_prefill_instance' };
}

function needsPrefillLeg(p: PathInput): { remote: boolean; reason: PathReason } {
  if (p.mode === 'local') return { remote: false, reason: 'header' };
  if (p.mode === 'remote') return { remote: true, reason: 'header' };
  if (p.isl === 0) return { remote: true, reason: 'untokenized' };
  if (!p.bypass) return { remote: true, reason: 'remote' };
  if (p.isl < p.minPromptTokens) return { remote: false, reason: 'short_prompt' };
  if (p.uncachedOnDecode <= p.uncachedThreshold) return { remote: false, reason: 'cached_tail' };
  return { remote: true, reason: 'remote' };
}
