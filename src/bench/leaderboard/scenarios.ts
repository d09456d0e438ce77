// The leaderboard's scenarios: each one `bench fleet` invocation per load point and seed, written as
// that command's flags, so any cell can be rerun alone with `kvrouter bench fleet <flags>`. Sizes
// come from each workload's working set as bench fleet sizes them (--cache-ratio, the engines'
// floor); the load ladders go from light load to past saturation of the 8B H200 profile.
import { existsSync } from 'node:fs';
import { resolveTrace } from '../workloads/select.js';

export interface LoadLadder {
  /** The bench fleet flag that sets the load (its value is the load point). */
  flag: 'rate' | 'rate-scale' | 'rate-per-engine';
  /** What the value means, for table headers and chart axes. */
  unit: string;
  full: number[];
  quick: number[];
}

export interface Scenario {
  name: string;
  title: string;
  /** bench fleet flags of a full run (without --policies, --seed and the load flag). */
  full: string[];
  quick: string[];
  ladder: LoadLadder;
  /** Null: runs; else why it cannot run here (reported, never dropped). */
  missing(): string | null;
}

/** The Mooncake tool-agent trace (FAST25-release/traces/toolagent_trace.jsonl) is not committed: see bench/traces/README.md. */
export const TOOLAGENT_TRACE = 'bench/traces/toolagent_trace.jsonl.gz';

const present = (file: string) => () =>
  existsSync(resolveTrace(file)) ? null : `trace ${file} is not in the repository (bench/traces/README.md)`;
const always = () => null;

const LLMD = ['--groups', '150', '--prompts-per-group', '5', '--system-len', '6000', '--question-len', '1200'];

export const SCENARIOS: readonly Scenario[] = [
  {
    name: 'llm-d-shape',
    title: "llm-d's benchmark shape: 150 groups x 5 prompts, 6k system + 1.2k question, 1k output",
    full: ['--workload', 'shared-prefix', ...LLMD, '--output-len', '1000', '--engines', '8'],
    // Quick: the same prompts, 20 groups, 64 output tokens, 4 engines.
    quick: [
      '--workload',
      'shared-prefix',
      ...LLMD.slice(0, 1),
      '20',
      ...LLMD.slice(2),
      '--output-len',
      '64',
      '--engines',
      '4',
    ],
    ladder: { flag: 'rate', unit: 'requests/s', full: [16, 48, 128], quick: [8, 48] },
    missing: always,
  },
  {
    name: 'multi-turn',
    title: "multi-turn chat (the project's generator): 64 sessions x 6 turns through the chat template",
    full: ['--workload', 'multi-turn', '--users', '64', '--engines', '8'],
    quick: ['--workload', 'multi-turn', '--users', '16', '--engines', '4'],
    ladder: { flag: 'rate-scale', unit: 'x arrival rate', full: [4], quick: [4] },
    missing: always,
  },
  {
    name: 'agentic',
    title: 'agentic tool loop: 64 sessions x 12 short turns over a growing context, tool-call gaps',
    full: ['--workload', 'agentic', '--users', '64', '--engines', '8'],
    quick: ['--workload', 'agentic', '--users', '16', '--engines', '4'],
    ladder: { flag: 'rate-scale', unit: 'x arrival rate', full: [4], quick: [4] },
    missing: always,
  },
  {
    name: 'mooncake-conversation',
    title: 'Mooncake conversation trace (300 requests, whole conversations sampled, bursts spread over 3 s)',
    full: [
      '--workload',
      'mooncake',
      '--requests',
      '300',
      '--sample',
      '0.3',
      '--spread-bursts',
      '3000',
      '--engines',
      '8',
    ],
    quick: [
      '--workload',
      'mooncake',
      '--requests',
      '80',
      '--sample',
      '0.08',
      '--max-output-tokens',
      '64',
      '--spread-bursts',
      '3000',
      '--engines',
      '4',
    ],
    ladder: { flag: 'rate-per-engine', unit: 'requests/s per engine', full: [1, 2, 4], quick: [2] },
    missing: present('bench/traces/conversation_trace.jsonl.gz'),
  },
  {
    name: 'mooncake-toolagent',
    title: 'Mooncake tool-agent trace',
    full: ['--workload', 'mooncake', '--trace', TOOLAGENT_TRACE, '--requests', '300', '--engines', '8'],
    quick: ['--workload', 'mooncake', '--trace', TOOLAGENT_TRACE, '--requests', '120', '--engines', '4'],
    ladder: { flag: 'rate-per-engine', unit: 'requests/s per engine', full: [1, 2, 4], quick: [2] },
    missing: present(TOOLAGENT_TRACE),
  },
  {
    name: 'two-tenant',
    title: 'two tenants: short interactive requests beside a flood of long batch prompts',
    full: ['--workload', 'two-tenant', '--engines', '8'],
    quick: ['--workload', 'two-tenant', '--users', '80', '--output-len', '32', '--reply-len', '64', '--engines', '4'],
    ladder: { flag: 'rate-scale', unit: 'x arrival rate', full: [1, 2, 4], quick: [2] },
    missing: always,
  },
  {
    name: 'two-tenant-fleet',
    title: 'two tenants at fleet scale: 256 engines behind 4 router replicas (synced, 5 ms)',
    // 32x the interactive rate of `two-tenant` on 32x the engines, over a shorter run (1,500
    // requests), shorter batch documents so that 256 engines' caches fit in memory and time.
    full: [
      '--workload',
      'two-tenant',
      '--users',
      '1200',
      '--rate',
      '128',
      '--context-len',
      '4000',
      '--engines',
      '256',
      '--routers',
      '4',
      '--sync-delay-ms',
      '5',
      '--event-wire',
      'values',
    ],
    quick: [
      '--workload',
      'two-tenant',
      '--users',
      '320',
      '--rate',
      '32',
      '--context-len',
      '2000',
      '--engines',
      '32',
      '--routers',
      '4',
      '--sync-delay-ms',
      '5',
      '--event-wire',
      'values',
    ],
    ladder: { flag: 'rate-scale', unit: 'x arrival rate', full: [2], quick: [2] },
    missing: always,
  },
];
