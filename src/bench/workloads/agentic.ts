// Agent sessions: many short turns over a growing context. Every session starts from the same tool
// specification and system prompt (shared by all agents), then its own task; each turn sends the
// whole history and asks for a short reply (a tool call), whose result comes back after a tool-call
// gap and is appended with the reply before the next turn. Token-id prompts via /v1/completions;
// the history holds the workload's own seeded replies (not the engine's output), so every policy
// sees identical prompts. Sessions start open-loop (Poisson); each next turn is sent the tool-call
// gap (seeded, 0.5x to 1.5x `thinkMs`) after the previous one completed.
import { mix, poissonArrivals, rng, tokenBlock } from './tokens.js';
import type { BenchRequest, Workload } from './types.js';

export interface AgenticOptions {
  sessions: number;
  turns: number;
  /** Tool specification + system prompt every session shares (tokens). */
  systemLen: number;
  /** The session's own task (tokens). */
  taskLen: number;
  /** Reply per turn = max_tokens (tokens). */
  replyLen: number;
  /** Tool result appended after each reply (tokens). */
  toolLen: number;
  /** Mean tool-call gap between a reply and the next turn (ms, before --rate-scale). */
  thinkMs: number;
  /** New sessions per second before --rate-scale. */
  rate: number;
  seed: number;
}

/** Prompt of turn `turn` of session `s`: system, task, then (reply, tool result) per earlier turn. */
export function agenticPrompt(o: AgenticOptions, s: number, turn: number): Uint32Array {
  const out = new Uint32Array(o.systemLen + o.taskLen + turn * (o.replyLen + o.toolLen));
  out.set(tokenBlock(o.seed, mix(1), o.systemLen), 0);
  let at = o.systemLen;
  out.set(tokenBlock(o.seed, mix(2, s), o.taskLen), at);
  at += o.taskLen;
  for (let t = 0; t < turn; t++) {
    out.set(tokenBlock(o.seed, mix(3, s, t), o.replyLen), at);
    at += o.replyLen;
    out.set(tokenBlock(o.seed, mix(4, s, t), o.toolLen), at);
    at += o.toolLen;
  }
  return out;
}

export function agenticWorkload(o: AgenticOptions): Workload {
  const starts = poissonArrivals(o.sessions, o.rate, o.seed);
  const requests: BenchRequest[] = [];
  const who: Array<{ s: number; turn: number }> = [];
  const gap = rng(mix(o.seed, 0x9a9));
  for (let s = 0; s < o.sessions; s++) {
    for (let t = 0; t < o.turns; t++) {
      const index = requests.length;
      const turn = { s, turn: t };
      requests.push({
        atMs: starts[s],
        after: t === 0 ? null : { index: index - 1, thinkMs: o.thinkMs * (0.5 + gap()) },
        path: '/v1/completions',
        body: () => ({ prompt: Array.from(agenticPrompt(o, turn.s, turn.turn)) }),
        maxTokens: o.replyLen,
        sessionKey: `a${s}`,
      });
      who.push(turn);
    }
  }
  const tokens = (i: number) => agenticPrompt(o, who[i].s, who[i].turn);
  return {
    name: 'agentic',
    description:
      `agentic: ${o.sessions} sessions x ${o.turns} turns, shared system ${o.systemLen} + task ${o.taskLen} tokens, ` +
      `then per turn a ${o.replyLen}-token reply and a ${o.toolLen}-token tool result, tool-call gap ${o.thinkMs} ms (x 0.5-1.5), Poisson ${o.rate} sessions/s, seed ${o.seed}`,
    requests,
    engineTokenizer: 'none',
    promptTokens: async (i) => tokens(i),
    tokensNow: tokens,
    close: async () => undefined,
  };
}
