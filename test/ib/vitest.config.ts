import { defineConfig } from 'vitest/config';

// Runs inside the Soft-RoCE guest (test/ib/run.sh): the conformance suite over IB, then the IB tests.
export default defineConfig({
  test: {
    include: ['test/conformance.test.ts', 'test/conformance-confirm.test.ts', 'test/ib/**/*.test.ts'],
    // The kernel suites run in the other guest (vitest.kernel.config.ts).
    exclude: ['test/ib/kernel-*.test.ts', '**/node_modules/**'],
    testTimeout: 120_000,
    hookTimeout: 120_000,
    fileParallelism: false,
    pool: 'forks',
  },
});
