// The seam between the scheduler and time: a perf model turns what one pass computes into its
// duration. Two implementations: the Dynamo mocker's polynomials (`mocker-model.ts`) and a model
// calibrated on measured GPU step times (`calibrated-model.ts`). Pure: no wall clock, so a
// virtual-time simulator can step engines with the same model.

/** One sequence's prefill (or recompute) chunk in a pass. */
export interface PrefillChunk {
  /** Tokens computed in this pass. */
  newTokens: number;
  /** Tokens of the sequence whose KV already exists (cache hit or earlier chunks): the new tokens attend to them. */
  contextTokens: number;
}

/** What one scheduling pass computes. */
export interface PassContents {
  prefills: readonly PrefillChunk[];
  /** Sequences producing a decode token this pass. */
  decodes: number;
  /** Summed context (tokens with KV) of those sequences. */
  decodeContextTokens: number;
  /** Blocks held by requests / GPU blocks when the pass starts (0..1): the mocker's decode input. */
  kvUsage: number;
}

/** A pass's compute time in ms, before speedups, split so that `--decode-speedup` divides the decodes' share. */
export interface PassTime {
  prefillMs: number;
  /** The decodes' share: their step alone, or what they add to a pass that also prefills. */
  decodeMs: number;
}

export interface PerfModel {
  /** `mocker`, a built-in profile name, or the file it was read from. */
  readonly name: string;
  /** `out`: the object to write the result into and return (default: a new one). */
  pass(contents: PassContents, out?: PassTime): PassTime;
}

/** What `passMs` has the model write into (read at once: a fleet plans millions of passes). */
const scratchTime: PassTime = { prefillMs: 0, decodeMs: 0 };

export interface TimingKnobs {
  speedup: number;
  decodeSpeedup: number;
  /** Cost of a host-tier load as a fraction of recomputing the same tokens. */
  cpuLoadFraction: number;
}

/** Duration of one pass after speedups; `loadedTokens` came back from the host tier. */
export function passMs(model: PerfModel, contents: PassContents, loadedTokens: number, knobs: TimingKnobs): number {
  const t = model.pass(contents, scratchTime);
  const prefill = t.prefillMs;
  const decode = t.decodeMs;
  // A load is charged as a fraction of the marginal recompute cost of those tokens in this pass.
  const load =
    loadedTokens > 0
      ? knobs.cpuLoadFraction *
        (model.pass(
          { ...contents, prefills: [...contents.prefills, { newTokens: loadedTokens, contextTokens: 0 }] },
          scratchTime,
        ).prefillMs -
          prefill)
      : 0;
  return (prefill + load) / knobs.speedup + decode / (knobs.speedup * knobs.decodeSpeedup);
}
