// prom-client metrics whose per-request children skip prom-client's per-call label work.
// prom-client's `labels(...).observe(v)` / `.inc()` still converts, validates and hashes the
// child's label object on every call (~0.2-0.4 µs in a loop, ~2 µs cold on the request path, and
// the router observes five histograms and one counter per request). A child here is an index into
// plain arrays, bound once per label set. Exposition, JSON (the `--workers` aggregation) and reset
// stay prom-client's: these classes only add their children's values to what prom-client exports
// (test/unit/lean-metrics.test.ts compares the text and JSON with prom-client's own metrics). After
// a reset, the series keep the order they were first made in (prom-client's follow the next
// observations): the same series and values, possibly in another order.
import { Counter, Histogram } from 'prom-client';

export interface HistogramChild {
  observe(value: number): void;
}

export interface CounterChild {
  inc(value?: number): void;
}

type Labels = Record<string, string | number>;

class HistogramSeries implements HistogramChild {
  /** Observations per bucket (not cumulative), one slot per upper bound. */
  readonly counts: Float64Array;
  sum = 0;
  count = 0;

  constructor(
    readonly labels: Labels,
    private readonly bounds: readonly number[],
  ) {
    this.counts = new Float64Array(bounds.length);
  }

  observe(value: number): void {
    if (!Number.isFinite(value)) throw new TypeError(`Value is not a valid number: ${value}`);
    const b = this.bounds;
    for (let i = 0; i < b.length; i++) {
      if (value <= b[i]) {
        this.counts[i]++;
        break;
      }
    }
    this.sum += value;
    this.count++;
  }

  zero(): void {
    this.counts.fill(0);
    this.sum = 0;
    this.count = 0;
  }
}

interface ExportedValue {
  labels: Labels;
  sharedLabels?: Labels;
  value: number;
  metricName?: string;
  exemplar?: null;
}

/** Label values in the metric's label order: the key of a child. */
function keyOf(labelNames: readonly string[], labels: Labels): string {
  let k = '';
  // (a missing label is not the empty string: prom-client exports them as two series)
  for (const n of labelNames) k += labels[n] === undefined ? '\u0001\u0000' : `${labels[n]}\u0000`;
  return k;
}

function checkLabels(metric: string, labelNames: readonly string[], labels: Labels): void {
  for (const k of Object.keys(labels))
    if (!labelNames.includes(k))
      throw new Error(
        `Added label "${k}" is not included in initial labelset: ${JSON.stringify(labelNames)} (${metric})`,
      );
}

/** A Histogram with `child(labels)`: bound observers exported with the library's own series. */
export class LeanHistogram<T extends string = string> extends Histogram<T> {
  private readonly series = new Map<string, HistogramSeries>();

  /** The observer for these label values (made once; hold on to it). */
  child(labels: Partial<Record<T, string | number>>): HistogramChild {
    const self = this as unknown as { name: string; labelNames: readonly string[]; upperBounds: readonly number[] };
    const key = keyOf(self.labelNames, labels as Labels);
    let s = this.series.get(key);
    if (s === undefined) {
      checkLabels(self.name, self.labelNames, labels as Labels);
      s = new HistogramSeries({ ...(labels as Labels) }, self.upperBounds);
      this.series.set(key, s);
    }
    return s;
  }

  /** prom-client's export, then each child that has observed something, in the library's value shape. */
  async getForPromString(): Promise<{
    name: string;
    help: string;
    type: string;
    values: ExportedValue[];
    aggregator: string;
  }> {
    const base = Histogram.prototype as unknown as {
      getForPromString(
        this: Histogram<T>,
      ): Promise<{ name: string; help: string; type: string; values: ExportedValue[]; aggregator: string }>;
    };
    const data = await base.getForPromString.call(this);
    const name = `${data.name}_bucket`;
    const bounds = (this as unknown as { upperBounds: readonly number[] }).upperBounds;
    for (const s of this.series.values()) {
      if (s.count === 0) continue;
      let acc = 0;
      for (let i = 0; i < bounds.length; i++) {
        acc += s.counts[i];
        data.values.push({
          labels: { le: bounds[i] },
          sharedLabels: s.labels,
          value: acc,
          metricName: name,
          exemplar: null,
        });
      }
      data.values.push(
        { labels: { le: '+Inf' }, sharedLabels: s.labels, value: s.count, metricName: name, exemplar: null },
        { labels: {}, sharedLabels: s.labels, value: s.sum, metricName: `${data.name}_sum`, exemplar: undefined },
        { labels: {}, sharedLabels: s.labels, value: s.count, metricName: `${data.name}_count`, exemplar: undefined },
      );
    }
    return data;
  }

  override reset(): void {
    super.reset();
    // prom-client's constructor resets before this class's fields exist.
    for (const s of this.series?.values() ?? []) s.zero();
  }
}

class CounterSeries implements CounterChild {
  value = 0;
  /** Incremented since made or reset: prom-client exports a series from its first inc (0 included). */
  touched = false;
  constructor(readonly labels: Labels) {}

  inc(value = 1): void {
    if (!Number.isFinite(value)) throw new TypeError(`Value is not a valid number: ${value}`);
    if (value < 0) throw new Error('It is not possible to decrease a counter');
    this.value += value;
    this.touched = true;
  }
}

/** A Counter with `child(labels)`: bound incrementers exported with the library's own series. */
export class LeanCounter<T extends string = string> extends Counter<T> {
  private readonly series = new Map<string, CounterSeries>();

  child(labels: Partial<Record<T, string | number>>): CounterChild {
    const self = this as unknown as { name: string; labelNames: readonly string[] };
    const key = keyOf(self.labelNames, labels as Labels);
    let s = this.series.get(key);
    if (s === undefined) {
      checkLabels(self.name, self.labelNames, labels as Labels);
      s = new CounterSeries({ ...(labels as Labels) });
      this.series.set(key, s);
    }
    return s;
  }

  override async get(): ReturnType<Counter<T>['get']> {
    const data = await super.get();
    for (const s of this.series.values())
      if (s.touched)
        data.values.push({ value: s.value, labels: { ...s.labels } as Partial<Record<T, string | number>> });
    return data;
  }

  override reset(): void {
    super.reset();
    for (const s of this.series?.values() ?? []) {
      s.value = 0;
      s.touched = false;
    }
  }
}
