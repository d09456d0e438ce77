// The Mooncake Conductor Indexer HTTP API (+ Dynamo aliases) over the built-in indexer:
// /register, /unregister, /query, /query_by_hash, /events, /workers, /dump.
// Mounted by `kvrouter indexer` (standalone) and by `kvrouter serve`.
import type { Context, Hono } from 'hono';
import { stringifyJson } from '../common/json.js';
import { PUBLISHER_TYPES, type PublisherType, type Registration, type Registry } from '../events/registry.js';
import { parseStandardEvent } from '../events/standard.js';
import { seqHashes } from '../hashing/index.js';
import type { OverlapResult } from '../indexer/block-index.js';
import type { Namespace } from '../indexer/namespace.js';
import { dumpIndex } from '../indexer/snapshot.js';
import type { TieredIndexer } from '../indexer/namespaces.js';
import { type IndexWriter, registerInIndex, unregisterFromIndex } from '../indexer/writer.js';
import { readJson } from './body.js';
import { conductorHits, dynamoShape, dynamoWorkers } from './conductor.js';
import { ApiError, badField } from './errors.js';
import { asObject, hashList, id, int, type JsonObject, pick, str, tokenIds } from './fields.js';
import { SharedRoutes } from './shared-routes.js';

/** What the API needs from the ZMQ side (ListenerPool implements it). */
export interface ListenerControl {
  add(reg: Registration): void;
  remove(key: string): Promise<void>;
}

export interface IndexerLimits {
  maxBodyBytes: number;
  maxTokens: number;
  maxHashes: number;
  maxEventsPerRequest: number;
}

export const DEFAULT_INDEXER_LIMITS: IndexerLimits = {
  maxBodyBytes: 8 * 1024 * 1024,
  maxTokens: 1 << 20,
  maxHashes: 1 << 16,
  maxEventsPerRequest: 10_000,
};

export interface IndexerApiDeps {
  /** The index is written only through it (reads go to writer.indexer). */
  writer: IndexWriter;
  registry: Registry;
  listeners?: ListenerControl;
  limits?: Partial<IndexerLimits>;
  now?: () => number;
  /** Which ZMQ endpoints /register may point listeners at (default: any). */
  allowEndpoint?: (endpoint: string) => boolean;
  /** Most registrations /register may create (default: unlimited); read per request. */
  maxRegistrations?: () => number;
  /**
   * Scopes a /query or /query_by_hash to what the caller may read (the router: a tenant reads only
   * the namespace its own requests use); throws an ApiError (403) for what it may not. Default: as asked.
   */
  scopeQuery?: (c: Context, asked: QueryScope) => QueryScope;
  /** Called after the index changed through the API (metrics, replication hooks). */
  onQuery?: (route: 'query' | 'query_by_hash', result: OverlapResult) => void;
  /** The serving role of an instance the router proxies to (GET /workers shows it); absent: no role field. */
  roleOf?: (instanceId: string) => string | null;
  /** Where the state-changing routes declare their sharing among `--workers` processes (the router's). */
  shared?: SharedRoutes;
}

const ENDPOINT_RE = /^(tcp:\/\/[^\s]+:\d+|ipc:\/\/[^\s]+|inproc:\/\/[^\s]+)$/;

export function json(c: Context, body: unknown, status = 200): Response {
  return c.body(stringifyJson(body), status as 200, { 'content-type': 'application/json' });
}

function publisherType(o: JsonObject): PublisherType {
  const raw = str(o, 'type', { required: true })!;
  const t = PUBLISHER_TYPES.find((p) => p.toLowerCase() === raw.toLowerCase());
  if (!t) throw badField('type', `must be one of ${PUBLISHER_TYPES.join(', ')}`);
  return t;
}

function endpoint(o: JsonObject, names: string[], required: boolean): string | null {
  const v = str(o, names, { required });
  if (v === undefined || v === '') {
    if (required) throw badField(names[0], 'is required');
    return null;
  }
  if (!ENDPOINT_RE.test(v)) throw badField(names[0], 'must be a ZMQ endpoint such as tcp://host:port');
  const port = /^tcp:\/\/.*:(\d+)$/.exec(v)?.[1];
  if (port !== undefined && (Number(port) < 1 || Number(port) > 65535))
    throw badField(names[0], `port ${port} is not a TCP port (1-65535)`);
  return v;
}

/** LoRA identity: `lora_name`, or the deprecated `lora_id` (never both). */
function loraOf(o: JsonObject): string | null {
  const name = str(o, 'lora_name');
  const lid = pick(o, 'lora_id');
  if (name && lid) throw badField('lora_id', 'must not be given together with lora_name');
  if (lid) {
    const v = lid[1];
    if (typeof v === 'number' && Number.isInteger(v)) return v === 0 ? null : String(v);
    if (typeof v === 'string') return v || null;
    throw badField('lora_id', 'must be an integer or string');
  }
  return name || null;
}

/** The namespace a query reads. */
export interface QueryScope {
  model: string;
  tenant: string;
  salt: string | null;
  /** The LoRA adapter (`lora_name`, or the deprecated `lora_id`); null: the base model. */
  lora: string | null;
}

/** What every indexer route reads: its dependencies, limits, clock and body reader. */
interface RouteContext {
  deps: IndexerApiDeps;
  limits: IndexerLimits;
  now: () => number;
  writer: IndexWriter;
  registry: Registry;
  indexer: TieredIndexer;
  body: (c: Context) => Promise<JsonObject>;
  shared: SharedRoutes;
}

/** POST /register, POST /unregister: publishers come and go (their listeners and index state with them). */
function mountRegistrationRoutes(app: Hono, x: RouteContext): void {
  const { deps, now, writer, registry, body, shared } = x;
  app.post(shared.replicated('/register'), async (c) => {
    const o = await body(c);
    const type = publisherType(o);
    const instanceId = id(o, 'instance_id', { required: true })!;
    const spec = {
      endpoint: endpoint(o, ['endpoint'], true)!,
      replayEndpoint: endpoint(o, ['replay_endpoint'], false),
      type,
      model: str(o, ['modelname', 'model_name', 'model'], { required: true })!,
      loraName: str(o, 'lora_name') || null,
      tenant: str(o, 'tenant_id') || 'default',
      instanceId,
      blockSize: int(o, 'block_size', { required: true, min: 1, max: 1 << 20 })!,
      dpRank: int(o, 'dp_rank', { min: 0, max: 65535, def: 0 })!,
      additionalSalt: str(o, ['additionalsalt', 'additional_salt']) || null,
      topic: str(o, 'topic') ?? '',
      backendId: id(o, 'backend_id') ?? instanceId,
      shared: type === 'Mooncake',
    };
    if (spec.model === '') throw badField('modelname', 'must not be empty');
    for (const [field, e] of [
      ['endpoint', spec.endpoint],
      ['replay_endpoint', spec.replayEndpoint],
    ] as const) {
      if (e && deps.allowEndpoint && !deps.allowEndpoint(e))
        throw new ApiError(403, 'endpoint_not_allowed', `${field} ${e} is not in the register allowlist`, field);
    }
    const existing = registry.get(`${spec.instanceId}|${spec.tenant}|${spec.dpRank}`);
    const cap = deps.maxRegistrations?.();
    if (!existing && cap !== undefined && registry.size >= cap) {
      throw new ApiError(
        409,
        'too_many_registrations',
        `the router already has ${registry.size} registrations (limit ${cap})`,
      );
    }
    const res = registry.register(spec, now());
    if (res.kind === 'conflict') throw new ApiError(409, 'registration_conflict', res.reason);
    if (res.kind === 'created') {
      // The listener pool indexes what it listens to; without one (HTTP /events only) we do.
      if (deps.listeners) deps.listeners.add(res.registration);
      else registerInIndex(writer, res.registration);
    }
    return json(c, { status: 'registered successfully', instance_id: instanceId });
  });

  // Conductor: (instance_id, tenant_id, dp_rank). Dynamo: a missing tenant_id or dp_rank means all
  // of them, and model_name narrows. Both are served: whatever is given narrows the match.
  app.post(shared.replicated('/unregister'), async (c) => {
    const o = await body(c);
    const instanceId = id(o, 'instance_id', { required: true })!;
    const tenant = str(o, 'tenant_id') || null;
    const dpRank = int(o, 'dp_rank', { min: 0, max: 65535 }) ?? null;
    const model = str(o, ['model_name', 'modelname', 'model']) || null;
    const regs = registry
      .all()
      .filter(
        (r) =>
          r.instanceId === instanceId &&
          (tenant === null || r.tenant === tenant) &&
          (dpRank === null || r.dpRank === dpRank) &&
          (model === null || r.model === model),
      );
    if (regs.length === 0)
      throw new ApiError(404, 'not_found', `service not found: ${instanceId}|${tenant ?? '*'}|${dpRank ?? '*'}`);
    for (const reg of regs) {
      registry.unregister(reg.instanceId, reg.tenant, reg.dpRank);
      if (deps.listeners) await deps.listeners.remove(reg.key);
      unregisterFromIndex(writer, reg, registry.ranks(reg.tenant, reg.instanceId).length === 0);
    }
    return json(c, { status: 'unregistered successfully', removed_instances: regs.map((r) => r.key) });
  });
}

/** POST /query, POST /query_by_hash: overlap per instance, tier and dp rank (Conductor shape, or Dynamo with ?format=dynamo). */
function mountQueryRoutes(app: Hono, x: RouteContext): void {
  const { deps, limits, now, registry, indexer, body } = x;
  const queryCommon = (c: Context, o: JsonObject) => {
    const asked: QueryScope = {
      model: str(o, ['model', 'model_name', 'modelname'], { required: true })!,
      tenant: str(o, 'tenant_id') || 'default',
      salt: str(o, ['cache_salt', 'additional_salt', 'additionalsalt']) || null,
      lora: loraOf(o),
    };
    const blockSize = int(o, 'block_size', { required: true, min: 1, max: 1 << 20 })!;
    const instance = id(o, 'instance_id') ?? null;
    const { model, tenant, salt, lora: loraName } = deps.scopeQuery ? deps.scopeQuery(c, asked) : asked;
    const nsId = { model, blockSize, loraName, salt, tenant };
    return { nsId, instance, ns: indexer.find(nsId) };
  };

  const respond = (
    c: Context,
    tenant: string,
    model: string,
    ns: Namespace | undefined,
    instance: string | null,
    result: OverlapResult,
    blockSize: number,
  ) => {
    const report = new Map<string, number[]>();
    const add = (inst: string) => {
      if (!report.has(inst)) report.set(inst, registry.ranks(tenant, inst));
    };
    if (instance !== null) add(instance);
    else {
      for (const inst of registry.instances(tenant, model)) add(inst);
      if (ns) for (const inst of ns.instances) add(inst);
      for (const cand of result.candidates) add(cand.instance);
    }
    const hasShared = ns ? ns.index.holderInfos().some((h) => h.instance === null) : false;
    const hits = conductorHits(result, blockSize, report, hasShared);
    if (c.req.query('format') === 'dynamo') return json(c, dynamoShape(hits));
    return json(c, { [tenant]: hits });
  };

  app.post('/query', async (c) => {
    const o = await body(c);
    const { nsId, instance, ns } = queryCommon(c, o);
    const tokens = tokenIds(o, 'token_ids', limits.maxTokens);
    const limit = instance !== null ? new Set([instance]) : undefined;
    const result: OverlapResult = ns
      ? ns.index.query(seqHashes(tokens, nsId.blockSize, ns.space), now(), limit)
      : { queriedBlocks: Math.floor(tokens.length / nsId.blockSize), candidates: [], sharedBlocks: 0 };
    deps.onQuery?.('query', result);
    return respond(c, nsId.tenant, nsId.model, ns, instance, result, nsId.blockSize);
  });

  app.post('/query_by_hash', async (c) => {
    const o = await body(c);
    const { nsId, instance, ns } = queryCommon(c, o);
    const hashes = BigUint64Array.from(hashList(o, ['seq_hashes', 'block_hash'], limits.maxHashes));
    const limit = instance !== null ? new Set([instance]) : undefined;
    const result: OverlapResult = ns
      ? ns.index.query(hashes, now(), limit)
      : { queriedBlocks: hashes.length, candidates: [], sharedBlocks: 0 };
    deps.onQuery?.('query_by_hash', result);
    return respond(c, nsId.tenant, nsId.model, ns, instance, result, nsId.blockSize);
  });
}

/** POST /events: standardized events, validated as a whole before any is applied. */
function mountEventRoutes(app: Hono, x: RouteContext): void {
  const { limits, writer, shared } = x;
  app.post(shared.replicated('/events'), async (c) => {
    const raw = await readJson(c, limits.maxBodyBytes);
    const list = Array.isArray(raw) ? raw : [raw];
    if (list.length > limits.maxEventsPerRequest) {
      throw new ApiError(413, 'too_many_events', `at most ${limits.maxEventsPerRequest} events per request`);
    }
    // Validate the whole batch before applying any of it: a bad request changes nothing.
    const events = list.map((e, i) => {
      const o = asObject(e, `event ${i}`);
      const r = parseStandardEvent(o, {}, limits.maxTokens);
      if (!r.ok) throw badField(Array.isArray(raw) ? `[${i}].${r.field}` : r.field, r.message);
      return r.event;
    });
    const results = events.map((ev) => writer.apply(ev));
    return json(c, {
      applied: results.filter((r) => r.status === 'ok' || r.status === 'gap' || r.status === 'purged').length,
      results,
    });
  });
}

/** GET /workers, GET /dump: registrations and the whole index (admin). */
function mountInspectRoutes(app: Hono, x: RouteContext): void {
  const { now, registry, indexer } = x;
  app.get('/workers', (c) => {
    const workers = registry.all().map((r) => ({
      key: r.key,
      instance_id: r.instanceId,
      tenant_id: r.tenant,
      dp_rank: r.dpRank,
      type: r.type,
      endpoint: r.endpoint,
      replay_endpoint: r.replayEndpoint,
      model_name: r.model,
      lora_name: r.loraName,
      block_size: r.blockSize,
      additional_salt: r.additionalSalt,
      backend_id: r.backendId,
      shared: r.shared,
      status: r.status,
      last_error: r.lastError,
      registered_at: r.registeredAt,
      ...(x.deps.roleOf ? { role: x.deps.roleOf(r.instanceId) } : {}),
    }));
    if (c.req.query('format') === 'dynamo') return json(c, dynamoWorkers(registry.all()));
    return json(c, { workers, index: indexer.stats() });
  });

  app.get('/dump', (c) => json(c, dumpIndex(indexer, now())));
}

export function mountIndexerRoutes(app: Hono, deps: IndexerApiDeps): void {
  // Descriptors, not a spread: a limit given as a getter (the router's, which a reload changes) stays one.
  const limits = Object.defineProperties(
    { ...DEFAULT_INDEXER_LIMITS },
    Object.getOwnPropertyDescriptors(deps.limits ?? {}),
  ) as IndexerLimits;
  const x: RouteContext = {
    deps,
    limits,
    now: deps.now ?? Date.now,
    writer: deps.writer,
    registry: deps.registry,
    indexer: deps.writer.indexer,
    shared: deps.shared ?? new SharedRoutes(),
    body: async (c) => asObject(await readJson(c, limits.maxBodyBytes)),
  };
  mountRegistrationRoutes(app, x);
  mountQueryRoutes(app, x);
  mountEventRoutes(app, x);
  mountInspectRoutes(app, x);
}

/** Uniform JSON 404/405/500 handling for a Hono app. */
