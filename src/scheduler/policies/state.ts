// The state of the policies that remember across requests, one per (model pool, policy), and the
// routing of booking events to the state that booked them. The Scheduler owns one of these.
import type { BookedEvent, PolicySpec } from './types.js';

interface Held {
  spec: PolicySpec;
  state: unknown;
}

export class PolicyStates {
  private readonly byPool = new Map<string, Map<string, unknown>>();
  /** Bookings whose policy wants to hear of their first token or end. */
  private readonly open = new Map<string, Held>();

  /** The pool's state for a policy (undefined for a stateless one), made on first use. */
  of(pool: string, spec: PolicySpec): unknown {
    if (!spec.createState) return undefined;
    let m = this.byPool.get(pool);
    if (!m) this.byPool.set(pool, (m = new Map()));
    if (!m.has(spec.name)) m.set(spec.name, spec.createState());
    return m.get(spec.name);
  }

  booked(pool: string, spec: PolicySpec, e: BookedEvent): void {
    if (!spec.createState) return;
    const state = this.of(pool, spec);
    spec.booked?.(state, e);
    if (spec.prefillDone || spec.freed) this.open.set(e.requestId, { spec, state });
  }

  prefillDone(requestId: string): void {
    const h = this.open.get(requestId);
    h?.spec.prefillDone?.(h.state, requestId);
  }

  freed(requestId: string): void {
    const h = this.open.get(requestId);
    if (!h) return;
    this.open.delete(requestId);
    h.spec.freed?.(h.state, requestId);
  }

  dropInstance(instance: string, specOf: (name: string) => PolicySpec): void {
    for (const m of this.byPool.values()) for (const [name, state] of m) specOf(name).dropInstance?.(state, instance);
  }
}
