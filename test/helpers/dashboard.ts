// Dashboard values for tests that drive the hub or a source without a router behind it.
import type { DashboardSnapshot } from '../../src/dashboard/source.js';

/** A snapshot with nothing in it; `over` replaces whole fields. */
export const emptySnapshot = (over: Partial<DashboardSnapshot> = {}): DashboardSnapshot => ({
  time: 0,
  models: [],
  instances: [],
  events: {},
  listeners: {},
  prefix: { prompt_tokens: 0, overlap_tokens: 0 },
  requests: { total: 0, errors: 0 },
  bookings: 0,
  queue_depth: 0,
  index: { namespaces: 0, blocks: 0, records: 0, bytes: 0 },
  ...over,
});
