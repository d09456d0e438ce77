// Insertion-ordered eviction queue: the head is evicted first. Map keeps insertion order, so
// push/remove/shift are O(1); re-pushing a key moves it to the tail (most recently freed).

export class Lru<K, V> {
  private readonly map = new Map<K, V>();

  get size(): number {
    return this.map.size;
  }

  has(key: K): boolean {
    return this.map.has(key);
  }

  get(key: K): V | undefined {
    return this.map.get(key);
  }

  /** Append at the tail (evicted last). */
  push(key: K, value: V): void {
    this.map.delete(key);
    this.map.set(key, value);
  }

  delete(key: K): boolean {
    return this.map.delete(key);
  }

  /** Remove and return the head (the eviction victim). */
  shift(): [K, V] | undefined {
    const first = this.map.entries().next();
    if (first.done) return undefined;
    this.map.delete(first.value[0]);
    return first.value;
  }

  values(): IterableIterator<V> {
    return this.map.values();
  }

  clear(): void {
    this.map.clear();
  }
}
