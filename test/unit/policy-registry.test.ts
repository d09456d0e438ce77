// The policy registry: every policy declared once, consistent, and read by the config schema.
import { describe, expect, it } from 'vitest';
import { ROUTER_SCHEMA } from '../../src/config/schema.js';
import {
  isPolicy,
  POLICIES,
  POLICY_NAMES,
  policySpec,
  predictionTtlMs,
  predictsHits,
  servingPolicy,
  TARGET_POLICY,
} from '../../src/scheduler/policies/registry.js';

describe('policy registry', () => {
  it('lists each policy once, and the config schema accepts exactly those names', () => {
    expect(new Set(POLICY_NAMES).size).toBe(POLICIES.length);
    expect(POLICY_NAMES).toEqual([
      'kv',
      'approx',
      'round-robin',
      'random',
      'least-loaded',
      'power-of-two',
      'session',
      'direct',
      'dynamo',
      'sglang',
      'gie',
      'llm-d',
      'llm-d-sticky',
      'aibrix',
      'vllm-router',
    ]);
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
    expect(POLICY_NAMES.filter(predictsHits)).toEqual(['kv', 'approx', 'dynamo', 'llm-d', 'vllm-router']);
    const t = policySpec(TARGET_POLICY);
    expect(t.needs.target).toBe(true);
    expect(t.adminOnly).toBe(true);
    expect(t.busyFilter).toBe(false);
    expect(POLICIES.filter((p) => p.adminOnly).map((p) => p.name)).toEqual([TARGET_POLICY]);
  });

  it("names the TTL key of its predicted blocks, or a peer's own lifetime", () => {
    expect(policySpec('approx').predictionTtlKey).toBe('approx_ttl_ms');
    expect(policySpec('kv').predictionTtlKey).toBe('speculative_ttl_ms');
    const routing = { speculative_ttl_ms: 5000, approx_ttl_ms: 60_000 };
    expect(predictionTtlMs('kv', routing)).toBe(5000);
    expect(predictionTtlMs('approx', routing)).toBe(60_000);
    // Dynamo without predict-on-route inserts nothing; llm-d and vllm-router keep their 2 s.
    expect(predictionTtlMs('dynamo', routing)).toBe(0);
    expect(predictionTtlMs('llm-d', routing)).toBe(2000);
    expect(predictionTtlMs('vllm-router', routing)).toBe(2000);
    expect(predictionTtlMs('sglang', routing)).toBe(0);
  });

  it('every peer names its source, version and defaults; only peers that score engine gauges need them', () => {
    const peers = POLICIES.filter((p) => 'peer' in p && p.peer !== undefined);
    expect(peers.map((p) => p.name)).toEqual([
      'dynamo',
      'sglang',
      'gie',
      'llm-d',
      'llm-d-sticky',
      'aibrix',
      'vllm-router',
    ]);
    for (const p of peers) {
      const src = (p as { peer: { source: string; version: string; defaults: string } }).peer;
      expect(src.source.length).toBeGreaterThan(10);
      expect(src.version).toMatch(/[0-9a-f]{7}|v\d/);
      expect(src.defaults.length).toBeGreaterThan(10);
    }
    expect(POLICIES.filter((p) => p.needs.engineMetrics).map((p) => p.name)).toEqual(['gie', 'llm-d']);
    expect(POLICIES.filter((p) => p.needs.text).map((p) => p.name)).toEqual(['sglang', 'gie', 'aibrix']);
  });
});
