// Values per worker (instance, dp rank), found through the instance string itself: a lookup builds
// no key string (a fresh `${instance}\u0000${dpRank}` is hashed on every use), which on the
// routing path is paid per candidate of every decision.
export class WorkerMap<V> {
  private readonly byInstance = new Map<string, Array<V | undefined>>();
  private count = 0;

  get size(): number {
    return this.count;
  }

  get(instance: string, dpRank: number): V | undefined {
    // (An empty map, e.g. no request in flight anywhere, answers without hashing the name.)
    return this.count === 0 ? undefined : this.byInstance.get(instance)?.[dpRank];
  }

  set(instance: string, dpRank: number, value: V): void {
    let ranks = this.byInstance.get(instance);
    if (!ranks) this.byInstance.set(instance, (ranks = []));
    if (ranks[dpRank] === undefined) this.count++;
    ranks[dpRank] = value;
  }

  delete(instance: string, dpRank: number): boolean {
    const ranks = this.byInstance.get(instance);
    if (ranks?.[dpRank] === undefined) return false;
    ranks[dpRank] = undefined;
    this.count--;
    if (ranks.every((v) => v === undefined)) this.byInstance.delete(instance);
    return true;
  }

  /** Forget every dp rank of an instance; returns how many there were. */
  deleteInstance(instance: string): number {
    const ranks = this.byInstance.get(instance);
    if (!ranks) return 0;
    const n = ranks.filter((v) => v !== undefined).length;
    this.byInstance.delete(instance);
    this.count -= n;
    return n;
  }

  clear(): void {
    this.byInstance.clear();
    this.count = 0;
  }

  *values(): IterableIterator<V> {
    for (const ranks of this.byInstance.values()) for (const v of ranks) if (v !== undefined) yield v;
  }
}
