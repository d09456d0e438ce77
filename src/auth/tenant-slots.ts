// Tenants' concurrency slots counted in one place for several router processes. Replica sync's
// reports (tenant-usage.ts) reach the other processes only at the end of an event-loop turn, so
// requests that arrive at two processes at once could each be admitted against a count that does
// not hold the other's yet. Where one owner can see every process (the `serve --workers` primary),
// it keeps the only count: a process asks it for a slot before it admits a request of a tenant
// with a concurrency cap, and gives the slot back when the request ends. Pure: the owner's
// transport (the IPC channel) is in src/processes.
//
// Invariants
// - A tenant never holds more than its limit: a claim is granted only while fewer are held.
// - Every grant is freed once: by its holder, or all of a holder's at once when it goes away (a
//   router process that exits), so a dead process never locks a tenant out.
// - A free of an unknown grant (already freed, or its holder dropped) changes nothing.

/** The owner's answer to a claim: the slot is taken (`granted`), or all `held` are. */
export type SlotClaim = { granted: true } | { granted: false; held: number };

/** What a router process asks of the owner of the count (through its transport). */
export interface SlotOwner {
  /**
   * One of the tenant's `limit` slots: the grant to give back with `free`, the number held when
   * none is left, or null when the owner did not answer (its process is gone or stuck).
   */
  claim(tenant: string, limit: number): Promise<{ grant: number } | { held: number } | null>;
  /** Gives a granted slot back (exactly once per grant). */
  free(grant: number): void;
}

export class TenantSlots {
  /** Tenant -> slots held on the whole router. */
  private readonly held = new Map<string, number>();
  /** Holder (a router process) -> its grant ids -> tenant. */
  private readonly grants = new Map<number, Map<number, string>>();

  /** Holder `holder` asks for a slot of `tenant` under grant id `grant` (unique per holder). */
  claim(holder: number, grant: number, tenant: string, limit: number): SlotClaim {
    const n = this.held.get(tenant) ?? 0;
    if (n >= limit) return { granted: false, held: n };
    let mine = this.grants.get(holder);
    if (!mine) this.grants.set(holder, (mine = new Map()));
    mine.set(grant, tenant);
    this.held.set(tenant, n + 1);
    return { granted: true };
  }

  free(holder: number, grant: number): void {
    const mine = this.grants.get(holder);
    const tenant = mine?.get(grant);
    if (tenant === undefined) return;
    mine!.delete(grant);
    if (mine!.size === 0) this.grants.delete(holder);
    this.releaseOne(tenant);
  }

  /** The holder went away: every slot it held is free. Returns how many. */
  dropHolder(holder: number): number {
    const mine = this.grants.get(holder);
    if (!mine) return 0;
    this.grants.delete(holder);
    for (const tenant of mine.values()) this.releaseOne(tenant);
    return mine.size;
  }

  /** Slots of the tenant held on the whole router. */
  heldOf(tenant: string): number {
    return this.held.get(tenant) ?? 0;
  }

  private releaseOne(tenant: string): void {
    const n = (this.held.get(tenant) ?? 0) - 1;
    if (n > 0) this.held.set(tenant, n);
    else this.held.delete(tenant);
  }
}
