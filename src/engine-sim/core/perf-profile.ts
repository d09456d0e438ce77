// The measured step times of one model on one GPU, in the shape of the calibration files
// (`src/engine-sim/profiles/*.json`): checked here so a hand-made file fails with one clear line.
// Pure: the caller reads the file.

export interface PrefillPoint {
  /** Tokens computed in the pass (one sequence). */
  new: number;
  /** Tokens already cached before them. */
  prefix: number;
  ms: number;
}

export interface DecodePoint {
  batch: number;
  /** Cached tokens of each sequence. */
  context: number;
  ms: number;
}

export interface ModelProfile {
  model: string;
  /** Parameter count (weights are bf16: 2 bytes each). */
  params: number;
  kvBytesPerToken: number;
  /** A full grid: every `new` value with every `prefix` value. */
  prefill: PrefillPoint[];
  decode: DecodePoint[];
}

type Json = Record<string, unknown>;
const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

function num(row: Json, key: string, where: string, min: number): number {
  const v = row[key];
  if (typeof v !== 'number' || !Number.isFinite(v) || v < min)
    throw new Error(`${where}.${key} must be a number >= ${min}, got ${JSON.stringify(v)}`);
  return v;
}

/** Model names in a parsed calibration file (empty when it has none). */
export function profileModels(file: unknown): string[] {
  if (!isObject(file) || !Array.isArray(file.models)) return [];
  return file.models.map((m) => (isObject(m) && typeof m.model === 'string' ? m.model : '?'));
}

/**
 * The entry `model` of a parsed calibration file (the only entry when `model` is null), checked:
 * positive sizes, ms > 0, a full prefill grid with at least 3 `new` values, at least 3 decode rows.
 */
export function selectProfile(file: unknown, model: string | null): ModelProfile {
  const names = profileModels(file);
  if (names.length === 0) throw new Error('no "models" array with entries');
  const models = (file as { models: unknown[] }).models;
  let i: number;
  if (model === null) {
    if (models.length > 1)
      throw new Error(`holds ${models.length} models (${names.join(', ')}): name one as FILE#MODEL`);
    i = 0;
  } else {
    i = names.indexOf(model);
    if (i < 0) throw new Error(`no model "${model}" (has ${names.join(', ')})`);
  }
  const m = models[i] as Json;
  const at = `models[${i}]`;
  const rows = (key: string): Json[] => {
    const v = m[key];
    if (!Array.isArray(v) || !v.every(isObject)) throw new Error(`${at}.${key} must be an array of objects`);
    return v as Json[];
  };
  const prefill = rows('prefill').map((r, k) => {
    const w = `${at}.prefill[${k}]`;
    return { new: num(r, 'new', w, 1), prefix: num(r, 'prefix', w, 0), ms: positive(r, 'ms', w) };
  });
  const decode = rows('decode').map((r, k) => {
    const w = `${at}.decode[${k}]`;
    return { batch: num(r, 'batch', w, 1), context: num(r, 'context', w, 0), ms: positive(r, 'ms', w) };
  });
  const news = new Set(prefill.map((p) => p.new));
  const prefixes = new Set(prefill.map((p) => p.prefix));
  if (news.size < 3) throw new Error(`${at}.prefill needs at least 3 distinct "new" values, has ${news.size}`);
  const seen = new Set(prefill.map((p) => `${p.new}/${p.prefix}`));
  if (seen.size !== prefill.length) throw new Error(`${at}.prefill has a duplicate (new, prefix) point`);
  for (const n of news)
    for (const p of prefixes)
      if (!seen.has(`${n}/${p}`)) throw new Error(`${at}.prefill is not a full grid: no point new=${n} prefix=${p}`);
  if (decode.length < 3) throw new Error(`${at}.decode needs at least 3 rows, has ${decode.length}`);
  return {
    model: typeof m.model === 'string' ? m.model : `model ${i}`,
    params: positive(m, 'params', at),
    kvBytesPerToken: positive(m, 'kv_bytes_per_token', at),
    prefill,
    decode,
  };
}

function positive(row: Json, key: string, where: string): number {
  const v = num(row, key, where, 0);
  if (v === 0) throw new Error(`${where}.${key} must be > 0`);
  return v;
}

/** Bytes in one GB of GPU memory as vendors quote it (an H200's "141 GB" is 143,771 MiB): 2^30. */
export const GPU_GB = 2 ** 30;

/**
 * GPU KV blocks that fit beside the weights, as vLLM sizes its cache:
 * floor((memory x utilization − params x 2 bytes (bf16)) / (KV bytes per token x block size)).
 * 0 when the weights leave no room.
 */
export function kvCapacityBlocks(
  profile: Pick<ModelProfile, 'params' | 'kvBytesPerToken'>,
  gpuMemoryGb: number,
  utilization: number,
  blockSize: number,
): number {
  const free = gpuMemoryGb * GPU_GB * utilization - profile.params * 2;
  return Math.max(0, Math.floor(free / (profile.kvBytesPerToken * blockSize)));
}
