// A candidate list's ids, resolved once and reused: a router passes the same list (the same
// instance strings, in the same order) request after request, and comparing it costs less than
// looking each candidate up (a string-keyed map lookup per candidate, mostly cache misses at a
// thousand candidates). The ids stay valid while the owner's `version` stays (it changes when an id
// is added or removed: a candidate without one may have one now).
export class CandidateIds {
  // The last list, as columns: the comparison reads one object per candidate, not two.
  private instances: string[] = [];
  private ranks: number[] = [];
  private ids = new Int32Array(0);
  private version = -1;

  /** The ids of the list's candidates, in order (`idOf` for each when the list or the version changed). */
  of(
    candidates: ReadonlyArray<{ instance: string; dpRank: number }>,
    version: number,
    idOf: (instance: string, dpRank: number) => number,
  ): Int32Array {
    const k = candidates.length;
    const { instances, ranks } = this;
    let same = k === instances.length && version === this.version;
    for (let j = 0; same && j < k; j++) {
      const c = candidates[j];
      same = c.instance === instances[j] && c.dpRank === ranks[j];
    }
    if (same) return this.ids;
    const ids = new Int32Array(k);
    for (let j = 0; j < k; j++) ids[j] = idOf(candidates[j].instance, candidates[j].dpRank);
    this.instances = candidates.map((c) => c.instance);
    this.ranks = candidates.map((c) => c.dpRank);
    this.ids = ids;
    this.version = version;
    return ids;
  }
}
