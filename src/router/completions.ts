// POST /v1/chat/completions and /v1/completions on plain node:http (the hot path): read, parse,
// tokenize exactly as the engine will, build the route and hand it to the proxy.
import { randomUUID } from 'node:crypto';
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import { COMPLETION_PATH, type CompletionKind, OpenAIError, parseCompletion, type PromptSpec } from '../api/openai.js';
import type { RouterConfig } from '../config/schema.js';
import type { ForwardDeps, ForwardJob } from '../proxy/forward.js';
import { forward } from '../proxy/forward.js';
import { passesOn } from '../proxy/hop-by-hop.js';
import type { Access, Principal } from '../auth/access.js';
import {
  ChatTemplateError,
  chatSizeFloor,
  type PromptTokenizer,
  PromptTooLongError,
  type SizeFloor,
  textSizeFloor,
} from '../tokenizer/index.js';
import type { ModelRuntime } from './models.js';
import type { AdapterDirectory } from '../lora/directory.js';
import type { EngineLoadView } from '../engine-load/load-view.js';
import type { InstanceRuntime } from '../proxy/forward.js';
import type { RouterMetrics } from './metrics.js';
import { applyOverrides, type RequestRouting } from './overrides.js';
import { parseOpenAIBody, readRequestBody, reserialize } from '../api/body.js';
import { sendError } from '../api/errors.js';
import { decodeLegRoute, DEFAULT_DISAGG, disaggPlanner, splitLegs } from '../proxy/disagg.js';
import { RequestTrace } from '../tracing/request-trace.js';
import { combineObservers } from './decision-log.js';
import type { Tracing } from '../tracing/tracing.js';
import type { RequestText } from '../scheduler/policies/types.js';
import { policySpec } from '../scheduler/policies/registry.js';
import { requestText } from './request-text.js';
import { routeFields, speculativeTtl } from './route-input.js';

export { routeFields, speculativeTtl };

export interface CompletionDeps extends ForwardDeps {
  cfg: RouterConfig;
  /** OpenTelemetry tracer (null: tracing off, and no tracing code runs). */
  tracing: Tracing | null;
  models: Map<string, ModelRuntime>;
  adapters: AdapterDirectory;
  engineLoads: EngineLoadView;
  metrics: RouterMetrics;
  access: Access;
}

/**
 * Token ids for routing, or null when the router cannot reproduce the engine's prompt (route without
 * affinity). Tokenizing stops once the prompt is certainly over `maxTokens` (a 400).
 */
export async function promptTokens(
  tok: PromptTokenizer,
  p: PromptSpec,
  maxTokens = Infinity,
): Promise<Uint32Array | null> {
  try {
    if (p.kind === 'tokens') return p.tokens;
    if (p.kind === 'text') return await tok.encodeText(p.text, { maxTokens });
    return await tok.encodeChat(p.chat, { maxTokens });
  } catch (err) {
    if (err instanceof ChatTemplateError) {
      if (err.kind === 'unsupported') return null;
      throw new OpenAIError(400, err.message, 'invalid_request_error', 'messages');
    }
    if (err instanceof PromptTooLongError)
      throw new OpenAIError(
        400,
        err.message,
        'invalid_request_error',
        p.kind === 'chat' ? 'messages' : 'prompt',
        'prompt_too_long',
      );
    throw err;
  }
}

export function modelNotFound(model: string): OpenAIError {
  return new OpenAIError(
    404,
    `The model \`${model}\` does not exist.`,
    'invalid_request_error',
    'model',
    'model_not_found',
  );
}

export interface PreparedRoute {
  model: ModelRuntime;
  /** The LoRA adapter the request names, or null for the base model. */
  adapter: string | null;
  /** Instances that may serve it: the model's, or only those serving the adapter. */
  instances: readonly InstanceRuntime[];
  tokens: Uint32Array | null;
  /** The request's text, when the policy routes on it (needs.text); null otherwise. */
  text: RequestText | null;
  routing: RequestRouting;
  cacheSalt: string | null;
  stream: boolean;
  sessionKey: string | null;
  body: Record<string, unknown>;
}

/** Everything the proxy path and /debug/route share: model, overrides and tokens. */
export async function prepareRoute(
  kind: CompletionKind,
  raw: unknown,
  headers: IncomingHttpHeaders,
  deps: Pick<CompletionDeps, 'cfg' | 'models' | 'adapters' | 'metrics' | 'now' | 'access'>,
  principal: Principal,
  /** Tokenize even when the policy does not need tokens (/debug/route, /v1/route). */
  alwaysTokenize = false,
  trace: RequestTrace | null = null,
): Promise<PreparedRoute> {
  const parsed = parseCompletion(kind, raw, deps.cfg.server.max_messages);
  const { model, adapter, instances } = resolveModel(parsed.model, deps);
  if (!deps.access.modelAllowed(principal, parsed.model)) {
    throw new OpenAIError(
      403,
      `this API key may not use the model \`${parsed.model}\``,
      'invalid_request_error',
      'model',
      'model_not_allowed',
    );
  }
  const routing = applyOverrides(headers, model.routing, deps.cfg.routing.header_overrides);
  if (policySpec(routing.policy).adminOnly && !deps.access.mayTarget(principal)) {
    throw new OpenAIError(
      403,
      `the ${routing.policy} policy (x-kvrouter-target) needs the admin token`,
      'invalid_request_error',
      'x-kvrouter-target',
      'forbidden',
    );
  }
  // The config refuses such a policy without the scrape; a request choosing it must not run it blind
  // (every candidate's gauges would read as an idle engine: its load scorers would never move a pick).
  if (policySpec(routing.policy).needs.engineMetrics && !deps.cfg.engine_metrics.scrape) {
    throw new OpenAIError(
      400,
      `the ${routing.policy} policy reads the engines' queue length and KV usage: this router has engine_metrics.scrape off`,
      'invalid_request_error',
      'x-kvrouter-policy',
    );
  }
  // A tenant with a cache salt never shares KV blocks with other tenants (engine and index), and
  // no tenant runs under another's salt.
  const salted = deps.access.saltFor(principal, parsed.cacheSalt);
  if ('status' in salted)
    throw new OpenAIError(salted.status, salted.message, 'invalid_request_error', 'cache_salt', salted.code);
  if (salted.salt !== parsed.cacheSalt) {
    parsed.cacheSalt = salted.salt;
    // A copy (the raw body stays as sent), then the salt: a key added after a spread is V8's slow path.
    parsed.body = { ...parsed.body };
    parsed.body.cache_salt = salted.salt;
  }
  refuseOversized(parsed.prompt, deps.cfg.server, kind);
  const t0 = performance.now();
  // Only policies that declare tokens read them; the others route without paying for tokenization
  // (token-id prompts are free either way).
  const needTokens =
    alwaysTokenize || model.disaggregated || policySpec(routing.policy).needs.tokens || parsed.prompt.kind === 'tokens';
  let tokens: Uint32Array | null = null;
  if (needTokens) {
    const span = trace?.child('tokenize', { 'kvrouter.prompt.kind': parsed.prompt.kind });
    try {
      // Token ids need no tokenizer, nor a turn through a promise.
      tokens =
        parsed.prompt.kind === 'tokens'
          ? parsed.prompt.tokens
          : await promptTokens(model.tokenizer, parsed.prompt, deps.cfg.server.max_prompt_tokens);
    } finally {
      span?.setAttribute('gen_ai.usage.input_tokens', tokens?.length ?? 0);
      span?.end();
    }
  }
  if (needTokens) deps.metrics.tokenized(model.name, (performance.now() - t0) / 1000, tokens?.length ?? 0);
  if (tokens && tokens.length > deps.cfg.server.max_prompt_tokens) {
    throw new OpenAIError(
      400,
      `the prompt has ${tokens.length} tokens, the limit is ${deps.cfg.server.max_prompt_tokens}`,
      'invalid_request_error',
      kind === 'chat' ? 'messages' : 'prompt',
    );
  }
  const sh = headers[deps.cfg.routing.session_header.toLowerCase()];
  const sessionKey = (Array.isArray(sh) ? sh[0] : sh) ?? parsed.user;
  const text = policySpec(routing.policy).needs.text ? requestText(parsed.prompt) : null;
  return {
    model,
    adapter,
    instances,
    tokens,
    text,
    routing,
    cacheSalt: parsed.cacheSalt,
    stream: parsed.stream,
    sessionKey,
    body: parsed.body,
  };
}

/** An incoming W3C trace context (to pass on unchanged when the router itself does not trace). */
function traceContextOf(h: IncomingHttpHeaders): { traceparent: string; tracestate?: string } | null {
  const tp = h.traceparent;
  if (
    typeof tp !== 'string' ||
    !/^[\da-f]{2}-[\da-f]{32}-[\da-f]{16}-[\da-f]{2}$/.test(tp) ||
    !passesOn(h, 'traceparent')
  )
    return null;
  const ts = h.tracestate;
  return typeof ts === 'string' && ts.length <= 512 && passesOn(h, 'tracestate')
    ? { traceparent: tp, tracestate: ts }
    : { traceparent: tp };
}

/** A model name or alias, else a LoRA adapter some instance serves (routed to those instances only); else 404. */
function resolveModel(
  name: string,
  deps: Pick<CompletionDeps, 'models' | 'adapters'>,
): { model: ModelRuntime; adapter: string | null; instances: readonly InstanceRuntime[] } {
  const model = deps.models.get(name);
  if (model) return { model, adapter: null, instances: model.instances };
  const a = deps.adapters.resolve(name);
  const base = a ? deps.models.get(a.model) : undefined;
  if (!a || !base) throw modelNotFound(name);
  const instances = base.instances.filter((i) => a.instances.has(i.id));
  if (instances.length === 0) throw modelNotFound(name);
  return { model: base, adapter: name, instances };
}

/**
 * Refuse a prompt that is certainly over the limits before paying to render or tokenize it (and one
 * whose structured inputs nest too deeply to render).
 */
function refuseOversized(p: PromptSpec, limits: RouterConfig['server'], kind: CompletionKind): void {
  if (p.kind === 'tokens') return; // counted exactly after parsing
  const param = kind === 'chat' ? 'messages' : 'prompt';
  let size: SizeFloor;
  try {
    size =
      p.kind === 'text'
        ? textSizeFloor(p.text, limits.max_prompt_tokens)
        : chatSizeFloor(p.chat, limits.max_prompt_tokens);
  } catch (err) {
    if (err instanceof ChatTemplateError) throw new OpenAIError(400, err.message, 'invalid_request_error', param);
    throw err;
  }
  if (size.chars > limits.max_prompt_chars) {
    throw new OpenAIError(
      400,
      `the prompt has ${size.chars} characters, the limit is ${limits.max_prompt_chars} (server.max_prompt_chars)`,
      'invalid_request_error',
      param,
      'prompt_too_long',
    );
  }
  if (size.words > limits.max_prompt_tokens) {
    throw new OpenAIError(
      400,
      `the prompt has at least ${size.words} tokens, the limit is ${limits.max_prompt_tokens}`,
      'invalid_request_error',
      param,
      'prompt_too_long',
    );
  }
}

/**
 * The body the engine gets: the client's bytes untouched, unless an alias (or an injected tenant
 * salt) rewrote it. An adapter keeps its own name: the engine selects the adapter by it.
 */
export function engineBody(p: PreparedRoute, raw: unknown, bytes: Buffer): Buffer {
  const target = p.adapter ?? p.model.name;
  return p.body === raw && p.body.model === target ? bytes : reserialize({ ...p.body, model: target });
}

export async function handleCompletion(
  kind: CompletionKind,
  req: IncomingMessage,
  res: ServerResponse,
  deps: CompletionDeps,
  principal: Principal,
): Promise<void> {
  const receivedAt = deps.now();
  const admitted = await deps.access.admit(principal);
  if ('status' in admitted) {
    deps.metrics.denied('api', admitted.status);
    sendError(
      res,
      req.url ?? '/v1/',
      new OpenAIError(admitted.status, admitted.message, 'rate_limit_error', null, admitted.code),
      admitted.retryAfterSec ? { 'retry-after': String(admitted.retryAfterSec) } : {},
    );
    req.resume();
    return;
  }
  try {
    await handleAdmitted(kind, req, res, deps, principal, receivedAt);
  } finally {
    admitted.release();
  }
}

async function handleAdmitted(
  kind: CompletionKind,
  req: IncomingMessage,
  res: ServerResponse,
  deps: CompletionDeps,
  principal: Principal,
  receivedAt: number,
): Promise<void> {
  const rid = req.headers['x-request-id'];
  const requestId = typeof rid === 'string' && /^[\w.:-]{1,128}$/.test(rid) ? rid : randomUUID();
  let modelName = 'unknown';
  const path = COMPLETION_PATH[kind];
  const trace =
    deps.tracing?.request(req.headers, `POST ${path}`, {
      'http.request.method': 'POST',
      'url.path': path,
      'kvrouter.request_id': requestId,
    }) ?? null;
  try {
    const bodyBuf = await readRequestBody(req, deps.cfg.server.max_body_bytes);
    const raw = parseOpenAIBody(bodyBuf, kind === 'completion');
    const p = await prepareRoute(kind, raw, req.headers, deps, principal, false, trace);
    modelName = p.model.name;
    trace?.root.setAttribute('gen_ai.request.model', modelName);
    const target = p.adapter ?? p.model.name;
    const body = engineBody(p, raw, bodyBuf);
    const { ns, route } = routeFields(p, deps.cfg, deps);
    const job: ForwardJob = {
      path: COMPLETION_PATH[kind],
      body,
      stream: p.stream,
      requestId,
      ns,
      route,
      instances: p.instances,
      receivedAt,
      trace,
      traceContext: trace ? null : traceContextOf(req.headers),
    };
    const ttl = speculativeTtl(p, route);
    if (p.model.disaggregated) {
      const legs = splitLegs(p.instances, p.model.roles);
      job.instances = legs.decodeSide;
      job.route = decodeLegRoute(route);
      job.plan = disaggPlanner(
        {
          cfg: p.model.cfg.disaggregation ?? DEFAULT_DISAGG,
          mode: p.routing.disagg,
          path: job.path,
          requestId,
          body: { ...p.body, model: target },
          ns,
          route,
          prefill: legs.prefill,
          bootstrapPort: (id) => p.model.cfg.instances.find((i) => i.id === id)?.bootstrap_port ?? 8998,
          speculativeTtlMs: ttl,
          maxRetries: deps.cfg.proxy.max_retries,
          trace,
        },
        { scheduler: deps.scheduler, now: deps.now, observer: deps.metrics },
      );
    }
    // With a trace, the status the proxy reports (499 for an abort, 502 for a cut stream) goes on the root span.
    let fdeps = deps;
    if (trace) {
      fdeps = { ...deps };
      fdeps.observer = combineObservers(...(deps.observer ? [deps.observer] : []), {
        finished: (_i, status) => void (trace.status = status),
      });
    }
    await forward(
      res,
      job,
      {
        maxRetries: deps.cfg.proxy.max_retries,
        queueTimeoutMs: deps.cfg.routing.busy.queue_timeout_ms,
        speculativeTtlMs: ttl,
      },
      fdeps,
    );
  } catch (err) {
    const e = err instanceof OpenAIError ? err : new OpenAIError(500, 'internal error', 'server_error');
    if (!(err instanceof OpenAIError)) process.stderr.write(`kvrouter: ${(err as Error).stack ?? String(err)}\n`);
    deps.metrics.rejected(modelName, e.status);
    if (e.status !== 499) sendError(res, COMPLETION_PATH[kind], e);
  } finally {
    if (trace) RequestTrace.finish(trace.root, trace.status ?? (res.writableFinished ? res.statusCode : 499));
  }
}
