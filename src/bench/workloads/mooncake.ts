// Mooncake FAST'25 traces (`{timestamp, input_length, output_length, hash_ids}` per line) as a
// workload: each hash id k becomes a fixed block of 512 token ids drawn from a generator keyed by
// (seed, k), the last block cut to the input length, so equal ids give equal tokens and the engines
// and the router see exactly the reuse the trace records. Prompts go out as token ids.
import { readFileSync } from 'node:fs';
import { gunzipSync } from 'node:zlib';
import { fillTokens, mix } from './tokens.js';
import type { BenchRequest, Workload } from './types.js';

export const TRACE_BLOCK = 512;

export interface TraceRecord {
  timestamp: number;
  input_length: number;
  output_length: number;
  hash_ids: number[];
}

export interface MooncakeOptions {
  file: string;
  seed: number;
  /** Keep at most this many requests (the first ones, in trace order). */
  maxRequests: number;
  /** Skip requests whose prompt + output exceed this (the engines' max_model_len). */
  maxModelLen: number;
  /** Cap on output tokens (null: the trace's). */
  maxOutputTokens: number | null;
  /** Keep this fraction of conversations (seeded), whole: a thinner trace with the same reuse structure. */
  sample: number;
  /**
   * When the trace holds fewer than `maxRequests`, superimpose copies of it until it does (a
   * larger population of the same service): see `tileTrace`.
   */
  tile?: boolean;
}

/** Arrivals of copy k are shifted by up to this much (seeded), so copies do not burst together. */
const TILE_SHIFT_MS = 60_000;

/**
 * `copies` superimposed copies of a trace, in time order: copy k renames every hash id but 0 (the
 * block every request shares, a common system prompt) to id + k x (largest id + 1), so copies share
 * nothing else and each keeps the trace's reuse; its arrivals are shifted by a seeded offset.
 */
export function tileTrace(records: readonly TraceRecord[], copies: number, seed: number): TraceRecord[] {
  let maxId = 0;
  for (const r of records) for (const h of r.hash_ids) if (h > maxId) maxId = h;
  const out: Array<TraceRecord & { copy: number; pos: number }> = [];
  for (let k = 0; k < copies; k++) {
    const shift = k === 0 ? 0 : Math.floor((mix(seed, 0x711e, k) / 2 ** 32) * TILE_SHIFT_MS);
    const offset = k * (maxId + 1);
    records.forEach((r, pos) => {
      out.push({
        ...r,
        timestamp: r.timestamp + shift,
        hash_ids: k === 0 ? r.hash_ids : r.hash_ids.map((h) => (h === 0 ? 0 : h + offset)),
        copy: k,
        pos,
      });
    });
  }
  out.sort((a, b) => a.timestamp - b.timestamp || a.copy - b.copy || a.pos - b.pos);
  return out.map(({ copy: _c, pos: _p, ...r }) => r);
}

/** No session ids in the trace. Reuse is a contiguous prefix and block 0 is shared by every request,
 *  so any reuse beyond one block implies an equal second block: it stands for the conversation. */
export function conversationKey(r: TraceRecord): number {
  return r.hash_ids[Math.min(1, r.hash_ids.length - 1)];
}

export function parseTrace(text: string, file: string): TraceRecord[] {
  const out: TraceRecord[] = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i].trim();
    if (!line) continue;
    const r = JSON.parse(line) as Partial<TraceRecord>;
    if (
      typeof r.timestamp !== 'number' ||
      typeof r.input_length !== 'number' ||
      typeof r.output_length !== 'number' ||
      !Array.isArray(r.hash_ids)
    ) {
      throw new Error(
        `${file}:${i + 1}: not a Mooncake trace record (timestamp, input_length, output_length, hash_ids)`,
      );
    }
    if (r.hash_ids.length !== Math.ceil(r.input_length / TRACE_BLOCK)) {
      throw new Error(
        `${file}:${i + 1}: ${r.hash_ids.length} hash ids for ${r.input_length} tokens (expected ceil(input_length / ${TRACE_BLOCK}))`,
      );
    }
    out.push(r as TraceRecord);
  }
  return out;
}

/** The prompt of one record: block k's tokens for every hash id, the last block cut short. */
export function traceTokens(r: TraceRecord, seed: number): Uint32Array {
  const out = new Uint32Array(r.input_length);
  for (let b = 0; b < r.hash_ids.length; b++) {
    const len = Math.min(TRACE_BLOCK, r.input_length - b * TRACE_BLOCK);
    // Written in place: a 1,024-engine run makes prompts by the hundred thousand, and every
    // ArrayBuffer counts toward V8's external memory, whose growth starts major GCs.
    fillTokens(out, b * TRACE_BLOCK, seed, r.hash_ids[b], len);
  }
  return out;
}

/** A trace file's text; `.gz` files (as committed under bench/traces/) are decompressed. */
export function readTraceText(file: string): string {
  const raw = readFileSync(file);
  return (file.endsWith('.gz') ? gunzipSync(raw) : raw).toString('utf8');
}

export function mooncakeWorkload(o: MooncakeOptions): Workload & { skipped: number; copies: number } {
  const all = parseTrace(readTraceText(o.file), o.file);
  let kept: TraceRecord[] = [];
  let skipped = 0;
  for (const r of all) {
    if (kept.length >= o.maxRequests) break;
    if (o.sample < 1 && mix(o.seed, conversationKey(r)) / 2 ** 32 >= o.sample) continue;
    const out = Math.max(
      1,
      o.maxOutputTokens === null ? r.output_length : Math.min(r.output_length, o.maxOutputTokens),
    );
    if (r.input_length + out > o.maxModelLen) {
      skipped++;
      continue;
    }
    kept.push({ ...r, output_length: out });
  }
  if (kept.length === 0) throw new Error(`${o.file}: no request fits max_model_len ${o.maxModelLen}`);
  const copies = o.tile && kept.length < o.maxRequests ? Math.ceil(o.maxRequests / kept.length) : 1;
  if (copies > 1) kept = tileTrace(kept, copies, o.seed).slice(0, o.maxRequests);
  const t0 = kept[0].timestamp;
  const requests: BenchRequest[] = kept.map((r) => ({
    atMs: r.timestamp - t0,
    after: null,
    path: '/v1/completions',
    body: () => ({ prompt: Array.from(traceTokens(r, o.seed)) }),
    maxTokens: r.output_length,
    sessionKey: `c${conversationKey(r)}`,
  }));
  const islMean = kept.reduce((a, r) => a + r.input_length, 0) / kept.length;
  const oslMean = kept.reduce((a, r) => a + r.output_length, 0) / kept.length;
  return {
    name: 'mooncake',
    description:
      `Mooncake trace ${o.file.split('/').pop()}: ${copies > 1 ? `${kept.length} requests of ${copies} superimposed copies (disjoint hash ids but block 0, arrivals shifted up to ${TILE_SHIFT_MS / 1000} s)` : `first ${kept.length} requests`}${o.sample < 1 ? ` of a ${o.sample} sample of conversations` : ''} (${skipped} longer than max_model_len ${o.maxModelLen} skipped), ` +
      `${((kept.at(-1)!.timestamp - t0) / 1000).toFixed(0)} s of arrivals, mean ISL ${islMean.toFixed(0)}, mean OSL ${oslMean.toFixed(0)}` +
      (o.maxOutputTokens === null ? '' : ` (capped at ${o.maxOutputTokens})`) +
      `, 512-token hash blocks -> seeded token ids (seed ${o.seed})`,
    requests,
    engineTokenizer: 'none',
    promptTokens: async (i) => traceTokens(kept[i], o.seed),
    tokensNow: (i) => traceTokens(kept[i], o.seed),
    close: async () => undefined,
    skipped,
    copies,
  };
}
