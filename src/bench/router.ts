// `kvrouter bench router`: added latency and max RPS of kvrouter against going direct to the
// upstreams (the overhead benchmark without nginx).
import { runOverhead } from './overhead/run.js';

export function run(argv: string[]): Promise<number> {
  return runOverhead(
    'router',
    'kvrouter against direct requests to stub upstreams: added latency p50/p99 and max RPS.',
    ['direct', 'kv', 'round-robin'],
    argv,
  );
}
