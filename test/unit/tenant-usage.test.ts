// Tenant limits over several replicas: each enforces the whole router's concurrency cap and rate
// limit from its own use plus the use its peers report (src/auth/tenant-usage.ts).
import { describe, expect, it } from 'vitest';
import { Access, type Principal, type TenantSpec } from '../../src/auth/access.js';
import { TokenBucket } from '../../src/auth/rate-limit.js';
import { TenantUsage } from '../../src/auth/tenant-usage.js';

const tenant = (over: Partial<TenantSpec>): TenantSpec => ({ id: 'acme', api_keys_sha256: ['0'.repeat(64)], allowed_models: ['*'], rate_limit: { requests_per_second: 0, burst: 0 }, max_concurrency: 0, ...over });
const as = (t: TenantSpec): Principal => ({ kind: 'tenant', tenant: t });
const admitted = (r: ReturnType<Access['admit']>): boolean => 'release' in r;

describe('TokenBucket.charge', () => {
  it('takes requests admitted elsewhere, down to one burst of debt', () => {
    const b = new TokenBucket(1, 2, 0);
    b.charge(5, 0);
    expect(b.take(0)).toBe(3000); // -2 tokens: 3 s until one is whole
    expect(b.take(3000)).toBe(0);
  });
});

describe('Access over shared TenantUsage', () => {
  it("counts the peers' in-flight requests against the concurrency cap", () => {
    const t = tenant({ max_concurrency: 2 });
    const access = new Access({ tenants: [t] }, () => 0);
    const first = access.admit(as(t));
    expect(admitted(first)).toBe(true);
    access.usage.applyPeer('w1', [['acme', 1, 1]], true, 0);
    const over = access.admit(as(t));
    expect(over).toMatchObject({ status: 429, code: 'concurrency_limit_exceeded' });
    expect((over as { message: string }).message).toContain('2 requests in flight');
    access.usage.applyPeer('w1', [['acme', 0, 1]], false, 0);
    expect(admitted(access.admit(as(t)))).toBe(true);
    expect(access.usage.report(false)).toEqual([['acme', 2, 2]]);
    expect(access.usage.report(false)).toEqual([]); // nothing changed since
    if ('release' in first) {
      first.release();
      first.release(); // idempotent
    }
    expect(access.usage.report(false)).toEqual([['acme', 1, 2]]);
    expect(access.usage.report(true)).toEqual([['acme', 1, 2]]);
  });

  it("charges the peers' admissions to the rate limit (a peer's first report is only its baseline)", () => {
    const t = tenant({ rate_limit: { requests_per_second: 1, burst: 3 } });
    const access = new Access({ tenants: [t] }, () => 0);
    access.usage.applyPeer('w1', [['acme', 0, 100]], true, 0); // baseline: not charged
    access.usage.applyPeer('w1', [['acme', 0, 102]], false, 0); // two new admissions there
    expect(admitted(access.admit(as(t)))).toBe(true);
    expect(access.admit(as(t))).toMatchObject({ status: 429, code: 'rate_limit_exceeded' });
    // A tenant first named in a known peer's later report was admitted there since.
    const b = tenant({ id: 'beta', rate_limit: { requests_per_second: 1, burst: 1 } });
    const two = new Access({ tenants: [b] }, () => 0);
    two.usage.applyPeer('w1', [], true, 0);
    two.usage.applyPeer('w1', [['beta', 0, 1]], false, 0);
    expect(two.admit(as(b))).toMatchObject({ status: 429 });
  });

  it('keeps counts and unchanged buckets across a reload; a changed limit starts a new bucket', () => {
    const t = tenant({ max_concurrency: 1, rate_limit: { requests_per_second: 1, burst: 1 } });
    const usage = new TenantUsage();
    const before = new Access({ tenants: [t] }, () => 0, usage);
    const held = before.admit(as(t));
    expect(admitted(held)).toBe(true);
    const after = new Access({ tenants: [t] }, () => 0, usage);
    expect(after.admit(as(t))).toMatchObject({ status: 429, code: 'rate_limit_exceeded' });
    const raised = tenant({ max_concurrency: 1, rate_limit: { requests_per_second: 1, burst: 5 } });
    const next = new Access({ tenants: [raised] }, () => 0, usage);
    expect(next.admit(as(raised))).toMatchObject({ status: 429, code: 'concurrency_limit_exceeded' });
    if ('release' in held) held.release();
    expect(admitted(next.admit(as(raised)))).toBe(true);
  });

  it('reports a change once per admission and release, and nothing for unlimited tenants', () => {
    const limited = tenant({ max_concurrency: 5 });
    const free = tenant({ id: 'free' });
    const access = new Access({ tenants: [limited, free] }, () => 0);
    let changes = 0;
    access.usage.onChange(() => changes++);
    const r = access.admit(as(limited));
    access.admit(as(free));
    if ('release' in r) r.release();
    expect(changes).toBe(2);
    expect(access.usage.report(true)).toEqual([['acme', 0, 1]]);
  });

  it('takes a partial report for the tenants it names, a full one for all', () => {
    const usage = new TenantUsage();
    usage.applyPeer('w1', [['a', 2, 2], ['b', 1, 1]], true, 0);
    usage.applyPeer('w1', [['a', 1, 2]], false, 0);
    expect([usage.inflightOf('a'), usage.inflightOf('b')]).toEqual([1, 1]);
    usage.applyPeer('w1', [['a', 1, 2]], true, 0); // b is no longer in flight there
    expect([usage.inflightOf('a'), usage.inflightOf('b')]).toEqual([1, 0]);
  });
});
