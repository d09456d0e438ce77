// The small requests of the overhead benchmarks: 64 distinct bodies sharing a system prompt,
// `chunks` output tokens (the stub streams one chunk each), streamed (what chat clients send).
import { tokenBlock, words } from '../workloads/tokens.js';

export type BodyKind = 'chat' | 'tokens';

export function requestBodies(
  kind: BodyKind,
  model: string,
  seed: number,
  chunks = 1,
): { path: string; bodies: string[] } {
  const bodies: string[] = [];
  for (let i = 0; i < 64; i++) {
    const common = { model, max_tokens: chunks, stream: true };
    if (kind === 'chat') {
      bodies.push(
        JSON.stringify({
          ...common,
          messages: [
            { role: 'system', content: `You are a helpful assistant. ${words(seed, 1, 300)}` },
            { role: 'user', content: `${words(seed, 100 + i, 40)}?` },
          ],
        }),
      );
    } else {
      bodies.push(
        JSON.stringify({ ...common, prompt: [...tokenBlock(seed, 1, 768), ...tokenBlock(seed, 100 + i, 256)] }),
      );
    }
  }
  return { path: kind === 'chat' ? '/v1/chat/completions' : '/v1/completions', bodies };
}
