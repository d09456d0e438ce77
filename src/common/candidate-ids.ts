// A candidate list's ids, resolved once and reused: a router passes the same list (the same
// instance strings, in the same order) request after request, and comparing it costs less than
// looking each candidate up (a string-keyed map lookup per candidate, mostly cache misses at a
// thousand candidates). The owner's `version` changes when it gives an id (a candidate without one
// may have one now: only those are looked up again), `taken` when it takes one back (an id may name
// someone else now: the whole list is looked up again). A frozen list of frozen candidates cannot
// change: passed again (the same array), it is the same list without the comparison (the fleet
// simulator's routers pass one such list; three owners compared its 1,024 candidates per decision).

/** What the owners' idOf returns for a candidate without an id. */
const NONE = -1;

export class CandidateIds {
  // The last list, as columns: the comparison reads one object per candidate, not two.
  private instances: string[] = [];
  private ranks: number[] = [];
  private ids = new Int32Array(0);
  /** The last list itself, when it and every candidate in it are frozen (then it is known by identity); else null. */
  private frozen: ReadonlyArray<{ instance: string; dpRank: number }> | null = null;
  /** Positions of the list's candidates without an id. */
  private missing: number[] = [];
  private version = -1;
  private taken = -1;
  /** Lists seen that differed from the one before (what a per-list cache of the caller's keys on). */
  lists = 0;

  /**
   * The ids of the list's candidates, in order (`idOf` where the list, `taken` or, for those without
   * one, `version` changed). The same array is returned only while its ids are the same.
   */
  of(
    candidates: ReadonlyArray<{ instance: string; dpRank: number }>,
    version: number,
    idOf: (instance: string, dpRank: number) => number,
    taken = 0,
  ): Int32Array {
    const k = candidates.length;
    const { instances, ranks } = this;
    let same = k === instances.length && taken === this.taken;
    for (let j = candidates === this.frozen ? k : 0; same && j < k; j++) {
      const c = candidates[j];
      same = c.instance === instances[j] && c.dpRank === ranks[j];
    }
    if (same) {
      if (version !== this.version) {
        // Ids were given since, none taken back: only the candidates without one may have one now.
        // Changed ids go to a new array: the same array always means the same ids (IndexWalk keeps
        // its wanted marks while the array stays).
        const still: number[] = [];
        let ids = this.ids;
        for (const j of this.missing) {
          const id = idOf(instances[j], ranks[j]);
          if (id === NONE) {
            still.push(j);
            continue;
          }
          if (ids === this.ids) ids = ids.slice();
          ids[j] = id;
        }
        this.ids = ids;
        this.missing = still;
        this.version = version;
      }
      return this.ids;
    }
    this.lists++;
    const ids = new Int32Array(k);
    const missing: number[] = [];
    for (let j = 0; j < k; j++) {
      ids[j] = idOf(candidates[j].instance, candidates[j].dpRank);
      if (ids[j] === NONE) missing.push(j);
    }
    this.instances = candidates.map((c) => c.instance);
    this.ranks = candidates.map((c) => c.dpRank);
    this.frozen = Object.isFrozen(candidates) && candidates.every((c) => Object.isFrozen(c)) ? candidates : null;
    this.ids = ids;
    this.missing = missing;
    this.version = version;
    this.taken = taken;
    return ids;
  }
}
