// Tenant limits over several replicas: each enforces the whole router's concurrency cap and rate
// limit from its own use plus the use its peers report (src/auth/tenant-usage.ts), or, where one
// owner sees every process, from the owner's one count (src/auth/tenant-slots.ts).
import { describe, expect, it } from 'vitest';
import { Access, type Admission, type Denial, type Principal, type TenantSpec } from '../../src/auth/access.js';
import { TokenBucket } from '../../src/auth/rate-limit.js';
import { TenantUsage } from '../../src/auth/tenant-usage.js';
import { type SlotOwner, TenantSlots } from '../../src/auth/tenant-slots.js';

const tenant = (over: Partial<TenantSpec>): TenantSpec => ({
  id: 'acme',
  api_keys_sha256: ['0'.repeat(64)],
  allowed_models: ['*'],
  rate_limit: { requests_per_second: 0, burst: 0 },
  max_concurrency: 0,
  ...over,
});
const as = (t: TenantSpec): Principal => ({ kind: 'tenant', tenant: t });
const admitted = (r: Admission | Denial): boolean => 'release' in r;

describe('TokenBucket.charge', () => {
  it('takes requests admitted elsewhere, down to one burst of debt', () => {
    const b = new TokenBucket(1, 2, 0);
    b.charge(5, 0);
    expect(b.take(0)).toBe(3000); // -2 tokens: 3 s until one is whole
    expect(b.take(3000)).toBe(0);
  });
});

describe('Access over shared TenantUsage', () => {
  it("counts the peers' in-flight requests against the concurrency cap", async () => {
    const t = tenant({ max_concurrency: 2 });
    const access = new Access({ tenants: [t] }, () => 0);
    const first = await access.admit(as(t));
    expect(admitted(first)).toBe(true);
    access.usage.applyPeer('w1', [['acme', 1, 1]], true, 0);
    const over = await access.admit(as(t));
    expect(over).toMatchObject({ status: 429, code: 'concurrency_limit_exceeded' });
    expect((over as { message: string }).message).toContain('2 requests in flight');
    access.usage.applyPeer('w1', [['acme', 0, 1]], false, 0);
    expect(admitted(await access.admit(as(t)))).toBe(true);
    expect(access.usage.report(false)).toEqual([['acme', 2, 2]]);
    expect(access.usage.report(false)).toEqual([]); // nothing changed since
    if ('release' in first) {
      first.release();
      first.release(); // idempotent
    }
    expect(access.usage.report(false)).toEqual([['acme', 1, 2]]);
    expect(access.usage.report(true)).toEqual([['acme', 1, 2]]);
  });

  it("charges the peers' admissions to the rate limit (a peer's first report is only its baseline)", async () => {
    const t = tenant({ rate_limit: { requests_per_second: 1, burst: 3 } });
    const access = new Access({ tenants: [t] }, () => 0);
    access.usage.applyPeer('w1', [['acme', 0, 100]], true, 0); // baseline: not charged
    access.usage.applyPeer('w1', [['acme', 0, 102]], false, 0); // two new admissions there
    expect(admitted(await access.admit(as(t)))).toBe(true);
    expect(await access.admit(as(t))).toMatchObject({ status: 429, code: 'rate_limit_exceeded' });
    // A tenant first named in a known peer's later report was admitted there since.
    const b = tenant({ id: 'beta', rate_limit: { requests_per_second: 1, burst: 1 } });
    const two = new Access({ tenants: [b] }, () => 0);
    two.usage.applyPeer('w1', [], true, 0);
    two.usage.applyPeer('w1', [['beta', 0, 1]], false, 0);
    expect(await two.admit(as(b))).toMatchObject({ status: 429 });
  });

  it('keeps counts and unchanged buckets across a reload; a changed limit starts a new bucket', async () => {
    const t = tenant({ max_concurrency: 1, rate_limit: { requests_per_second: 1, burst: 1 } });
    const usage = new TenantUsage();
    const before = new Access({ tenants: [t] }, () => 0, usage);
    const held = await before.admit(as(t));
    expect(admitted(held)).toBe(true);
    const after = new Access({ tenants: [t] }, () => 0, usage);
    expect(await after.admit(as(t))).toMatchObject({ status: 429, code: 'rate_limit_exceeded' });
    const raised = tenant({ max_concurrency: 1, rate_limit: { requests_per_second: 1, burst: 5 } });
    const next = new Access({ tenants: [raised] }, () => 0, usage);
    expect(await next.admit(as(raised))).toMatchObject({ status: 429, code: 'concurrency_limit_exceeded' });
    if ('release' in held) held.release();
    expect(admitted(await next.admit(as(raised)))).toBe(true);
  });

  it('reports a change once per admission and release, and nothing for unlimited tenants', async () => {
    const limited = tenant({ max_concurrency: 5 });
    const free = tenant({ id: 'free' });
    const access = new Access({ tenants: [limited, free] }, () => 0);
    let changes = 0;
    access.usage.onChange(() => changes++);
    const r = await access.admit(as(limited));
    await access.admit(as(free));
    if ('release' in r) r.release();
    expect(changes).toBe(2);
    expect(access.usage.report(true)).toEqual([['acme', 0, 1]]);
  });

  it('takes a partial report for the tenants it names, a full one for all', () => {
    const usage = new TenantUsage();
    usage.applyPeer(
      'w1',
      [
        ['a', 2, 2],
        ['b', 1, 1],
      ],
      true,
      0,
    );
    usage.applyPeer('w1', [['a', 1, 2]], false, 0);
    expect([usage.inflightOf('a'), usage.inflightOf('b')]).toEqual([1, 1]);
    usage.applyPeer('w1', [['a', 1, 2]], true, 0); // b is no longer in flight there
    expect([usage.inflightOf('a'), usage.inflightOf('b')]).toEqual([1, 0]);
  });
});

describe('TenantSlots: one count for several processes', () => {
  it('grants up to the limit over every holder, frees once, and drops a holder that goes away', () => {
    const slots = new TenantSlots();
    expect(slots.claim(1, 0, 'acme', 2)).toEqual({ granted: true });
    expect(slots.claim(2, 0, 'acme', 2)).toEqual({ granted: true });
    expect(slots.claim(2, 1, 'acme', 2)).toEqual({ granted: false, held: 2 });
    expect(slots.claim(2, 2, 'beta', 1)).toEqual({ granted: true });
    slots.free(1, 0);
    slots.free(1, 0); // a second free of one grant changes nothing
    expect(slots.heldOf('acme')).toBe(1);
    expect(slots.claim(1, 3, 'acme', 2)).toEqual({ granted: true });
    expect(slots.dropHolder(2)).toBe(2);
    expect([slots.heldOf('acme'), slots.heldOf('beta')]).toEqual([1, 0]);
    slots.free(2, 0); // its holder was dropped: nothing left to free
    expect(slots.heldOf('acme')).toBe(1);
  });

  it("admits against the owner's count alone, and gives the grant back at release", async () => {
    const ledger = new TenantSlots();
    /** Two processes' ends: each its own Access and usage, one owner's count. */
    const ownerFor = (holder: number): SlotOwner => {
      let next = 0;
      return {
        claim: async (tenant, limit) => {
          const grant = next++;
          const c = ledger.claim(holder, grant, tenant, limit);
          return c.granted ? { grant } : { held: c.held };
        },
        free: (grant) => ledger.free(holder, grant),
      };
    };
    const t = tenant({ max_concurrency: 2 });
    const [a, b] = [0, 1].map((holder) => {
      const access = new Access({ tenants: [t] }, () => 0);
      access.usage.owner = ownerFor(holder);
      return access;
    });
    // The same turn on both processes, no report between them: still two, not four.
    const all = await Promise.all([a.admit(as(t)), a.admit(as(t)), b.admit(as(t)), b.admit(as(t))]);
    expect(all.filter(admitted)).toHaveLength(2);
    expect(all.filter((r) => !admitted(r))[0]).toMatchObject({ status: 429, code: 'concurrency_limit_exceeded' });
    // A stale report of a peer is not read: the owner's count decides.
    b.usage.applyPeer('w0', [['acme', 5, 5]], true, 0);
    const first = all.find(admitted) as Admission;
    first.release();
    first.release();
    expect(ledger.heldOf('acme')).toBe(1);
    expect(admitted(await b.admit(as(t)))).toBe(true);
    // An owner that does not answer: refused, and nothing is held.
    const silent = new Access({ tenants: [t] }, () => 0);
    silent.usage.owner = { claim: async () => null, free: () => undefined };
    expect(await silent.admit(as(t))).toMatchObject({ status: 503, code: 'concurrency_unavailable' });
    expect(silent.usage.report(true)).toEqual([]);
  });
});
