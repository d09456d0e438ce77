// `--perf-model`: the mocker, a built-in calibrated profile (data in ./profiles/, copied to dist by
// the build), or a calibration file of the same shape. The I/O edge of the perf models: the core
// gets a ready PerfModel.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CalibratedModel } from './core/calibrated-model.js';
import { mockerModel } from './core/mocker-model.js';
import type { PerfModel } from './core/perf-model.js';
import { selectProfile, type ModelProfile } from './core/perf-profile.js';

interface BuiltIn {
  file: string;
  model: string;
  /** Default served model name. */
  servedModel: string;
}

// Next to this module (src/, or dist/ where the build copies the data); a dist/ built by tsc alone
// (the test setup) falls back to the checkout's src/, as the EPP protos do.
const PROFILE_DIRS = [
  new URL('./profiles/', import.meta.url),
  new URL('../../src/engine-sim/profiles/', import.meta.url),
].map((u) => fileURLToPath(u));

const BUILT_IN: Record<string, BuiltIn> = {
  'h200-qwen3-0.6b': { file: 'h200-qwen3-dense.json', model: 'qwen3-0.6b', servedModel: 'Qwen/Qwen3-0.6B' },
  'h200-qwen3-8b': { file: 'h200-qwen3-dense.json', model: 'qwen3-8b', servedModel: 'Qwen/Qwen3-8B' },
  'h200-qwen3-32b': { file: 'h200-qwen3-dense.json', model: 'qwen3-32b', servedModel: 'Qwen/Qwen3-32B' },
};

export const PERF_MODELS = ['mocker', ...Object.keys(BUILT_IN)] as const;

/** GPU memory (GB of 2^30 bytes) of the devices calibration files name, for the KV capacity default. */
const DEVICE_MEMORY_GB: Record<string, number> = { 'NVIDIA H200': 141 };

export interface LoadedPerfModel {
  model: PerfModel;
  /** The measured data; null for the mocker. */
  profile: ModelProfile | null;
  /** GPU memory the data was measured on (GB of 2^30 bytes); null when unknown or for the mocker. */
  deviceMemoryGb: number | null;
  /** Served model name that goes with it (built-in profiles only). */
  servedModel: string | null;
}

const loaded = new Map<string, LoadedPerfModel>();

/** Resolve `--perf-model` (cached: `--count N` engines share one model). Throws one line on a bad value. */
export function loadPerfModel(spec: string): LoadedPerfModel {
  let m = loaded.get(spec);
  if (!m) loaded.set(spec, (m = load(spec)));
  return m;
}

function load(spec: string): LoadedPerfModel {
  if (spec === 'mocker') return { model: mockerModel, profile: null, deviceMemoryGb: null, servedModel: null };
  const builtIn = BUILT_IN[spec];
  if (builtIn) {
    const path = PROFILE_DIRS.map((d) => join(d, builtIn.file)).find((p) => existsSync(p));
    if (!path)
      throw new Error(`perf-model ${spec}: profiles/${builtIn.file} is missing from the build (npm run build)`);
    return fromFile(spec, path, builtIn.model, builtIn.servedModel);
  }
  // FILE or FILE#MODEL (the model entry to use when the file holds several).
  const hash = spec.lastIndexOf('#');
  const [path, model] = hash > 0 && !existsSync(spec) ? [spec.slice(0, hash), spec.slice(hash + 1)] : [spec, null];
  if (!existsSync(path))
    throw new Error(
      `perf-model must be ${PERF_MODELS.join('|')} or a calibration JSON file[#model], got "${spec}" (no such file)`,
    );
  return fromFile(spec, path, model, null);
}

function fromFile(spec: string, path: string, model: string | null, servedModel: string | null): LoadedPerfModel {
  let file: unknown;
  try {
    file = JSON.parse(readFileSync(path, 'utf8'));
  } catch (err) {
    throw new Error(`perf-model ${spec}: cannot read ${path}: ${(err as Error).message.split('\n')[0]}`);
  }
  try {
    const profile = selectProfile(file, model);
    const device = (file as { device?: unknown }).device;
    return {
      model: new CalibratedModel(spec, profile),
      profile,
      deviceMemoryGb: typeof device === 'string' ? (DEVICE_MEMORY_GB[device] ?? null) : null,
      servedModel,
    };
  } catch (err) {
    throw new Error(`perf-model ${spec}: ${(err as Error).message}`);
  }
}
