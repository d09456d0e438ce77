// bench fleet's V8 flags. A large fleet allocates short-lived objects by the million (each engine
// pass, KV event and decision) beside a heap of long-lived ones (the engines' caches, the routers'
// indexes): with 64 MiB semi-spaces most of the former die young instead of being promoted, which
// cut the CPU of a 1,024-engine run by a fifth (docs/fleet-sim.md, "Scale"), and 256 MiB halves the
// scavenges again (1,024 x 10,000: 359 -> 157, CPU -4 to -7 %, peak RSS +300 MiB); the engines' caches also
// need more old space than Node's default. Both are startup flags (v8.setFlagsFromString at run time
// changes nothing), so `bench fleet` starts itself again with the ones it lacks: the user's own
// (NODE_OPTIONS or node's flags) win, and KVROUTER_FLEET_RELAUNCH=0 turns the relaunch off.
import { spawn } from 'node:child_process';
import { totalmem } from 'node:os';
import { getHeapStatistics } from 'node:v8';

/** Young-generation semi-space of a fleet run (MiB). */
export const FLEET_SEMI_SPACE_MIB = 256;
/** Set in the relaunched process (and by a user to turn the relaunch off: 0). */
const RELAUNCH_ENV = 'KVROUTER_FLEET_RELAUNCH';

/**
 * The flags a fleet run should start with that `given` (node's flags and NODE_OPTIONS) lacks: the
 * semi-space, and an old space of `heapMiB` when that exceeds the current limit (`limitMiB`).
 */
export function missingV8Flags(given: string, heapMiB: number | null, limitMiB: number): string[] {
  const out: string[] = [];
  if (!/--max-semi-space-size\b/.test(given)) out.push(`--max-semi-space-size=${FLEET_SEMI_SPACE_MIB}`);
  if (heapMiB !== null && heapMiB > limitMiB && !/--max-old-space-size\b/.test(given))
    out.push(`--max-old-space-size=${heapMiB}`);
  return out;
}

/** The V8 sizing flags this process runs with (node's flags, then NODE_OPTIONS). */
export function v8SizingFlags(): string[] {
  const given = [...process.execArgv, ...(process.env.NODE_OPTIONS ?? '').split(/\s+/)];
  return given.filter((f) => /^--max-(semi|old)-space-size\b/.test(f));
}

/**
 * Run `kvrouter bench fleet` again in a node with the flags it lacks, when this process is the CLI
 * (its argv ends with `argv`) and not already relaunched; resolves to the child's exit code, or
 * null when this process should run the bench itself. `heapBytes`: the old space the run needs
 * (null: unknown before the workload is read).
 */
export async function relaunchWithV8Flags(argv: readonly string[], heapBytes: number | null): Promise<number | null> {
  if (process.env[RELAUNCH_ENV] !== undefined) return null;
  const cli = process.argv.slice(2);
  const tail = cli.slice(cli.length - argv.length);
  if (argv.length === 0 || tail.length !== argv.length || tail.some((a, i) => a !== argv[i])) return null;
  const given = `${process.execArgv.join(' ')} ${process.env.NODE_OPTIONS ?? ''}`;
  const limitMiB = getHeapStatistics().heap_size_limit / 2 ** 20;
  const heapMiB =
    heapBytes === null
      ? null
      : Math.min(Math.ceil(heapBytes / 2 ** 30) * 1024, Math.floor((0.8 * totalmem()) / 2 ** 20));
  const flags = missingV8Flags(given, heapMiB, limitMiB);
  if (flags.length === 0) return null;
  const child = spawn(process.execPath, [...process.execArgv, ...flags, process.argv[1], ...cli], {
    stdio: 'inherit',
    env: { ...process.env, [RELAUNCH_ENV]: '1' },
  });
  // Ctrl-C reaches both (one process group): the parent waits for the child to end.
  const stop = () => undefined;
  process.on('SIGINT', stop);
  try {
    return await new Promise<number>((resolve, reject) => {
      child.on('error', reject);
      child.on('exit', (code, signal) => resolve(code ?? (signal ? 1 : 0)));
    });
  } finally {
    process.off('SIGINT', stop);
  }
}
