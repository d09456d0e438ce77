// Public API of the simulated engine: embed engines (router `npm start`, tests, benchmarks) or
// drive the pure core directly.
export { startEngine, startEngines, type EngineHandle, type RankEndpoints } from './engine.js';
export { resolveOptions, ENGINE_DEFAULTS, type EngineOptions, type ResolvedEngineOptions } from './options.js';
export { EVENT_FORMATS, type EventFormat } from './events/wire.js';
export type { ReplayLayout } from './events/zmq-publisher.js';
export { EngineCore, type StepOutput, type TokenOutput, type CoreStats } from './core/engine-core.js';
export type { CoreConfig } from './core/config.js';
export type { SimRequestSpec } from './core/request.js';
export type { CoreKvEvent } from './core/kv-events.js';
export { prefillMs, decodeMs, mockerModel } from './core/mocker-model.js';
export type { PerfModel, PassContents, PassTime, PrefillChunk } from './core/perf-model.js';
export { CalibratedModel } from './core/calibrated-model.js';
export { selectProfile, kvCapacityBlocks, type ModelProfile } from './core/perf-profile.js';
export { loadPerfModel, PERF_MODELS } from './perf-models.js';
export { ENGINE_ROLES } from './events/zmq-publisher.js';
