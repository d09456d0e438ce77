// Who a caller is and what it may name (src/auth/access.ts): the rules the HTTP API and the
// gateway endpoint picker share.
import { describe, expect, it } from 'vitest';
import { Access, sha256Hex, type TenantSpec } from '../../src/auth/access.js';

const tenant = (id: string, key: string, over: Partial<TenantSpec> = {}): TenantSpec => ({
  id,
  api_keys_sha256: [sha256Hex(key)],
  allowed_models: ['*'],
  rate_limit: { requests_per_second: 0, burst: 0 },
  max_concurrency: 0,
  ...over,
});
const ADMIN = 'admin-token-0123456789';
const salted = tenant('b', 'sk-b', { cache_salt: 'salt-of-b' });
const plain = tenant('a', 'sk-a');
const on = new Access({ admin_token: ADMIN, tenants: [plain, salted] });
const off = new Access({ tenants: [] });
const bearer = (k: string) => ({ authorization: `Bearer ${k}` });

describe('Access.authenticate', () => {
  it('a wrong key is a 401 whatever the keyless policy; a missing one only when keyless requests are refused', () => {
    const denied = { status: 401, code: 'invalid_api_key' };
    for (const keyless of ['refuse', 'trusted'] as const) {
      expect(on.authenticate(bearer('sk-wrong'), keyless)).toMatchObject(denied);
      expect(on.authenticate({ 'x-api-key': 'sk-wrong' }, keyless)).toMatchObject(denied);
      expect(on.authenticate(bearer('sk-a'), keyless)).toEqual({ kind: 'tenant', tenant: plain });
      expect(on.authenticate(bearer(ADMIN), keyless)).toEqual({ kind: 'admin' });
    }
    expect(on.authenticate({})).toMatchObject(denied);
    expect(on.authenticate({ authorization: 'Bearer ' })).toMatchObject(denied);
    expect(on.authenticate({}, 'trusted')).toEqual({ kind: 'anonymous' });
    // Another scheme carries no kvrouter key (a gateway's Basic credentials, say).
    expect(on.authenticate({ authorization: 'Basic Zm9vOmJhcg==' }, 'trusted')).toEqual({ kind: 'anonymous' });
    // Auth off: everyone is anonymous, whatever they send.
    expect(off.authenticate(bearer('sk-wrong'))).toEqual({ kind: 'anonymous' });
  });
});

describe('Access.mayTarget and saltFor', () => {
  it("x-kvrouter-target is the admin's while auth is on, anyone's when it is off", () => {
    expect(on.mayTarget({ kind: 'admin' })).toBe(true);
    expect(on.mayTarget({ kind: 'tenant', tenant: plain })).toBe(false);
    expect(on.mayTarget({ kind: 'anonymous' })).toBe(false);
    expect(off.mayTarget({ kind: 'anonymous' })).toBe(true);
  });

  it("no one but the admin and the tenant itself runs under a tenant's salt", () => {
    const refused = { status: 403, code: 'cache_salt_not_allowed' };
    expect(on.saltFor({ kind: 'anonymous' }, 'salt-of-b')).toMatchObject(refused);
    expect(on.saltFor({ kind: 'tenant', tenant: plain }, 'salt-of-b')).toMatchObject(refused);
    expect(on.saltFor({ kind: 'tenant', tenant: salted }, 'salt-of-b')).toEqual({ salt: 'salt-of-b' });
    expect(on.saltFor({ kind: 'tenant', tenant: salted }, null)).toEqual({ salt: 'salt-of-b' });
    expect(on.saltFor({ kind: 'tenant', tenant: salted }, 'mine')).toMatchObject(refused);
    expect(on.saltFor({ kind: 'admin' }, 'salt-of-b')).toEqual({ salt: 'salt-of-b' });
    expect(on.saltFor({ kind: 'anonymous' }, 'mine')).toEqual({ salt: 'mine' });
    expect(on.saltFor({ kind: 'anonymous' }, null)).toEqual({ salt: null });
  });
});
