// An approximate radix tree of request text, shared by all workers of a model (SGLang Model Gateway's
// `Tree` / `TokenTree`, reimplemented from smg-project/smg crates/kv_index/src/string_tree.rs and
// token_tree.rs at f8daa88): each node holds a run of symbols and the tenants (workers) whose routed
// prompts passed through it, with the time each last did. A match walks the longest prefix and
// reports the tenants of the node it ends in (a partial edge counts into that node); eviction
// removes the least recently used (tenant, leaf) pairs until the tree's total size fits.
// Sizes count a node's symbols once per tenant holding it, as SMG's per-tenant char counts do.

interface Node {
  edge: Uint32Array;
  children: Map<number, Node>;
  /** Tenant -> last access (a counter: only the order matters). */
  tenants: Map<string, number>;
  parent: Node | null;
}

export interface TreeMatch {
  /** Symbols of the input on the matched path (page-aligned in page mode). */
  matched: number;
  /** Symbols of the input (the whole input, as SMG's input counts). */
  input: number;
  /** Tenants of the node the match ends in, at most `cap`, in the order they joined it (empty without a match). */
  tenants: string[];
}

const node = (edge: Uint32Array, parent: Node | null): Node => ({
  edge,
  children: new Map(),
  tenants: new Map(),
  parent,
});

export class TextTree {
  private readonly root = node(new Uint32Array(0), null);
  private readonly sizeOf = new Map<string, number>();
  private clock = 0;

  /** `page`: only whole pages of this many symbols are matched and kept (SMG's token tree: 16); 1 for characters. */
  constructor(private readonly page = 1) {}

  private aligned(s: Uint32Array): Uint32Array {
    return this.page <= 1 ? s : s.subarray(0, Math.floor(s.length / this.page) * this.page);
  }

  match(symbols: Uint32Array, cap = 8): TreeMatch {
    const s = this.aligned(symbols);
    let at = 0;
    let cur = this.root;
    while (at < s.length) {
      const child = cur.children.get(s[at]);
      if (!child) break;
      const n = common(child.edge, s, at);
      at += n;
      cur = child;
      if (n < child.edge.length) break;
    }
    const matched = this.page <= 1 ? at : Math.floor(at / this.page) * this.page;
    const tenants = matched > 0 ? [...cur.tenants.keys()].slice(0, cap) : [];
    return { matched, input: symbols.length, tenants };
  }

  /** Record that `tenant` was routed this text: every node on its path is marked, split where it diverges. */
  insert(symbols: Uint32Array, tenant: string): void {
    const s = this.aligned(symbols);
    const t = ++this.clock;
    let at = 0;
    let cur = this.root;
    this.mark(cur, tenant, t);
    while (at < s.length) {
      let child = cur.children.get(s[at]);
      if (!child) {
        child = node(s.slice(at), cur);
        cur.children.set(s[at], child);
      } else {
        const n = common(child.edge, s, at);
        if (n < child.edge.length) child = this.split(child, n);
      }
      at += child.edge.length;
      this.mark(child, tenant, t);
      cur = child;
    }
  }

  /** Total symbols held over all tenants. */
  size(): number {
    let n = 0;
    for (const v of this.sizeOf.values()) n += v;
    return n;
  }

  /** Evict least recently used (tenant, leaf) pairs until size() <= maxSize. */
  evict(maxSize: number): void {
    if (this.size() <= maxSize) return;
    const leaves: { t: number; tenant: string; n: Node }[] = [];
    const stack: Node[] = [this.root];
    while (stack.length > 0) {
      const n = stack.pop()!;
      for (const c of n.children.values()) stack.push(c);
      if (n === this.root) continue;
      for (const [tenant, t] of n.tenants) if (this.isLeafFor(n, tenant)) leaves.push({ t, tenant, n });
    }
    const heap = new MinHeap(leaves);
    let total = this.size();
    while (total > maxSize) {
      const e = heap.pop();
      if (!e) break;
      const { tenant, n } = e;
      if (!n.tenants.has(tenant) || !this.isLeafFor(n, tenant)) continue;
      n.tenants.delete(tenant);
      this.sizeOf.set(tenant, (this.sizeOf.get(tenant) ?? 0) - n.edge.length);
      total -= n.edge.length;
      const p = n.parent;
      if (n.children.size === 0 && n.tenants.size === 0 && p) p.children.delete(n.edge[0]);
      if (p && p !== this.root && p.tenants.has(tenant) && this.isLeafFor(p, tenant))
        heap.push({ t: p.tenants.get(tenant)!, tenant, n: p });
    }
  }

  /** Forget a tenant everywhere (a worker left). */
  removeTenant(tenant: string): void {
    const order: Node[] = [];
    const stack: Node[] = [this.root];
    while (stack.length > 0) {
      const n = stack.pop()!;
      order.push(n);
      for (const c of n.children.values()) stack.push(c);
    }
    // Children before parents: a node left empty goes, and may leave its parent empty.
    for (let i = order.length - 1; i >= 0; i--) {
      const n = order[i];
      n.tenants.delete(tenant);
      if (n.parent && n.children.size === 0 && n.tenants.size === 0) n.parent.children.delete(n.edge[0]);
    }
    this.sizeOf.delete(tenant);
  }

  private isLeafFor(n: Node, tenant: string): boolean {
    for (const c of n.children.values()) if (c.tenants.has(tenant)) return false;
    return true;
  }

  private mark(n: Node, tenant: string, t: number): void {
    if (!n.tenants.has(tenant) && n !== this.root)
      this.sizeOf.set(tenant, (this.sizeOf.get(tenant) ?? 0) + n.edge.length);
    n.tenants.set(tenant, t);
  }

  /** Cut `child`'s edge after `n` symbols; the new upper node keeps the tenants (they hold the whole path). */
  private split(child: Node, n: number): Node {
    const p = child.parent!;
    const upper = node(child.edge.slice(0, n), p);
    for (const [k, v] of child.tenants) upper.tenants.set(k, v);
    // Each tenant of the child now holds the same symbols in two nodes: sizes do not change.
    child.edge = child.edge.slice(n);
    child.parent = upper;
    upper.children.set(child.edge[0], child);
    p.children.set(upper.edge[0], upper);
    return upper;
  }
}

/** Length of the common prefix of `edge` and `s` from `at`. */
function common(edge: Uint32Array, s: Uint32Array, at: number): number {
  const n = Math.min(edge.length, s.length - at);
  let i = 0;
  while (i < n && edge[i] === s[at + i]) i++;
  return i;
}

class MinHeap<T extends { t: number }> {
  private readonly a: T[];
  constructor(items: T[]) {
    this.a = items;
    for (let i = (this.a.length >> 1) - 1; i >= 0; i--) this.down(i);
  }
  push(x: T): void {
    const a = this.a;
    a.push(x);
    let i = a.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (a[p].t <= a[i].t) break;
      [a[p], a[i]] = [a[i], a[p]];
      i = p;
    }
  }
  pop(): T | undefined {
    const a = this.a;
    if (a.length === 0) return undefined;
    const top = a[0];
    const last = a.pop()!;
    if (a.length > 0) {
      a[0] = last;
      this.down(0);
    }
    return top;
  }
  private down(i: number): void {
    const a = this.a;
    for (;;) {
      const l = 2 * i + 1;
      const r = l + 1;
      let m = i;
      if (l < a.length && a[l].t < a[m].t) m = l;
      if (r < a.length && a[r].t < a[m].t) m = r;
      if (m === i) return;
      [a[m], a[i]] = [a[i], a[m]];
      i = m;
    }
  }
}
