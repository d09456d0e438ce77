// `kvrouter bench <name>`: each benchmark is a module under src/bench/ exporting run(argv).
const BENCHES: Record<string, { summary: string; load: () => Promise<{ run: (argv: string[]) => Promise<number> }> }> =
  {
    indexer: {
      summary: 'index throughput, query latency, hashing speed, memory per block',
      load: () => import('../bench/indexer.js'),
    },
    events: {
      summary: 'KV events decoded and applied through a real ZMQ socket',
      load: () => import('../bench/events.js'),
    },
    tokenizer: {
      summary: 'chat template + tokenization throughput and segment cache',
      load: () => import('../bench/tokenizer.js'),
    },
    cluster: {
      summary: 'routing policies on a replayed workload: TTFT, throughput, hit rate vs oracle, imbalance',
      load: () => import('../bench/cluster.js'),
    },
    fleet: {
      summary:
        'N simulated engines x R router replicas in virtual time: TTFT, goodput, hit rate vs oracle, balance, decision time',
      load: () => import('../bench/fleet.js'),
    },
    leaderboard: {
      summary:
        "kvrouter's default against the peers' default routing algorithms: scenarios x load ladder x seeds on the fleet simulator",
      load: () => import('../bench/leaderboard.js'),
    },
    sweep: {
      summary: 'a workload over a grid of routing options and arrival rates; prints the best point',
      load: () => import('../bench/sweep.js'),
    },
    overhead: {
      summary: 'added latency and max RPS of kvrouter against nginx and direct (stub upstreams)',
      load: () => import('../bench/overhead.js'),
    },
    router: {
      summary: 'added latency and max RPS of kvrouter against direct requests',
      load: () => import('../bench/router.js'),
    },
    replicas: {
      summary: 'decision quality of 1 router vs 3 replicas with and without sync (hit rate, TTFT, imbalance)',
      load: () => import('../bench/replicas.js'),
    },
    soak: {
      summary: 'sustained load with cancellations and an engine restart (memory, leaks, stuck listeners)',
      load: () => import('../bench/soak.js'),
    },
  };

function usage(): string {
  const w = Math.max(...Object.keys(BENCHES).map((k) => k.length));
  return `Usage: kvrouter bench <name> [options]\n\nBenchmarks:\n${Object.entries(BENCHES)
    .map(([k, v]) => `  ${k.padEnd(w)}  ${v.summary}`)
    .join('\n')}\n`;
}

export async function run(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (!name || name === '--help' || name === '-h') {
    process.stdout.write(usage());
    return name ? 0 : 1;
  }
  const b = BENCHES[name];
  if (!b) {
    process.stderr.write(`kvrouter bench: unknown benchmark '${name}'\n\n${usage()}`);
    return 2;
  }
  return (await b.load()).run(rest);
}
