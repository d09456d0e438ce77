// `kvrouter <subcommand>`: every subcommand lives in its own module, loaded on demand so
// `kvrouter engine-sim` never pays for the router's imports and vice versa.
import { setFlagsFromString } from 'node:v8';

/**
 * V8 gives up on an inline cache after 4 object shapes and goes megamorphic. @huggingface/jinja's
 * runtime values are 11 subclasses whose `type` is a class field: past 4 shapes each of the ~200
 * values of a chat render is defined through the runtime (~250 ns instead of ~30). At 16 the render
 * of the overhead benchmark's chat request takes 34 us instead of 85 (docs/profile.md, round three).
 */
export const V8_FLAGS = '--max-valid-polymorphic-map-count=16';
export interface Subcommand {
  summary: string;
  load: () => Promise<{ run: (argv: string[]) => Promise<number> }>;
}

export const SUBCOMMANDS: Record<string, Subcommand> = {
  serve: {
    summary: 'run the router (OpenAI API, KV-aware routing) from a YAML config',
    load: () => import('./serve.js'),
  },
  epp: {
    summary: 'the router with the Gateway API Inference Extension endpoint picker (serve --epp)',
    load: () => import('./epp.js'),
  },
  indexer: { summary: 'run the standalone KV indexer (Mooncake Conductor API)', load: () => import('./indexer.js') },
  'engine-sim': {
    summary: 'run simulated inference engines (OpenAI API, paged KV cache, ZMQ KV events)',
    load: () => import('./engine-sim.js'),
  },
  query: {
    summary: 'ask a running indexer which instances cache a prompt (per tier and DP rank)',
    load: () => import('./query.js'),
  },
  relay: {
    summary: "KV-event fan-in: engines' ZMQ streams once, to JetStream for every router replica",
    load: () => import('./relay.js'),
  },
  'check-config': { summary: 'validate a router YAML configuration', load: () => import('./check-config.js') },
  'config-reference': {
    summary: 'print the configuration reference (every YAML key)',
    load: () => import('./config-reference.js'),
  },
  bench: { summary: 'benchmarks: cluster, overhead, indexer, events, router', load: () => import('./bench.js') },
};

export function usage(): string {
  const width = Math.max(...Object.keys(SUBCOMMANDS).map((k) => k.length));
  const lines = Object.entries(SUBCOMMANDS).map(([k, v]) => `  ${k.padEnd(width)}  ${v.summary}`);
  return `Usage: kvrouter <command> [options]\n\nCommands:\n${lines.join('\n')}\n\nRun \`kvrouter <command> --help\` for a command's options.\n`;
}

export async function runCli(argv: string[]): Promise<number> {
  setFlagsFromString(V8_FLAGS);
  const [cmd, ...rest] = argv;
  if (!cmd || cmd === '--help' || cmd === '-h' || cmd === 'help') {
    process.stdout.write(usage());
    return cmd ? 0 : 1;
  }
  if (cmd === '--version' || cmd === '-v') {
    process.stdout.write('kvrouter 0.1.0\n');
    return 0;
  }
  const sub = SUBCOMMANDS[cmd];
  if (!sub) {
    process.stderr.write(`kvrouter: unknown command '${cmd}'\n\n${usage()}`);
    return 2;
  }
  const mod = await sub.load();
  try {
    return await mod.run(rest);
  } catch (err) {
    // A start-up failure (a port taken, a file missing) is one line; KVROUTER_DEBUG=1 shows the stack.
    const e = err instanceof Error ? err : new Error(String(err));
    process.stderr.write(`kvrouter ${cmd}: ${process.env.KVROUTER_DEBUG ? (e.stack ?? e.message) : e.message}\n`);
    return 1;
  }
}
