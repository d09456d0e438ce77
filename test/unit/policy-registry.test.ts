// The policy registry: every policy declared once, consistent, and read by the config schema.
import { describe, expect, it } from 'vitest';
import { ROUTER_SCHEMA } from '../../src/config/schema.js';
import { isPolicy, POLICIES, POLICY_NAMES, policySpec, predictsHits, servingPolicy, TARGET_POLICY } from '../../src/scheduler/policies/registry.js';

describe('policy registry', () => {
  it('lists each policy once, and the config schema accepts exactly those names', () => {
    expect(new Set(POLICY_NAMES).size).toBe(POLICIES.length);
    expect(POLICY_NAMES).toEqual(['kv', 'approx', 'round-robin', 'random', 'least-loaded', 'power-of-two', 'session', 'direct']);
    expect(ROUTER_SCHEMA.fields.routing.fields.policy.enum).toEqual(POLICY_NAMES);
    for (const name of POLICY_NAMES) expect(ROUTER_SCHEMA.fields.routing.fields.policy.doc).toContain(`${name} (`);
    expect(isPolicy('kv')).toBe(true);
    expect(isPolicy('nope')).toBe(false);
  });

  it('every fallback names a registered policy that needs no tokens', () => {
    for (const p of POLICIES) {
      if (p.fallback === null) continue;
      expect(isPolicy(p.fallback)).toBe(true);
      expect(policySpec(p.fallback as never).needs.tokens).toBe(false);
    }
  });

  it('serves a policy that needs tokens by its fallback when the request has none', () => {
    expect(servingPolicy('kv', { tokens: false })).toBe('least-loaded');
    expect(servingPolicy('approx', { tokens: false })).toBe('least-loaded');
    expect(servingPolicy('kv', { tokens: true })).toBe('kv');
    expect(servingPolicy('session', { tokens: false })).toBe('session');
  });

  it('says which decisions predict cache hits, and which policy takes a target', () => {
    expect(POLICY_NAMES.filter(predictsHits)).toEqual(['kv', 'approx']);
    const t = policySpec(TARGET_POLICY);
    expect(t.needs.target).toBe(true);
    expect(t.adminOnly).toBe(true);
    expect(t.busyFilter).toBe(false);
    expect(POLICIES.filter((p) => p.adminOnly).map((p) => p.name)).toEqual([TARGET_POLICY]);
  });

  it('names the TTL key of its predicted blocks', () => {
    expect(policySpec('approx').predictionTtlKey).toBe('approx_ttl_ms');
    expect(policySpec('kv').predictionTtlKey).toBe('speculative_ttl_ms');
  });
});
