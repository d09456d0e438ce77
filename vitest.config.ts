import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/global-setup.ts'],
    // Bounds, not expectations: every wait inside is for a condition. A loaded 2-core machine (CI
    // beside other builds) can take tens of seconds to start a process that takes 2 s when idle.
    testTimeout: 180_000,
    hookTimeout: 180_000,
    // Integration tests start real processes; two cores, so keep parallelism modest.
    maxWorkers: 2,
    reporters: ['default'],
  },
});
