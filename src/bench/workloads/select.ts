// Build the workload the flags ask for, with defaults for full and --quick runs.
import { existsSync } from 'node:fs';
import { isAbsolute, join } from 'node:path';
import { REPO_ROOT } from '../procs/children.js';
import { agenticWorkload } from './agentic.js';
import { mooncakeWorkload } from './mooncake.js';
import { multiTurnWorkload } from './multi-turn.js';
import { sharedPrefixWorkload } from './shared-prefix.js';
import { twoTenantWorkload } from './two-tenant.js';
import type { Workload } from './types.js';

export const WORKLOADS = ['mooncake', 'shared-prefix', 'multi-turn', 'agentic', 'two-tenant'] as const;
export type WorkloadName = (typeof WORKLOADS)[number];

/** The Mooncake conversation trace committed under bench/traces/ (source and license in its README). */
export const DEFAULT_TRACE = 'bench/traces/conversation_trace.jsonl.gz';

export interface WorkloadFlags {
  workload: WorkloadName;
  trace: string | null;
  requests: number | null;
  seed: number;
  quick: boolean;
  maxModelLen: number;
  maxOutputTokens: number | null;
  /** Mooncake: fraction of conversations kept (null: all; --quick: 0.08). */
  sample: number | null;
  /** Numeric knobs of the synthetic workloads (flag name -> value); unset ones take defaults. */
  knobs: Record<string, number | undefined>;
  /** Mooncake: superimpose copies of the trace when it holds fewer than `requests` (bench fleet). */
  tile?: boolean;
}

export function resolveTrace(file: string): string {
  return isAbsolute(file) ? file : join(REPO_ROOT, file);
}

export async function buildWorkload(f: WorkloadFlags): Promise<Workload> {
  const k = (name: string, full: number, quick: number) => f.knobs[name] ?? (f.quick ? quick : full);
  if (f.workload === 'mooncake') {
    const file = resolveTrace(f.trace ?? DEFAULT_TRACE);
    if (!existsSync(file))
      throw new Error(`trace not found: ${file} (pass --trace FILE, or --workload shared-prefix|multi-turn)`);
    return mooncakeWorkload({
      file,
      seed: f.seed,
      maxRequests: f.requests ?? (f.quick ? 120 : 1000),
      maxModelLen: f.maxModelLen,
      maxOutputTokens: f.maxOutputTokens,
      // The first minutes of the trace hold few follow-up turns (median gap 72 s); a quick run
      // samples whole conversations over a longer window so that it still has reuse.
      sample: f.sample ?? (f.quick ? 0.08 : 1),
      tile: f.tile ?? false,
    });
  }
  if (f.workload === 'shared-prefix') {
    const groups = k('groups', 48, 12);
    const per = k('prompts-per-group', 16, 8);
    const w = sharedPrefixWorkload({
      groups,
      promptsPerGroup: per,
      systemLen: k('system-len', 6000, 3000),
      questionLen: k('question-len', 600, 300),
      outputLen: f.maxOutputTokens ?? k('output-len', 128, 32),
      rate: k('rate', 8, 8),
      seed: f.seed,
    });
    return f.requests ? { ...w, requests: w.requests.slice(0, f.requests) } : w;
  }
  if (f.workload === 'two-tenant') {
    const interactive = k('users', 600, 120);
    const rate = k('rate', 4, 4);
    const w = twoTenantWorkload({
      interactive,
      // A quarter as many batch prompts, arriving at four times the interactive rate: a flood.
      batch: Math.round(interactive / 4),
      rate,
      batchRate: 4 * rate,
      apps: 8,
      systemLen: k('system-len', 1000, 1000),
      questionLen: k('question-len', 100, 100),
      outputLen: k('output-len', 64, 32),
      instructionLen: 500,
      documentLen: k('context-len', 8000, 4000),
      batchOutputLen: f.maxOutputTokens ?? k('reply-len', 256, 64),
      seed: f.seed,
    });
    return f.requests ? { ...w, requests: w.requests.slice(0, f.requests) } : w;
  }
  if (f.workload === 'agentic') {
    const w = agenticWorkload({
      sessions: k('users', 64, 12),
      turns: k('turns', 12, 6),
      systemLen: k('system-len', 4000, 2000),
      taskLen: k('context-len', 1000, 500),
      replyLen: f.maxOutputTokens ?? k('reply-len', 100, 32),
      toolLen: k('tool-len', 400, 200),
      thinkMs: k('think-ms', 1500, 1000),
      rate: k('rate', 2, 2),
      seed: f.seed,
    });
    // Capping keeps whole sessions' turns in order (every turn after its predecessor).
    return f.requests ? { ...w, requests: w.requests.slice(0, f.requests) } : w;
  }
  const w = await multiTurnWorkload({
    users: k('users', 64, 16),
    turns: k('turns', 6, 4),
    systemLen: k('system-len', 1000, 500),
    contextLen: k('context-len', 2000, 1000),
    questionLen: k('question-len', 100, 60),
    replyLen: f.maxOutputTokens ?? k('reply-len', 150, 40),
    thinkMs: k('think-ms', 2000, 1000),
    rate: k('rate', 1, 2),
    seed: f.seed,
  });
  // Capping a chat workload keeps whole sessions' turns in order (every turn after its predecessor).
  return f.requests ? { ...w, requests: w.requests.slice(0, f.requests) } : w;
}
