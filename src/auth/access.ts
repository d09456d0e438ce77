// Who is calling: the admin (constant-time token check), a tenant (API key looked up by its
// SHA-256; plaintext keys are never stored or logged), or anonymous: when auth is off, or a request
// without a key that something in front (the gateway, `epp.keyless: trusted`) authenticated.
// Tenants get allowed models (wildcards), a token-bucket rate limit and a concurrency cap.
import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import { TenantUsage } from './tenant-usage.js';

/** A tenant as configured under `auth.tenants` (the schema in src/config validates it). */
export interface TenantSpec {
  id: string;
  api_keys_sha256: string[];
  allowed_models: string[];
  rate_limit: { requests_per_second: number; burst: number };
  max_concurrency: number;
  cache_salt?: string;
}

export interface AccessSpec {
  admin_token?: string;
  tenants: TenantSpec[];
}

export type Principal = { kind: 'admin' } | { kind: 'anonymous' } | { kind: 'tenant'; tenant: TenantSpec };

export type Denial = { status: 401 | 403 | 429 | 503; code: string; message: string; retryAfterSec?: number };

/** An admitted request's hold on its tenant's limits: `release` exactly once when it ends. */
export interface Admission {
  release(): void;
}

/**
 * What a request carrying no key at all is while auth is on: refused (401), or anonymous because
 * whoever sent it authenticated the client (the endpoint picker's `epp.keyless`).
 */
export const KEYLESS_POLICIES = ['refuse', 'trusted'] as const;
export type KeylessPolicy = (typeof KEYLESS_POLICIES)[number];

export const sha256Hex = (s: string): string => createHash('sha256').update(s).digest('hex');

function globToRegExp(glob: string): RegExp {
  return new RegExp(
    `^${glob
      .replace(/[.+^${}()|[\]\\]/g, '\\$&')
      .replace(/\*/g, '.*')
      .replace(/\?/g, '.')}$`,
  );
}

const overConcurrency = (t: TenantSpec, n: number): Denial => ({
  status: 429,
  code: 'concurrency_limit_exceeded',
  message: `tenant ${t.id} has ${n} requests in flight (limit ${t.max_concurrency})`,
  retryAfterSec: 1,
});

/** An admission whose release runs once, however often it is called. */
function once(release: () => void): Admission {
  let released = false;
  return {
    release: () => {
      if (released) return;
      released = true;
      release();
    },
  };
}

const NO_SLOT: Admission = { release: (): void => {} };

export class Access {
  private readonly byKey = new Map<string, TenantSpec>();
  private readonly models = new Map<string, RegExp[]>();
  /** Every tenant's configured cache salt. */
  private readonly salts = new Set<string>();
  private readonly adminDigest: Buffer | null;

  constructor(
    readonly spec: AccessSpec,
    private readonly now: () => number = Date.now,
    /** Limits' use, shared with the other replicas and kept across reloads (pass the previous Access's). */
    readonly usage: TenantUsage = new TenantUsage(),
  ) {
    this.adminDigest = spec.admin_token ? createHash('sha256').update(spec.admin_token).digest() : null;
    for (const t of spec.tenants) {
      for (const k of t.api_keys_sha256) this.byKey.set(k.toLowerCase(), t);
      this.models.set(t.id, t.allowed_models.map(globToRegExp));
      if (t.cache_salt) this.salts.add(t.cache_salt);
    }
    const limited = spec.tenants.filter((t) => t.rate_limit.requests_per_second > 0);
    usage.configure(
      limited.map((t) => ({
        tenant: t.id,
        ratePerSec: t.rate_limit.requests_per_second,
        burst: Math.max(1, t.rate_limit.burst),
      })),
      now(),
    );
  }

  /** Auth is on when there is an admin token or at least one tenant. */
  get enabled(): boolean {
    return this.adminDigest !== null || this.spec.tenants.length > 0;
  }

  private bearer(h: IncomingHttpHeaders): string | null {
    const a = h.authorization;
    if (typeof a === 'string' && /^Bearer\s+/i.test(a)) return a.replace(/^Bearer\s+/i, '').trim();
    const k = h['x-api-key'];
    return typeof k === 'string' ? k.trim() : null;
  }

  private isAdminToken(token: string): boolean {
    if (!this.adminDigest) return false;
    const d = createHash('sha256').update(token).digest();
    return timingSafeEqual(d, this.adminDigest); // equal-length digests: constant time
  }

  /** Identify the caller; null when credentials are missing or wrong (while auth is on). */
  identify(h: IncomingHttpHeaders): Principal | null {
    if (!this.enabled) return { kind: 'anonymous' };
    const token = this.bearer(h);
    if (!token) return null;
    if (this.isAdminToken(token)) return { kind: 'admin' };
    const t = this.byKey.get(sha256Hex(token));
    return t ? { kind: 'tenant', tenant: t } : null;
  }

  /**
   * An API caller, or the 401 for it. A wrong key is always refused; a missing one too, unless
   * `keyless` is 'trusted': then the caller is anonymous.
   */
  authenticate(h: IncomingHttpHeaders, keyless: KeylessPolicy = 'refuse'): Principal | Denial {
    const p = this.identify(h);
    if (p !== null) return p;
    if (keyless === 'trusted' && !this.bearer(h)) return { kind: 'anonymous' };
    return {
      status: 401,
      code: 'invalid_api_key',
      message: 'missing or invalid API key (Authorization: Bearer <key>)',
    };
  }

  /** Admin-only routes: open only when auth is off entirely. */
  requireAdmin(h: IncomingHttpHeaders): Denial | null {
    const p = this.identify(h);
    if (p === null) return { status: 401, code: 'invalid_api_key', message: 'missing or invalid credentials' };
    if (p.kind === 'tenant') return { status: 403, code: 'forbidden', message: 'this route needs the admin token' };
    return null;
  }

  /** The direct policy (x-kvrouter-target) places a request by hand: the admin's, or anyone's when auth is off. */
  mayTarget(p: Principal): boolean {
    return p.kind === 'admin' || !this.enabled;
  }

  /**
   * May `p` use `model` (a model name, an alias, or a LoRA adapter's name)? The one check of every
   * route: completions, /query, /v1/models. Admin and anonymous may use everything.
   */
  modelAllowed(p: Principal, model: string): boolean {
    if (p.kind !== 'tenant') return true;
    return (this.models.get(p.tenant.id) ?? []).some((r) => r.test(model));
  }

  /**
   * Admit a tenant request (rate limit, then concurrency). On success returns the admission, to
   * release exactly once when the request ends. A tenant with a concurrency cap waits for the
   * owner's grant when there is one (`serve --workers`: one round trip to the primary); everyone
   * else is answered at once.
   */
  async admit(p: Principal): Promise<Admission | Denial> {
    if (p.kind !== 'tenant') return NO_SLOT;
    const t = p.tenant;
    const rate = t.rate_limit.requests_per_second;
    if (rate > 0) {
      const wait = this.usage.take(t.id, rate, Math.max(1, t.rate_limit.burst), this.now());
      if (wait > 0)
        return {
          status: 429,
          code: 'rate_limit_exceeded',
          message: `tenant ${t.id} is over its rate limit`,
          retryAfterSec: Math.ceil(wait / 1000),
        };
    }
    if (t.max_concurrency <= 0) {
      if (rate > 0) this.usage.admittedOnly(t.id);
      return NO_SLOT;
    }
    const usage = this.usage;
    const owner = usage.owner;
    if (owner) {
      // The owner's count is every process's in-flight count: exact, where the peers' reports lag
      // by a turn. Only a rate-limited tenant's admission is reported to them.
      const c = await owner.claim(t.id, t.max_concurrency);
      if (c === null)
        return {
          status: 503,
          code: 'concurrency_unavailable',
          message: `tenant ${t.id}'s concurrency cap could not be checked (the process that counts it did not answer); retry`,
          retryAfterSec: 1,
        };
      if ('held' in c) return overConcurrency(t, c.held);
      if (rate > 0) usage.admittedOnly(t.id);
      return once(() => owner.free(c.grant));
    }
    // Every replica's requests count (the others report theirs through replica sync).
    const n = usage.inflightOf(t.id);
    if (n >= t.max_concurrency) return overConcurrency(t, n);
    usage.acquire(t.id);
    return once(() => usage.release(t.id));
  }

  /**
   * The cache salt a request of `p` runs under. A tenant's configured salt always wins over the
   * body's; anyone else but the admin may name a salt of their own, never a tenant's (that would
   * read and reuse that tenant's KV blocks).
   */
  saltFor(p: Principal, requested: string | null): { salt: string | null } | Denial {
    if (p.kind === 'admin') return { salt: requested };
    const own = p.kind === 'tenant' ? (p.tenant.cache_salt ?? null) : null;
    if (own !== null) {
      if (requested !== null && requested !== own)
        return {
          status: 403,
          code: 'cache_salt_not_allowed',
          message: 'this API key runs under its configured cache_salt; another one may not be named',
        };
      return { salt: own };
    }
    if (requested !== null && this.salts.has(requested))
      return { status: 403, code: 'cache_salt_not_allowed', message: 'that cache_salt belongs to another tenant' };
    return { salt: requested };
  }
}
