// Eviction queue: the head is evicted first; push appends at the tail (re-pushing moves a key to
// the tail). A doubly linked list indexed by a Map: every operation is O(1). (A bare Map in
// insertion order is not: V8 scans past deleted head entries when asked for the first one.)

interface Node<K, V> {
  key: K;
  value: V;
  prev: Node<K, V> | null;
  next: Node<K, V> | null;
}

export class Lru<K, V> {
  private readonly index = new Map<K, Node<K, V>>();
  private head: Node<K, V> | null = null;
  private tail: Node<K, V> | null = null;

  get size(): number {
    return this.index.size;
  }

  has(key: K): boolean {
    return this.index.has(key);
  }

  get(key: K): V | undefined {
    return this.index.get(key)?.value;
  }

  /** Append at the tail (evicted last). */
  push(key: K, value: V): void {
    let node = this.index.get(key);
    if (node) this.unlink(node);
    else {
      node = { key, value, prev: null, next: null };
      this.index.set(key, node);
    }
    node.value = value;
    node.prev = this.tail;
    node.next = null;
    if (this.tail) this.tail.next = node;
    else this.head = node;
    this.tail = node;
  }

  delete(key: K): boolean {
    const node = this.index.get(key);
    if (!node) return false;
    this.unlink(node);
    this.index.delete(key);
    return true;
  }

  /** Remove and return the head (the eviction victim). */
  shift(): [K, V] | undefined {
    const node = this.head;
    if (!node) return undefined;
    this.unlink(node);
    this.index.delete(node.key);
    return [node.key, node.value];
  }

  /** Values from head (next victim) to tail. */
  *values(): IterableIterator<V> {
    for (let n = this.head; n; n = n.next) yield n.value;
  }

  clear(): void {
    this.index.clear();
    this.head = this.tail = null;
  }

  private unlink(node: Node<K, V>): void {
    if (node.prev) node.prev.next = node.next;
    else this.head = node.next;
    if (node.next) node.next.prev = node.prev;
    else this.tail = node.prev;
    node.prev = node.next = null;
  }
}
