// Instance health as a pure state machine: consecutive failures eject an instance for a backoff that
// doubles with every ejection; once it has passed the instance is tried again (probation) and a
// success readmits it. Probes and proxied requests feed the same record.
export interface HealthOptions {
  failureThreshold: number;
  ejectionBaseMs: number;
  ejectionMaxMs: number;
}

export type HealthState = 'healthy' | 'ejected' | 'probation';

export class InstanceHealth {
  private failures = 0;
  private ejections = 0;
  private ejectedUntil = 0;
  private state: HealthState = 'healthy';
  lastError: string | null = null;

  constructor(private opts: HealthOptions) {}

  /** New thresholds (a reload); the record so far is kept and judged by them from now on. */
  configure(opts: HealthOptions): void {
    this.opts = opts;
  }

  status(now: number): HealthState {
    if (this.state === 'ejected' && now >= this.ejectedUntil) this.state = 'probation';
    return this.state;
  }

  /** May requests be sent now? (healthy, or probation after the ejection elapsed) */
  available(now: number): boolean {
    return this.status(now) !== 'ejected';
  }

  /** Returns true when this success readmitted an ejected instance. */
  success(): boolean {
    const readmitted = this.state !== 'healthy';
    this.failures = 0;
    this.state = 'healthy';
    if (readmitted) this.ejections = Math.max(0, this.ejections - 1);
    this.lastError = null;
    return readmitted;
  }

  /** Returns true when this failure ejected the instance. */
  failure(now: number, error: string): boolean {
    this.lastError = error;
    this.failures++;
    const st = this.status(now);
    if (st === 'probation' || (st === 'healthy' && this.failures >= this.opts.failureThreshold)) {
      this.ejections++;
      const ms = Math.min(this.opts.ejectionMaxMs, this.opts.ejectionBaseMs * 2 ** (this.ejections - 1));
      this.ejectedUntil = now + ms;
      this.state = 'ejected';
      return true;
    }
    return false;
  }

  snapshot(now: number): {
    state: HealthState;
    consecutive_failures: number;
    ejected_until: number | null;
    last_error: string | null;
  } {
    const state = this.status(now);
    return {
      state,
      consecutive_failures: this.failures,
      ejected_until: state === 'ejected' ? this.ejectedUntil : null,
      last_error: this.lastError,
    };
  }
}
