// `kvrouter bench overhead`: the same small requests direct to the upstreams, through nginx (round
// robin) and through kvrouter (kv and round-robin): added latency and max RPS, as ratios to nginx.
import { runOverhead } from './overhead/run.js';

export function run(argv: string[]): Promise<number> {
  return runOverhead(
    'overhead',
    'Router overhead against nginx on loopback, over stub upstreams (see docs/benchmarks.md).',
    ['direct', 'nginx', 'kv', 'round-robin'],
    argv,
  );
}
